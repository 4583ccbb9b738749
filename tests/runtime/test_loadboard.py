"""`LoadBoard`: workers sharing a directory see each other's loads, a new stream goes to the
least loaded sibling only past the margin, streams handed over count there until that
sibling's own count does, and a stopped or silent worker is never chosen; a sibling takes
connections while it holds at most the balance more than this worker and has room under its
descriptor limit."""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from airlane.runtime import loadboard
from airlane.runtime.loadboard import (
    PUBLISH_S,
    SLOTS,
    STALE_S,
    LoadBoard,
    balance,
    board_path,
    margin,
    reserve,
)

LIMIT = 1024
"""The descriptor limit the boards report."""


@pytest.fixture
def loads() -> Iterator[dict[str, int]]:
    yield {"w0": 0, "w1": 0, "w2": 0}


@pytest.fixture
def connections() -> Iterator[dict[str, int]]:
    yield {"w0": 0, "w1": 0, "w2": 0}


@pytest.fixture
async def boards(
    tmp_path: Path, loads: dict[str, int], connections: dict[str, int]
) -> AsyncIterator[list[LoadBoard]]:
    """Workers w0, w1 and w2's boards, started, each reporting its entries of ``loads`` and
    ``connections`` and a limit of `LIMIT` descriptors."""

    def board(index: int) -> LoadBoard:
        name = f"w{index}"
        return LoadBoard(tmp_path, index, f"node-{name}.run", lambda: loads[name])

    started = [board(i) for i in range(3)]
    for index, one in enumerate(started):
        one.start(lambda name=f"w{index}": connections[name], LIMIT)  # type: ignore[misc]
    yield started
    for one in started:
        one.close()


async def test_a_new_stream_goes_to_the_least_loaded_past_the_margin(
    tmp_path: Path, loads: dict[str, int], boards: list[LoadBoard]
) -> None:
    assert board_path(tmp_path).stat().st_size == SLOTS * 64
    assert boards[0].lighter() is None  # all even
    loads.update(w0=1, w1=0, w2=0)
    for board in boards[1:]:
        board.lighter()  # (each writes its slot as it looks)
    assert boards[0].lighter() is None  # one more is within the margin
    loads.update(w0=5, w1=3, w2=2)
    for board in boards[1:]:
        board.lighter()
    assert boards[0].lighter() == "node-w2.run"
    loads.update(w0=40, w1=37, w2=38)  # within 1 + 40 // 16
    for board in boards[1:]:
        board.lighter()
    assert boards[0].lighter() is None
    assert margin(40) == 3


async def test_what_was_handed_counts_there_until_its_own_count_does(
    loads: dict[str, int], boards: list[LoadBoard]
) -> None:
    a, b, c = boards
    c.close()  # two workers
    loads.update(w0=10, w1=0)
    b.lighter()
    handed = 0
    while (name := a.lighter()) is not None:  # b's slot does not change meanwhile
        assert name == "node-w1.run"
        a.gave(name)
        handed += 1
    assert handed == 9  # b at 9 then, a still at 10: within the margin
    loads["w1"] += handed
    await asyncio.sleep(PUBLISH_S * 3)  # b writes its own count: no double counting
    loads["w0"] = 20
    assert a.lighter() == "node-w1.run"


async def test_a_sibling_takes_connections_while_it_holds_at_most_the_balance_more(
    connections: dict[str, int], boards: list[LoadBoard]
) -> None:
    a, _, c = boards
    connections.update(w0=100, w1=100 + balance(100), w2=0)
    await asyncio.sleep(PUBLISH_S * 3)  # (each writes its slot)
    assert a.takes("node-w1.run")  # at the balance
    a.handed("node-w1.run")  # one more, counted there until its own count has it
    assert not a.takes("node-w1.run")
    assert a.takes("node-w2.run")
    assert not c.takes("node-w0.run")  # 100 against none: past the 64 any worker may hold
    assert balance(0) == 64 and balance(100) == 89
    assert a.takes("nobody.run")  # not on the board: not judged here
    connections["w1"] = 100
    await asyncio.sleep(PUBLISH_S * 3)
    assert a.takes("node-w1.run")


