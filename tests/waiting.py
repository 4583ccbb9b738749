"""Waiting in tests without sleeping.

A test that sleeps to give something time to happen is slow where the machine is idle and
flaky where it is busy (the sleep is too short) or slow everywhere (it was made long enough).
What a test waits for instead:

- the thing itself: an `asyncio.Event` a call-back sets, a future, the next item of a stream,
  always under a timeout;
- `eventually`: a condition on state that this loop's own tasks and call-backs change, where
  the code under test offers no signal, re-checked after every loop turn and failing with a
  clear message at a deadline;
- `settle`: the loop run until nothing is ready, to check that something does *not* happen
  once the code under test is left waiting on what the test controls;
- time the test moves: a `VirtualTimeLoop` (the `virtual_time` decorator) whose clock jumps to
  the next timer when nothing else is ready, so timers, heartbeats and timeouts are tested in
  loop time, exactly and at once (`elapse`); a `VirtualClock` also stands in for a module's
  ``time`` where the code under test reads the clock itself.
"""

from __future__ import annotations

import asyncio
import functools
import math
import time
from collections.abc import Callable, Coroutine
from typing import Any

__all__ = [
    "VirtualClock",
    "VirtualTimeLoop",
    "elapse",
    "eventually",
    "settle",
    "virtual_clock",
    "virtual_time",
]


async def eventually(
    predicate: Callable[[], object], *, timeout: float = 5.0, what: str | None = None
) -> None:
    """Return once ``predicate()`` is true, checked now and after every loop turn; raise
    AssertionError naming ``what`` after ``timeout`` seconds.

    For state changed by this loop's tasks and call-backs only (it yields with a zero sleep:
    waiting for another process or thread this way would spin). The deadline is real time,
    so it holds on a `VirtualTimeLoop` too, where this loop's turns never let the clock jump.
    """
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            raise AssertionError(f"not within {timeout} s: {what or predicate}")
        await asyncio.sleep(0)


async def settle(max_turns: int = 1000) -> None:
    """Run the loop until nothing but this task is ready: every call-back and task step that
    is due now has run, and what they made ready too; only timers and I/O are left.

    For a check that something does not happen: once settled, code that waits on the test (a
    blocked ``send``, an event the test sets) cannot move. On a loop that does not show its
    ready queue (uvloop), ``max_turns`` turns are run instead.
    """
    loop = asyncio.get_running_loop()
    ready = getattr(loop, "_ready", None)
    for _ in range(max_turns):
        await asyncio.sleep(0)
        # Resumed with nothing queued behind this step: the turn ran nothing else, and
        # nothing scheduled more.
        if ready is not None and not ready:
            return
    if ready is not None:
        raise AssertionError(f"the loop was still busy after {max_turns} turns")


class VirtualClock:
    """A monotonic clock that moves only when told to (whole nanoseconds, from 1,000 s).

    Read like `time.monotonic` and `time.monotonic_ns`, so it can be patched in as a module's
    ``time`` where the code under test reads the clock itself; a `VirtualTimeLoop` keeps its
    time on one too.
    """

    def __init__(self, start_s: float = 1000.0) -> None:
        self._ns = round(start_s * 1e9)

    def monotonic(self) -> float:
        return self._ns / 1e9

    def monotonic_ns(self) -> int:
        return self._ns

    def advance(self, seconds: float) -> None:
        """Move the clock ``seconds`` forward."""
        if seconds < 0:
            raise ValueError("a monotonic clock does not go back")
        self._ns += round(seconds * 1e9)

    def advance_to(self, when: float) -> None:
        """Move the clock to ``when`` (seconds), if that is later."""
        self._ns = max(self._ns, math.ceil(when * 1e9))


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop whose time is a `VirtualClock`: when nothing is ready to run, the clock
    jumps to the earliest timer instead of the loop waiting for it; a test may also move it
    with ``loop.clock.advance`` (time that passes while the loop is held, in no time).

    Timers fire in the order and at the loop times they would on a real loop, so a test of a
    heartbeat, a deadline or a timeout runs at once and sees exact times. For tests without I/O
    or threads: the clock would not wait for them either.
    """

    def __init__(self, clock: VirtualClock | None = None) -> None:
        super().__init__()
        self.clock = clock or VirtualClock()

    def time(self) -> float:
        return self.clock.monotonic()

    def _run_once(self) -> None:
        # Asyncio's own step, after moving the clock to the next timer when the loop would
        # otherwise wait for it.
        if not self._ready:  # type: ignore[attr-defined]
            pending = [h.when() for h in self._scheduled if not h.cancelled()]  # type: ignore[attr-defined]
            if pending:
                self.clock.advance_to(min(pending))
        super()._run_once()  # type: ignore[misc]


def virtual_time(test: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run the ``async def`` test ``test`` on a fresh `VirtualTimeLoop` (to pytest it is a
    plain test: its fixtures must not need a loop of their own)."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
            runner.run(test(*args, **kwargs))

    return run


def virtual_clock() -> VirtualClock:
    """The clock of the running `VirtualTimeLoop`."""
    loop = asyncio.get_running_loop()
    if not isinstance(loop, VirtualTimeLoop):
        raise RuntimeError("not on a VirtualTimeLoop: use @virtual_time")
    return loop.clock


async def elapse(seconds: float) -> None:
    """Let ``seconds`` of loop time pass on the running `VirtualTimeLoop`, at once: the timers
    due meanwhile fire in order, and what they start runs. Refused on a real loop, where it
    would be a sleep."""
    virtual_clock()
    await asyncio.sleep(seconds)
