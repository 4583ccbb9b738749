"""`DrainQueue`: pumps woken in a loop turn drain at its end, or in bursts as soon as enough are
due; one queue per loop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, MutableMapping
from typing import Any

import pytest

from airlane.core import Event
from airlane.hub import MemoryHub
from airlane.runtime.drains import DEFAULT_BURST, DrainQueue, drain_queue
from airlane.transports.http.metrics import HttpMetrics
from airlane.transports.http.sse_pump import SSEPump
from tests.waiting import eventually


async def _next_turn() -> None:
    # One sleep(0) lets the call-backs scheduled so far run; two leave a margin for the
    # queue's own call-back, which is scheduled behind whatever was added first.
    await asyncio.sleep(0)
    await asyncio.sleep(0)


async def test_drains_run_at_the_end_of_the_turn_in_order() -> None:
    queue = DrainQueue(asyncio.get_running_loop(), burst=10)
    ran: list[int] = []
    for i in range(3):
        queue.add(lambda i=i: ran.append(i))
    assert ran == []  # nothing runs inside add below a burst
    await _next_turn()
    assert ran == [0, 1, 2]
    await _next_turn()
    assert ran == [0, 1, 2]  # each once


async def test_a_full_burst_runs_at_once_and_the_rest_at_the_turns_end() -> None:
    queue = DrainQueue(asyncio.get_running_loop(), burst=4)
    ran: list[int] = []
    for i in range(10):
        queue.add(lambda i=i: ran.append(i))
        if i == 3:
            assert ran == [0, 1, 2, 3]  # the fourth completed a burst: run in add
    assert ran == list(range(8))  # two bursts so far; 8 and 9 wait for the turn's end
    await _next_turn()
    assert ran == list(range(10))


async def test_a_drain_that_adds_itself_again_runs_on_the_next_turn() -> None:
    loop = asyncio.get_running_loop()
    queue = DrainQueue(loop, burst=100)
    turns: list[int] = []

    def drain() -> None:
        turns.append(len(turns))
        if len(turns) < 3:
            queue.add(drain)  # a reader far behind: let the loop run, then go on

    queue.add(drain)
    await asyncio.sleep(0)
    # Had the re-added drain run in the same turn, all three would have run by now.
    assert len(turns) < 3
    for _ in range(6):
        await asyncio.sleep(0)
    assert turns == [0, 1, 2]


async def test_a_failing_drain_is_reported_and_the_others_still_run() -> None:
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    try:
        queue = DrainQueue(loop, burst=10)
        ran: list[str] = []

        def broken() -> None:
            raise RuntimeError("pump bug")

        queue.add(lambda: ran.append("before"))
        queue.add(broken)
        queue.add(lambda: ran.append("after"))
        await _next_turn()
    finally:
        loop.set_exception_handler(None)
    assert ran == ["before", "after"]
    assert len(reported) == 1
    assert isinstance(reported[0]["exception"], RuntimeError)
    assert "drain" in reported[0]["message"]


async def test_one_queue_per_loop() -> None:
    loop = asyncio.get_running_loop()
    assert drain_queue(loop) is drain_queue(loop)
    other = asyncio.new_event_loop()
    try:
        assert drain_queue(other) is not drain_queue(loop)
    finally:
        other.close()


def test_burst_must_be_positive() -> None:
    loop = asyncio.new_event_loop()
    try:
        with pytest.raises(ValueError, match="burst"):
            DrainQueue(loop, burst=0)
        assert DrainQueue(loop)._burst == DEFAULT_BURST
    finally:
        loop.close()


async def test_a_long_turn_writes_its_first_sse_streams_before_it_ends() -> None:
    """A producer that appends to many streams in one call-back (a pacer, a busy loop turn of
    upstream reads) does not hold every write until the turn ends: once a burst of pumps is
    due, they drain in the middle of it (`airlane.runtime.drains`)."""
    count = 2 * DEFAULT_BURST + 3
    hub = MemoryHub()
    written: list[int] = []
    async with contextlib.AsyncExitStack() as stack:
        pumps = await _start_pumps(hub, stack, count, lambda i, body: written.append(i))
        append = [hub.appender(f"s{i}") for i in range(count)]
        for i, put in enumerate(append):  # one stretch, no await: one loop turn
            assert put is not None
            put([Event.delta(f"{i}")])
        assert written == list(range(2 * DEFAULT_BURST))  # two bursts went out in place
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        assert sorted(written) == list(range(count))  # the rest at the turn's end
        for put in append:
            assert put is not None
            put([Event.done()])
        assert all(await asyncio.wait_for(asyncio.gather(*pumps), 5))
    await hub.aclose()


async def _start_pumps(
    hub: MemoryHub,
    stack: contextlib.AsyncExitStack,
    count: int,
    write: Callable[[int, bytes], None],
) -> list[asyncio.Task[bool]]:
    """Direct-mode SSE pumps of streams ``s0``... (created here unless they exist), each
    writing through ``write(i, body)``; returned once every one is listening."""
    pumps: list[asyncio.Task[bool]] = []
    receiving = 0

    async def never() -> MutableMapping[str, Any]:
        # A direct pump waits here for its client to leave, after it began to listen.
        nonlocal receiving
        receiving += 1
        return await _never()

    for i in range(count):
        await hub.create(f"s{i}", exist_ok=True)
        subscription = await stack.enter_async_context(await hub.subscribe(f"s{i}"))
        pump = SSEPump(
            _discard,
            never,
            ping_s=5,
            batch_limit=64,
            metrics=HttpMetrics(hub.stats, lambda: 0),
            write_body=lambda body, i=i: write(i, body) is None,
        )
        pumps.append(asyncio.create_task(pump.pump(subscription, render)))
    await eventually(lambda: receiving == count, what=f"{count} pumps listening")
    return pumps


async def _discard(message: MutableMapping[str, Any]) -> None:
    pass


async def _never() -> MutableMapping[str, Any]:
    await asyncio.Event().wait()
    raise AssertionError("unreachable")


def render(batch: list[Event]) -> bytes:
    return b"".join(b"data: %b\n\n" % e.text.encode() for e in batch if e.text)


@pytest.mark.parametrize("ending", ["hub-close", "delete-each", "cancel-each"])
async def test_many_pumps_ended_in_one_stretch_all_finish(ending: str) -> None:
    """Ending 100 streams in one loop turn (the hub closing, or each stream deleted or
    cancelled without an await between them) drains their pumps in bursts from inside the
    hub's own call; every pump still ends, each with what it owed written once."""
    count = 3 * DEFAULT_BURST + 4
    hub = MemoryHub()
    bodies: dict[int, list[bytes]] = {i: [] for i in range(count)}
    async with contextlib.AsyncExitStack() as stack:
        for i in range(count):
            await hub.create(f"s{i}")
            await hub.append(f"s{i}", Event.delta(f"{i}"))
        pumps = await _start_pumps(hub, stack, count, lambda i, body: bodies[i].append(body))
        if ending == "hub-close":
            await hub.aclose()
        else:
            for i in range(count):
                if ending == "delete-each":
                    await hub.delete(f"s{i}")
                else:
                    await hub.cancel(f"s{i}")
        results = await asyncio.wait_for(asyncio.gather(*pumps), 5)
    assert all(results)  # each run ended with its stream (or the hub), not with an error
    # Each stream's delta exactly once (`render` gives the terminal event no bytes).
    assert all(b"".join(parts) == b"data: %d\n\n" % i for i, parts in bodies.items())
    await hub.aclose()
