"""`LogFollower`: where this node stands in another process's home log (the ``node`` layout).

A node follows each other gateway process's home log with one plain subscription to its
republished messages and demultiplexes them to its replicas locally. The follower is the
bookkeeping of that subscription: the sequence of the newest message applied (every message
up to it has been applied, in order), the messages that arrived while the history was being
read back (held, bounded), and the tasks waiting for it to reach a sequence (a write this
node made through the stream's home must be visible here before the write returns).

Plain data and futures; `airlane.hub.jetstream.home` reads, applies and repairs.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from airlane.hub.jetstream.presence import Member
from airlane.hub.jetstream.store import StoredBatch

if TYPE_CHECKING:
    from nats.aio.subscription import Subscription

__all__ = ["MAX_HELD", "LogFollower"]

MAX_HELD = 4096
"""Live messages a follower keeps while it reads back; past it they are dropped and the
read-back goes on to the newest message instead."""


class LogFollower:
    """One home log as this node follows it. See the module docstring."""

    __slots__ = (
        "held",
        "loads",
        "member",
        "overflowed",
        "position",
        "subject",
        "subscription",
        "syncing",
        "waiters",
    )

    def __init__(self, subject: str, member: Member | None) -> None:
        self.subject = subject
        """The home log's subject."""
        self.member = member
        """The process writing it, where known (its liveness decides how to write to it)."""
        self.position: int | None = None
        """The newest message applied; None until the first read of the log's end."""
        self.subscription: Subscription | None = None
        self.syncing = False
        """A read-back is under way: live messages are held, not applied."""
        self.held: list[StoredBatch] = []
        self.overflowed = False
        """Messages were dropped from `held`: the read-back must go on past them."""
        self.waiters: list[tuple[int, asyncio.Future[None]]] = []
        self.loads = 0
        """Streams of the log being loaded here (the follower is needed meanwhile)."""

    def hold(self, batch: StoredBatch) -> None:
        """Keep a live message for after the read-back (bounded)."""
        if len(self.held) < MAX_HELD:
            self.held.append(batch)
        else:
            self.overflowed = True

    def take_held(self) -> list[StoredBatch]:
        """The held messages, in order, now the read-back reached `position`."""
        held, self.held = self.held, []
        held.sort(key=lambda batch: batch.js_seq)
        return held

    def start(self, last: int) -> int:
        """Where a new follower begins, ``last`` being the log's end as read after
        subscribing: there, or, where messages reached the subscription before that answer
        (so they are at or below ``last``), just before the first of them, so that what they
        carry (a stream's creation, to be mirrored) is applied rather than passed over."""
        if not self.held:
            return last
        first = min(self.held, key=lambda batch: batch.js_seq)
        if first.prev is None or first.js_seq > last or first.prev >= first.js_seq:
            return last
        return first.prev

    def advanced(self, position: int) -> None:
        """Everything up to ``position`` is applied: wake those waiting for it."""
        self.position = position
        if not self.waiters:
            return
        keep = []
        for target, future in self.waiters:
            if target <= position:
                if not future.done():
                    future.set_result(None)
            else:
                keep.append((target, future))
        self.waiters = keep

    def reached(self, target: int) -> asyncio.Future[None] | None:
        """A future settled once `position` reaches ``target``; None if it has."""
        if self.position is not None and self.position >= target:
            return None
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiters.append((target, future))
        return future

    def fail(self, exc: BaseException) -> None:
        """Fail everyone waiting (the follower stops)."""
        waiters, self.waiters = self.waiters, []
        for _, future in waiters:
            if not future.done():
                future.set_exception(exc)
