"""`TopicFeed`: one content topic read live, handing each new Waku message to a call-back.

The filter service keeps one per subscribed content topic, relay one per content topic it
forwards. A topic's stream is followed with a hub subscription; a feed that loses its stream
(deleted, or ended) follows it again once it exists, after `RESUBSCRIBE_S`, and one whose
stream cannot be read any more stops, with a log line. A feed starts at the stream's end, at
its first event, or after a given position (relay following a topic again where it let it
go). A topic kept in an event log (``[[waku.logs]]``) is read every
`airlane.transports.waku.logs.POLL_S`.

The call-back gets the content topic, the message, and the pubsub topic the message came on
when it came from Waku (None for one made here: the receiver picks the pubsub topic).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from airlane.core import Event, Position
from airlane.core.errors import AirlaneError
from airlane.gateway import Subscription
from airlane.transports.waku.bridge import Refused, WakuBridge
from airlane.transports.waku.logs import PAGE, message_from_record
from airlane.wire.waku import WakuMessage

__all__ = ["OnMessage", "TopicFeed"]

log_line = logging.getLogger("airlane.waku")

OnMessage = Callable[[str, WakuMessage, str | None], None]
"""``(content topic, message, pubsub topic it came on or None)``."""
RESUBSCRIBE_S = 1.0
"""Pause before a feed follows its stream again after losing it."""


class TopicFeed:
    """A content topic, from its end (or its start), to ``on_message``."""

    def __init__(
        self,
        bridge: WakuBridge,
        content_topic: str,
        on_message: OnMessage,
        *,
        from_start: bool = False,
        after: Position | None = None,
    ) -> None:
        self.bridge = bridge
        self.content_topic = content_topic
        self.on_message = on_message
        self.from_start = from_start
        self.after = after
        """Where a stream (not a log) is read from, if given: after this position."""
        self._subscription: Subscription | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def position(self) -> Position | None:
        """The last event of the stream handed to ``on_message`` (None for a log, or while
        the stream is being followed again)."""
        subscription = self._subscription
        return subscription.position if subscription is not None else None

    async def start(self) -> None:
        """Subscribe (creating the stream if needed) and start reading.

        Raises:
            AirlaneError: the gateway refused.
            Refused: the topic names no stream.
        """
        log = self.bridge.logs.log_for(self.content_topic)
        if log is not None:
            logs = self.bridge.logs
            start = 1 if self.from_start else await logs.next_seq(log)
            reading = self._poll(log, start)
        else:
            self._subscription = await self.bridge.subscribe_live(
                self.content_topic, from_start=self.from_start, after=self.after
            )
            reading = self._read()
        self._task = asyncio.create_task(reading, name=f"waku-feed {self.content_topic}")

    async def _poll(self, log: str, seq: int) -> None:
        logs = self.bridge.logs
        topic = self.content_topic
        while True:
            try:
                records = await logs.read(log, seq)
            except AirlaneError as exc:
                log_line.warning("waku: cannot read the log %s: %s", log, exc)
                records = []
            for record in records:
                pubsub = record.headers.get("waku-pubsub-topic")
                self.on_message(topic, message_from_record(record, topic), pubsub)
                seq = record.seq + 1
            if len(records) < PAGE:
                await logs.wait()

    async def _read(self) -> None:
        while True:
            subscription = self._subscription
            if subscription is None:
                return
            batch = await subscription.next_batch(256)
            if not batch:  # the stream was deleted or ended: follow it again
                await subscription.aclose()
                self._subscription = None
                await asyncio.sleep(RESUBSCRIBE_S)
                try:
                    self._subscription = await self.bridge.subscribe_live(
                        self.content_topic, from_start=True
                    )
                except (AirlaneError, Refused) as exc:
                    log_line.warning("waku: cannot follow %s again: %s", self.content_topic, exc)
                    return
                continue
            for event in batch:
                self._event(event)

    def _event(self, event: Event) -> None:
        message = self.bridge.to_waku(event, self.content_topic)
        if message is None:
            return
        data = event.data or {}
        pubsub = data.get("pubsub_topic") if "hash" in data else None
        self.on_message(self.content_topic, message, pubsub if isinstance(pubsub, str) else None)

    async def aclose(self) -> None:
        """Stop reading and unsubscribe."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._subscription is not None:
            await self._subscription.aclose()
            self._subscription = None
