"""`DrainQueue`: the pumps woken in a loop turn, drained together, at most a few at a time late.

A pump woken by the hub (an append to its stream) does not write at once: its drain waits for
the end of the loop turn, so that what the producers of the turn append to one stream leaves
in one write, and the turn's writes leave together (spread through the turn, they cost the
gateway and its clients more system time: each write then wakes a reader on its own). But a
loop turn that reads hundreds of upstream sockets, or paces hundreds of streams, holds the
first of those drains for all of it. The queue bounds that wait: once ``burst`` drains are
due, they run at once, in the middle of the turn, and the rest still run at its end.

One queue per event loop (`drain_queue`), shared by every pump on it, so a turn with many
woken pumps schedules one loop call-back, not one per pump.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable

__all__ = ["DEFAULT_BURST", "DrainQueue", "drain_queue"]

DEFAULT_BURST = 32
"""Drains that run at once when that many are due, rather than at the end of the turn."""

Drain = Callable[[], None]

_queues: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, DrainQueue] = (
    weakref.WeakKeyDictionary()
)


class DrainQueue:
    """Call-backs due to run at the end of the current loop turn, or sooner in bursts.

    A drain must not raise (a pump records its own failure); one that does is reported to the
    loop's exception handler, and the others still run. The caller adds a drain at most once
    until it runs (pumps keep a flag), so the queue holds at most one entry per pump.
    """

    __slots__ = ("_burst", "_due", "_loop", "_scheduled")

    def __init__(self, loop: asyncio.AbstractEventLoop, burst: int = DEFAULT_BURST) -> None:
        if burst < 1:
            raise ValueError(f"burst must be >= 1, not {burst}")
        self._loop = loop
        self._burst = burst
        self._due: list[Drain] = []
        self._scheduled = False

    def add(self, drain: Drain) -> None:
        """Run ``drain`` at the end of this loop turn, or now if it completes a burst."""
        due = self._due
        due.append(drain)
        if len(due) >= self._burst:
            self._run_due()
        elif not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._on_turn_end)

    def _on_turn_end(self) -> None:
        # Cleared first: a drain that re-adds itself (a reader far behind, letting the loop
        # run) is due at the end of the next turn, not of this one.
        self._scheduled = False
        self._run_due()

    def _run_due(self) -> None:
        due, self._due = self._due, []
        for drain in due:
            try:
                drain()
            except Exception as exc:  # a bug in a pump: keep the others going
                self._loop.call_exception_handler(
                    {"message": "a pump's drain failed", "exception": exc}
                )


def drain_queue(loop: asyncio.AbstractEventLoop) -> DrainQueue:
    """The drain queue of ``loop`` (made on first use)."""
    queue = _queues.get(loop)
    if queue is None:
        queue = _queues[loop] = DrainQueue(loop)
    return queue
