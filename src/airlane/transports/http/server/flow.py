"""`WriteFlow`: the write side of a connection's flow control.

The transport calls its protocol's ``pause_writing`` when its buffer passes the high-water
mark and ``resume_writing`` when it has drained below the low one. A sender checks `paused`
(a plain attribute: the common case costs no call) and awaits `drain` only while it is set,
so a send that need not wait completes without suspending: `airlane.transports.http.send_now`
relies on that.
"""

from __future__ import annotations

import asyncio

__all__ = ["WriteFlow"]


class WriteFlow:
    """Whether a connection's transport takes writes now, and a wait for when it does."""

    __slots__ = ("_resumed", "paused")

    def __init__(self) -> None:
        self.paused = False
        """The transport's buffer is above its high-water mark."""
        self._resumed: asyncio.Event | None = None

    def pause(self) -> None:
        """The transport's ``pause_writing``."""
        self.paused = True

    def resume(self) -> None:
        """The transport's ``resume_writing``; also called when the connection is lost (the
        buffer will never drain then, and waiting senders must see that it is gone)."""
        self.paused = False
        if self._resumed is not None:
            self._resumed.set()
            self._resumed = None

    async def drain(self) -> None:
        """Return once writes are no longer paused."""
        while self.paused:
            if self._resumed is None:
                # One event for every waiter: each waits on a future of its own, so one that
                # is cancelled does not cancel the others.
                self._resumed = asyncio.Event()
            await self._resumed.wait()
