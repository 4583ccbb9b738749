"""New streams' set-up waits while timed work is due: first come, first admitted, in batches
that fit a slice of a loop turn, never starved; a loop without deadline sources admits at once.

The tests of how a batch is fitted give the admission a `VirtualClock` (the ``clock`` fixture)
and move it by what each set-up and each loop turn costs, rather than sleeping that long: the
costs are then exactly what the test says, where a sleep on a busy machine overruns."""

from __future__ import annotations

import asyncio
import gc
import time
from typing import Any

import pytest

from airlane.backends.pacing import Pacer
from airlane.runtime import admission as admission_module
from airlane.runtime.admission import MAX_BATCH, MIN_BATCH, Admission, AdmissionConfig
from tests.waiting import VirtualClock


class Deadlines:
    """A deadline source whose due work the test switches on and off."""

    def __init__(self, due: bool = False) -> None:
        self.due = due
        self.asked = 0

    def overdue(self, now_ns: int) -> bool:
        self.asked += 1
        return self.due


SLICE_ONLY_SHARE = 0.25
"""A share small enough that, in a loop doing nothing but half-millisecond set-ups, its part of
the time between releases stays under the one-millisecond slice: for the tests of the slice.
(At the default, half, the set-ups' own time between releases, a millisecond of them plus the
loop timer's rounding, can reach two milliseconds, and half of that is a slice.)"""


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> VirtualClock:
    """The clock the admission measures set-ups and loop turns with, moved by the test."""
    fake = VirtualClock()
    monkeypatch.setattr(admission_module, "time", fake)
    return fake


SET_UP_S = 0.0005
"""What one set-up costs in the tests of batch sizes: half a millisecond of work, no wait."""


def due_admission(share: float | None = None) -> tuple[Admission, Deadlines]:
    """An admission with one source that has work due (and ``share`` if given); the caller must
    keep the source (the admission holds it weakly)."""
    admission = Admission()
    if share is not None:
        admission.configure(AdmissionConfig(share=share))
    source = Deadlines(due=True)
    admission.register(source)
    return admission, source


async def admitted(admission: Admission, log: list[Any], item: object) -> None:
    """Wait for ``admission``, then note ``item`` in ``log``."""
    await admission.admit()
    log.append(item)


async def test_without_deadline_sources_every_request_is_admitted_at_once() -> None:
    admission = Admission()
    for _ in range(100):
        await admission.admit()
    assert admission.deferred == 0
    assert admission.waiting == 0


async def test_while_work_is_due_requests_wait_and_are_admitted_in_arrival_order() -> None:
    admission, _source = due_admission()
    order: list[int] = []
    tasks = [asyncio.create_task(admitted(admission, order, n)) for n in range(20)]
    await asyncio.sleep(0)  # every request has asked
    assert order == []
    assert admission.waiting == 20
    # The source stays due: requests are still let through, batch by batch, never starved.
    await asyncio.wait_for(asyncio.gather(*tasks), 5)
    assert order == list(range(20))
    assert admission.deferred == 20
    assert admission.waiting == 0


async def test_a_request_arriving_behind_waiting_ones_queues_even_when_nothing_is_due() -> None:
    admission, source = due_admission()
    order: list[str] = []
    first = asyncio.create_task(admitted(admission, order, "first"))
    await asyncio.sleep(0)
    source.due = False  # the due work was served, but "first" still waits for its release
    second = asyncio.create_task(admitted(admission, order, "second"))
    await asyncio.wait_for(asyncio.gather(first, second), 5)
    assert order == ["first", "second"]


async def test_one_release_lets_a_batch_go_and_fits_it_to_the_set_ups_cost(
    clock: VirtualClock,
) -> None:
    admission, _source = due_admission(SLICE_ONLY_SHARE)
    # Requests let go by one release all see the same number still waiting behind them.
    left_behind: list[int] = []

    async def request() -> None:
        await admission.admit()
        left_behind.append(admission.waiting)
        clock.advance(SET_UP_S)  # a set-up's half millisecond of work, without a wait

    await asyncio.wait_for(asyncio.gather(*(request() for _ in range(40))), 10)
    batches = [left_behind.count(waiting) for waiting in sorted(set(left_behind), reverse=True)]
    assert sum(batches) == 40
    assert batches[0] == 8  # the first release, before anything was measured
    # Half a millisecond each against a slice of a millisecond: the smallest batch after.
    assert set(batches[1:]) == {MIN_BATCH}
    assert admission.batch == MIN_BATCH
    assert MIN_BATCH <= admission.batch <= MAX_BATCH


async def test_a_cancelled_waiter_gives_up_its_place() -> None:
    admission, _source = due_admission()
    order: list[str] = []
    gone = asyncio.create_task(admitted(admission, order, "gone"))
    stays = asyncio.create_task(admitted(admission, order, "stays"))
    await asyncio.sleep(0)
    gone.cancel()
    await asyncio.wait_for(stays, 5)
    assert order == ["stays"]
    assert gone.cancelled()


