"""`DeadlineTimer`: fires once by the earliest deadline it was armed with.

Run on a `VirtualTimeLoop`, with its clock patched in as the timer module's ``time``: the
deadlines, the loop's timers and the times a call-back sees are one clock, which moves only
as the test lets time pass, so "by then it has fired" and "by then it cannot have" are exact.
"""

from __future__ import annotations

import asyncio
import gc
import weakref

import pytest

from airlane.runtime import timers
from airlane.runtime.timers import DeadlineTimer
from tests.waiting import VirtualClock, elapse, settle, virtual_clock, virtual_time


@pytest.fixture
def on_loop_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the timer module read the running loop's clock (set once the loop runs)."""

    class LoopTime:
        def monotonic(self) -> float:
            return asyncio.get_running_loop().time()

    monkeypatch.setattr(timers, "time", LoopTime())


@virtual_time
async def test_fires_by_the_earliest_deadline(on_loop_clock: None) -> None:
    clock: VirtualClock = virtual_clock()
    fired: list[float] = []
    timer = DeadlineTimer(lambda: fired.append(clock.monotonic()))
    start = clock.monotonic()
    timer.arm(start + 0.2)
    timer.arm(start + 0.02)  # earlier: replaces the pending call
    timer.arm(start + 0.5)  # later: the earlier call stays
    timer.arm(None)  # nothing new
    await elapse(0.1)
    # By 0.1 s the 0.02 s call has run (at its deadline, not before), and the 0.2 s one
    # cannot have.
    assert fired == [pytest.approx(start + 0.02)] and fired[0] >= start + 0.02
    await elapse(0.5)
    assert len(fired) == 1  # the replaced 0.2 s call never runs, nor the 0.5 s one


@virtual_time
async def test_cancel_and_rearm(on_loop_clock: None) -> None:
    clock = virtual_clock()
    fired: list[int] = []
    timer = DeadlineTimer(lambda: fired.append(1))
    timer.arm(clock.monotonic() + 0.01)
    timer.cancel()
    await elapse(0.05)  # well past the cancelled deadline
    assert fired == []
    timer.arm(clock.monotonic() - 1)  # already due: runs on the next loop turn
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert fired == [1]


class _Owner:
    """Holds a timer that calls back into it: the shape of every timer's owner."""

    def __init__(self) -> None:
        self.timer = DeadlineTimer(self.on_due)
        self.fired = 0

    def on_due(self) -> None:
        self.fired += 1


@virtual_time
async def test_close_lets_the_owner_go_without_the_collector(on_loop_clock: None) -> None:
    clock = virtual_clock()
    owner = _Owner()
    owner.timer.arm(clock.monotonic() + 0.01)
    owner.timer.close()
    owner.timer.arm(clock.monotonic() - 1)  # closed: does nothing
    await elapse(0.03)  # past the first deadline
    await settle()
    assert owner.fired == 0
    gone = weakref.ref(owner)
    gc.disable()  # freed by reference counting alone, or not at all
    try:
        del owner
        assert gone() is None
    finally:
        gc.enable()
