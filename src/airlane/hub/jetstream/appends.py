"""`AppendQueue`: one stream's appends waiting for its next publish.

A stream's publishes are conditional on the newest message the node holds, so one stream has
one publish in flight at a time. What its producers append meanwhile waits here and goes out
together in the next publish (a group commit): a producer that appends faster than a broker
round trip pays one round trip per batch, not per append. Nothing in the queue is visible to
readers; events are applied to the replica only once JetStream has stored them.

The queue is plain data and futures; `airlane.hub.jetstream.hub` runs the publishes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from airlane.core import TERMINAL_KINDS, Event, StreamTooLarge
from airlane.core.log import text_of
from airlane.hub.base import HubError

__all__ = ["MAX_QUEUED_EVENTS", "AppendQueue"]

MAX_QUEUED_EVENTS = 4096
"""Events one stream may hold waiting for JetStream. Past it an awaited append waits for the
queue to drain, and a producer's synchronous appender fails (`HubUnavailable`)."""


class AppendQueue:
    """The events waiting for a stream's next publish and the appends waiting for them."""

    __slots__ = (
        "ended",
        "events",
        "failure",
        "flushing",
        "inflight",
        "inflight_text",
        "queued_text",
        "waiters",
    )

    def __init__(self) -> None:
        self.events: list[Event] = []
        """Appended, not yet taken for a publish, in order."""
        self.waiters: list[asyncio.Future[None]] = []
        """Settled when the events queued so far are stored (or not)."""
        self.inflight: list[asyncio.Future[None]] = []
        """Settled when the publish under way is stored (or not)."""
        self.ended = False
        """A terminal event is queued or being published: nothing may follow it."""
        self.failure: HubError | StreamTooLarge | None = None
        """What the last failed publish raised, for a synchronous appender's next call (its
        producer learns of a failure there; an awaited append has its own future)."""
        self.flushing = False
        """A task is publishing what is queued."""
        self.queued_text = 0
        """Characters of text in `events` (`airlane.core.log.text_of`)."""
        self.inflight_text = 0
        """Characters of text in the publish under way, not yet in the replica."""

    @property
    def pending_text(self) -> int:
        """Characters of text on their way to the store: the stream's text limit counts them
        (`airlane.core.StreamLog.check_text`), so that concurrent appends cannot pass it."""
        return self.queued_text + self.inflight_text

    def put(self, events: Sequence[Event], text: int | None = None) -> int:
        """Queue ``events`` up to and including the first terminal one; how many were taken
        (fewer than given when one was terminal). ``text``: their characters of text, where
        the caller counted them (`StreamLog.check_text` returns it)."""
        taken = len(events)
        for index, event in enumerate(events):
            if event.kind in TERMINAL_KINDS:
                taken = index + 1
                self.ended = True
                break
        if taken < len(events):
            events = events[:taken]
            text = None
        self.events.extend(events)
        self.queued_text += text_of(events) if text is None else text
        return taken

    def waiter(self) -> asyncio.Future[None] | None:
        """A future settled once what is queued or being published now is stored (or
        failed); None when nothing is."""
        if self.events:
            target = self.waiters
        elif self.flushing:
            target = self.inflight
        else:
            return None
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        target.append(future)
        return future

    def take(self) -> list[Event]:
        """Everything queued, for one publish; its waiters wait for that publish now."""
        events, self.events = self.events, []
        self.inflight, self.waiters = self.waiters, []
        self.inflight_text, self.queued_text = self.queued_text, 0
        return events

    def stored_part(self, events: Sequence[Event]) -> None:
        """The first ``events`` of the publish under way were stored (the rest go on)."""
        self.inflight_text = max(0, self.inflight_text - text_of(events))

    def stored(self) -> None:
        """The publish of what `take` returned was stored."""
        self.inflight_text = 0
        waiters, self.inflight = self.inflight, []
        for future in waiters:
            if not future.done():
                future.set_result(None)

    def failed(self, failure: HubError | StreamTooLarge) -> None:
        """The publish under way failed with ``failure``: it, and everything queued after it
        (which must not be stored past a gap), fail alike."""
        waiters = self.inflight + self.waiters
        self.inflight, self.waiters, self.events = [], [], []
        self.inflight_text = self.queued_text = 0
        self.ended = False  # what was refused includes any terminal event: one may come again
        self.failure = failure
        for future in waiters:
            if not future.done():
                future.set_exception(failure)
