"""`DeadlineTimer`: an event-loop timer for a sans-I/O machine's deadlines.

The protocol state machines (`airlane.wire.airc.AircConnection`) take time as ``now`` from
`time.monotonic`, with microsecond resolution, and say when they next need ``handle_timer``
(``get_timer()``). uvloop's own clock has millisecond resolution, so the deadline is turned
into a delay here. Re-arming is cheap when nothing moves earlier: a timer that fires early
finds nothing due and is armed again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

__all__ = ["DeadlineTimer"]


class DeadlineTimer:
    """Calls ``on_due()`` at (or shortly after) the earliest deadline it was armed with."""

    __slots__ = ("_deadline", "_handle", "_loop", "_on_due")

    def __init__(self, on_due: Callable[[], object]) -> None:
        self._loop = asyncio.get_running_loop()
        self._on_due = on_due
        self._handle: asyncio.TimerHandle | None = None
        self._deadline = 0.0

    def arm(self, deadline: float | None) -> None:
        """Make sure ``on_due`` runs by ``deadline`` (a `time.monotonic` time; None: no
        new deadline). An earlier pending call is kept."""
        if deadline is None or self._on_due is _nothing:
            return
        if self._handle is not None:
            if self._deadline <= deadline:
                return
            self._handle.cancel()
        self._deadline = deadline
        self._handle = self._loop.call_later(max(0.0, deadline - time.monotonic()), self._fire)

    def cancel(self) -> None:
        """Forget the pending call."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def close(self) -> None:
        """Cancel for good: `arm` does nothing after this. Also lets go of ``on_due``,
        typically a bound method of the timer's owner, which holds the timer: a reference
        cycle that reference counting alone would never free."""
        self.cancel()
        self._on_due = _nothing

    def _fire(self) -> None:
        self._handle = None
        self._on_due()


def _nothing() -> None:
    """What a closed timer would call."""
