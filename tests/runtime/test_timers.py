"""`DeadlineTimer`: fires once by the earliest deadline it was armed with."""

from __future__ import annotations

import asyncio
import gc
import time
import weakref

from airlane.runtime.timers import DeadlineTimer


async def test_fires_by_the_earliest_deadline() -> None:
    fired: list[float] = []
    timer = DeadlineTimer(lambda: fired.append(time.monotonic()))
    start = time.monotonic()
    timer.arm(start + 0.2)
    timer.arm(start + 0.02)  # earlier: replaces the pending call
    timer.arm(start + 0.5)  # later: the earlier call stays
    timer.arm(None)  # nothing new
    await asyncio.sleep(0.1)
    # The loop runs timers in deadline order: by the end of this 0.1 s sleep the 0.02 s call
    # has run (however busy the machine), and the 0.2 s one cannot have.
    assert len(fired) == 1 and fired[0] >= start + 0.02
    await asyncio.sleep(0.15)
    assert len(fired) == 1  # the replaced 0.2 s call never runs


async def test_cancel_and_rearm() -> None:
    fired: list[int] = []
    timer = DeadlineTimer(lambda: fired.append(1))
    timer.arm(time.monotonic() + 0.01)
    timer.cancel()
    await asyncio.sleep(0.05)
    assert fired == []
    timer.arm(time.monotonic() - 1)  # already due: runs on the next loop turn
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


async def test_close_lets_the_owner_go_without_the_collector() -> None:
    owner = _Owner()
    owner.timer.arm(time.monotonic() + 0.01)
    owner.timer.close()
    owner.timer.arm(time.monotonic() - 1)  # closed: does nothing
    await asyncio.sleep(0.03)
    assert owner.fired == 0
    gone = weakref.ref(owner)
    gc.disable()  # freed by reference counting alone, or not at all
    try:
        del owner
        assert gone() is None
    finally:
        gc.enable()
