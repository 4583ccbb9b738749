"""`Heartbeats`: the connections of one event loop that send heartbeats on a timer, so that the
heartbeats due during a pause the process sees coming can go out before it.

A full pass of the garbage collector (`airlane.server.gcpacer`) stops the whole process for a
walk of every tracked object: with 17,000 idle connections in one worker, 1.5-3 s on a
loaded two-core machine. Every heartbeat due meanwhile would leave that late, and a proxy or
client that drops connections silent for longer than the period would see the gap. The pacer
knows when it is about to pause and about how long for; it calls `Heartbeats.ahead` first,
and every connection whose heartbeat falls due within that time sends it at once. Its next one
then comes a period later, as after any heartbeat: no gap between two of a connection's
heartbeats grows by the pause (unless the pause outlasts a whole period).

What is late meanwhile is data, not heartbeats: a paced stream's chunks wait for the pass
like everything else.

One registry per event loop (`heartbeats`). A member is a plain dictionary key (no weak
reference, no handle per connection: those would be more objects for the very walk this is
about); a member removes itself when its connection goes.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from typing import Protocol

__all__ = ["Beating", "Heartbeats", "heartbeats"]

log = logging.getLogger("airlane.heartbeats")


class Beating(Protocol):
    """A connection that sends heartbeats on a timer of its own."""

    def beat_before(self, deadline: float) -> bool:
        """Send the heartbeat now if it would fall due before ``deadline`` (loop time), and
        count the next period from now; True if one went out."""
        ...


class Heartbeats:
    """The members of one event loop; see the module docstring."""

    __slots__ = ("_loop", "_members")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._members: dict[Beating, None] = {}

    def __len__(self) -> int:
        return len(self._members)

    def add(self, member: Beating) -> None:
        """Count ``member`` in (again: no effect)."""
        self._members[member] = None

    def discard(self, member: Beating) -> None:
        """Count ``member`` out (if it was in)."""
        self._members.pop(member, None)

    def ahead(self, seconds: float) -> int:
        """Have every member whose heartbeat falls due within ``seconds`` send it now;
        returns how many did. A member that fails is logged and skipped."""
        deadline = self._loop.time() + seconds
        sent = 0
        # A copy: a heartbeat that finds its connection gone makes the member leave.
        for member in list(self._members):
            try:
                if member.beat_before(deadline):
                    sent += 1
            except Exception:
                log.exception("an early heartbeat failed")
        return sent


_registries: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Heartbeats] = (
    weakref.WeakKeyDictionary()
)


def heartbeats(loop: asyncio.AbstractEventLoop | None = None) -> Heartbeats:
    """The heartbeat registry of ``loop`` (the running loop by default; made on first use)."""
    if loop is None:
        loop = asyncio.get_running_loop()
    registry = _registries.get(loop)
    if registry is None:
        registry = _registries[loop] = Heartbeats(loop)
    return registry
