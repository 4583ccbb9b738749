"""`Reaper`: frees what a hub forgets a slice at a time, so that forgetting never stalls the loop.

A forgotten stream's retained events (up to 4,096 by default, each with its payload) are freed
when the last reference to them goes. Freed at once, that is a few tenths of a microsecond per
event, all in one loop step: hundreds of load-test streams ending together, or a sweep of
streams past their time to live, hold the loop for tens of milliseconds (measured: a third of
the gateway's time in the 100 ms where 500 paced streams end, `_int_free` and
`subtype_dealloc` at the top of a `perf` profile), and every live stream's due chunks wait
behind them. The hub hands such lists to a reaper instead, which deletes them from the end in
small slices, at most `DEFAULT_SLICE_S` of work every `DEFAULT_PERIOD_S`, from a loop timer.

Bounded: a list that would take the reaper past ``max_pending_bytes`` is freed at once, as
without a reaper. It belongs to the loop it first schedules on; `close` frees everything left.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Any

__all__ = [
    "DEFAULT_MAX_PENDING_BYTES",
    "DEFAULT_PERIOD_S",
    "DEFAULT_SLICE_S",
    "Reaper",
]

DEFAULT_MAX_PENDING_BYTES = 256 * 1024 * 1024
"""Most bytes waiting to be freed; more is freed at once. A 500 x 200-chunk load test ends
with about 120 MB to free."""
DEFAULT_SLICE_S = 0.0001
"""Longest run of freeing per step (the clock is read every `_BATCH` items)."""
DEFAULT_PERIOD_S = 0.001
"""Time between steps while anything is pending: freeing takes at most a tenth of the loop."""

# Items deleted between two clock reads: about 10-20 us of work.
_BATCH = 64


class Reaper:
    """Frees discarded lists a slice at a time from the event loop (see the module docstring)."""

    def __init__(
        self,
        *,
        max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES,
        slice_s: float = DEFAULT_SLICE_S,
        period_s: float = DEFAULT_PERIOD_S,
    ) -> None:
        self.max_pending_bytes = max_pending_bytes
        """Most bytes waiting at once; a list that would exceed it is freed at once."""
        self._slice_s = slice_s
        self._period_s = period_s
        # (items, their size): a list's size leaves the count when its last item is freed.
        self._pending: deque[tuple[list[Any], int]] = deque()
        self._pending_bytes = 0
        self._timer: asyncio.TimerHandle | None = None

    @property
    def pending_bytes(self) -> int:
        """Bytes discarded and not freed yet (as the discarding caller counted them)."""
        return self._pending_bytes

    @property
    def pending_items(self) -> int:
        """Items discarded and not freed yet."""
        return sum(len(items) for items, _ in self._pending)

    def discard(self, items: list[Any], size: int) -> None:
        """Free ``items`` (a list nobody else will use, emptied in place) and what only they
        reference, soon; ``size`` is what they hold, in bytes, for the bound."""
        if not items:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop to spread the work over
            items.clear()
            return
        if self._pending_bytes + size > self.max_pending_bytes:
            items.clear()
            return
        self._pending.append((items, size))
        self._pending_bytes += size
        if self._timer is None:
            self._timer = loop.call_later(self._period_s, self._step, loop)

    def close(self) -> None:
        """Free everything pending now and stop."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        while self._pending:
            self._pending.popleft()[0].clear()
        self._pending_bytes = 0

    def _step(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        pending = self._pending
        deadline = time.perf_counter() + self._slice_s
        while pending:
            items, size = pending[0]
            # From the end: deleting a list's tail moves nothing.
            del items[-_BATCH:]
            if not items:
                pending.popleft()
                self._pending_bytes -= size
            if time.perf_counter() >= deadline:
                break
        if pending:
            self._timer = loop.call_later(self._period_s, self._step, loop)