async def test_handed_connections_count_there_until_its_own_count_has_grown_by_them(
    connections: dict[str, int], boards: list[LoadBoard], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A handed connection travels over a socket before the sibling counts it, so the
    sibling writing its slot again does not mean it has it: it is counted there until the
    sibling's own count has grown by it (or `HANDED_FOR_S` after the last one went)."""
    a, _, _ = boards
    connections.update(w0=100, w1=100, w2=100)
    await asyncio.sleep(PUBLISH_S * 3)
    handed = 0
    while a.takes("node-w1.run"):
        a.handed("node-w1.run")
        handed += 1
    assert handed == balance(100) + 1  # w1 at 100 + 89 + 1 (in flight): one past
    await asyncio.sleep(PUBLISH_S * 3)  # w1 writes, its count not grown: still in flight
    assert not a.takes("node-w1.run")
    connections["w1"] += handed // 2  # half of them arrived
    await asyncio.sleep(PUBLISH_S * 3)
    assert not a.takes("node-w1.run")
    connections["w1"] += handed - handed // 2  # all of them: no double counting
    await asyncio.sleep(PUBLISH_S * 3)
    assert not a.takes("node-w1.run")  # 190 against 100: past the balance on its own
    connections["w1"] = 150
    await asyncio.sleep(PUBLISH_S * 3)
    assert a.takes("node-w1.run")
    # Connections that never show (the sibling's own closed meanwhile) are forgotten.
    monkeypatch.setattr(loadboard, "HANDED_FOR_S", 0.2)
    for _ in range(40):
        a.handed("node-w1.run")
    assert not a.takes("node-w1.run")
    await asyncio.sleep(0.3)
    assert a.takes("node-w1.run")


async def test_a_sibling_short_of_descriptors_takes_no_connection_and_no_stream(
    loads: dict[str, int], connections: dict[str, int], boards: list[LoadBoard]
) -> None:
    a, _, c = boards
    c.close()
    full = LIMIT - reserve(LIMIT)
    connections.update(w0=full, w1=full)  # balanced, but at the reserve
    loads.update(w0=10, w1=0)
    await asyncio.sleep(PUBLISH_S * 3)
    assert not a.takes("node-w1.run")
    assert a.lighter() is None  # its streams' connections would have no room either
    connections["w1"] = full - 1
    await asyncio.sleep(PUBLISH_S * 3)
    assert a.takes("node-w1.run")
    assert a.lighter() == "node-w1.run"


async def test_a_closed_or_silent_worker_is_never_chosen(
    tmp_path: Path, loads: dict[str, int], boards: list[LoadBoard]
) -> None:
    a, b, c = boards
    c.close()
    loads["w0"] = 10
    assert a.lighter() == "node-w1.run"
    a.gave("node-w1.run")
    b.close()  # a stopping worker empties its slot
    assert a.lighter() is None
    assert not a._given and not a._seen  # nothing kept of a sibling that is gone
    # A killed one leaves its slot as it was: once it has not written for STALE_S, it
    # is passed over (here: written STALE_S and a second ago, with nothing to do).
    stale = time.monotonic_ns() - int((STALE_S + 1) * 1e9)
    with board_path(tmp_path).open("r+b") as raw:
        raw.seek(64)
        raw.write(struct.pack("<QIII44s", stale, 0, 0, LIMIT, b"dead.run"))
    assert a.lighter() is None


async def test_a_sibling_in_the_last_slot_is_seen_past_empty_ones(
    tmp_path: Path, loads: dict[str, int], boards: list[LoadBoard]
) -> None:
    # A scan reads every slot's written-at at once, then only the slots written: one far
    # from the others, past a run of empty ones, is read like a near one.
    last = LoadBoard(tmp_path, SLOTS - 1, "node-last.run", lambda: 0)
    last.start(lambda: 0, LIMIT)
    try:
        loads.update(w0=10, w1=9, w2=9)
        for board in boards[1:]:
            board.lighter()
        assert boards[0].lighter() == "node-last.run"
        assert set(boards[0]._seen) == {"node-w1.run", "node-w2.run", "node-last.run"}
    finally:
        last.close()
    assert boards[0].lighter() is None


def test_slots_and_names_the_board_has_no_room_for_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="slots 0 to"):
        LoadBoard(tmp_path, SLOTS, "w.run", lambda: 0)
    with pytest.raises(ValueError, match="does not fit"):
        LoadBoard(tmp_path, 0, "x" * 45, lambda: 0)