async def test_sources_are_held_weakly() -> None:
    admission = Admission()
    admission.register(Deadlines(due=True))
    gc.collect()
    assert not admission.due()
    await admission.admit()
    assert admission.deferred == 0


def test_each_loop_has_its_own_admission_and_lets_it_go_with_the_loop() -> None:
    async def mine() -> Admission:
        return Admission.for_loop()

    first_loop, second_loop = asyncio.new_event_loop(), asyncio.new_event_loop()
    try:
        first = first_loop.run_until_complete(mine())
        assert first_loop.run_until_complete(mine()) is first
        assert second_loop.run_until_complete(mine()) is not first
    finally:
        first_loop.close()
        second_loop.close()
    from airlane.runtime import admission as module

    before = len(module._BY_LOOP)
    del first_loop
    gc.collect()
    assert len(module._BY_LOOP) == before - 1


async def test_a_pacer_with_a_due_millisecond_holds_new_streams_until_its_sleepers_woke() -> None:
    pacer = Pacer.for_loop(None)
    admission = Admission.for_loop()
    events: list[str] = []

    async def sleeper() -> None:
        await pacer.sleep_until(time.monotonic_ns() + 2_000_000)
        events.append("due work")

    async def new_stream() -> None:
        await admission.admit()
        events.append("set-up")

    sleeping = asyncio.create_task(sleeper())
    await asyncio.sleep(0)
    assert not pacer.overdue(time.monotonic_ns())
    # The loop is busy past the sleeper's deadline. Real time on purpose: the pacer keeps its
    # deadlines on the process's own clock, and the loop must really be held for its timer
    # not to have fired.
    time.sleep(0.004)
    assert pacer.overdue(time.monotonic_ns())
    assert admission.due()
    await asyncio.wait_for(asyncio.gather(sleeping, new_stream()), 5)
    assert events == ["due work", "set-up"]
    assert not pacer.overdue(time.monotonic_ns())


async def batches_under_long_turns(
    admission: Admission, clock: VirtualClock, requests: int = 80
) -> list[int]:
    """Admit ``requests`` half-millisecond set-ups while other work fills every loop turn for
    20 ms (a gateway past what its core does on time); the sizes of the releases, in order."""
    loop = asyncio.get_running_loop()
    running = True

    def busy() -> None:
        clock.advance(0.02)
        if running:
            loop.call_soon(busy)

    left_behind: list[int] = []

    async def request() -> None:
        await admission.admit()
        left_behind.append(admission.waiting)
        clock.advance(SET_UP_S)

    busy()
    try:
        await asyncio.wait_for(asyncio.gather(*(request() for _ in range(requests))), 30)
    finally:
        running = False
    batches = [left_behind.count(waiting) for waiting in sorted(set(left_behind), reverse=True)]
    assert sum(batches) == requests
    return batches


async def test_when_loop_turns_are_long_waiting_set_ups_get_a_share_of_them(
    clock: VirtualClock,
) -> None:
    admission, _source = due_admission()
    batches = await batches_under_long_turns(admission, clock)
    # Half of a 20 ms turn is 10 ms: about twenty half-millisecond set-ups a release, where a
    # slice of a millisecond lets two go.
    assert min(batches[2:-1]) >= 2 * MIN_BATCH
    assert admission.batch >= 2 * MIN_BATCH


async def test_the_share_is_configurable(clock: VirtualClock) -> None:
    admission, _source = due_admission()
    admission.configure(AdmissionConfig(share=0.05))  # a millisecond of a 20 ms turn
    batches = await batches_under_long_turns(admission, clock, requests=30)
    assert max(batches[2:]) <= 3
    admission.configure(AdmissionConfig(share=0.75))
    await batches_under_long_turns(admission, clock, requests=120)
    assert admission.batch >= 6 * MIN_BATCH  # 15 ms of a 20 ms turn: about 30


async def test_a_wait_after_an_idle_spell_does_not_count_the_spell_as_a_turn(
    clock: VirtualClock,
) -> None:
    admission, _source = due_admission(SLICE_ONLY_SHARE)
    left_behind: list[int] = []

    async def request() -> None:
        await admission.admit()
        left_behind.append(admission.waiting)
        clock.advance(SET_UP_S)

    await asyncio.wait_for(asyncio.gather(*(request() for _ in range(10))), 5)
    assert admission.batch == MIN_BATCH
    # Nobody waits for 200 ms: no release, and none is remembered.
    clock.advance(0.2)
    await asyncio.sleep(0)
    left_behind.clear()
    await asyncio.wait_for(asyncio.gather(*(request() for _ in range(10))), 5)
    # Had the 200 ms spell counted as a turn, its share (50 ms) would grow the first release.
    batches = [left_behind.count(waiting) for waiting in sorted(set(left_behind), reverse=True)]
    assert batches == [MIN_BATCH] * 5
