"""`TopicFeed`: one content topic's stream read live, handing each event to a call-back.

The filter service keeps one per subscribed content topic, relay one per content topic it
forwards. A feed that loses its stream (deleted, or ended) follows it again once it exists,
after `RESUBSCRIBE_S`; a feed whose stream cannot be read any more stops, with a log line.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from airlane.core import Event
from airlane.core.errors import AirlaneError
from airlane.gateway import Subscription
from airlane.transports.waku.bridge import Refused, WakuBridge

__all__ = ["TopicFeed"]

log = logging.getLogger("airlane.waku")

RESUBSCRIBE_S = 1.0
"""Pause before a feed follows its stream again after losing it."""


class TopicFeed:
    """A content topic's stream, from its end (or its start), to ``on_event``."""

    def __init__(
        self,
        bridge: WakuBridge,
        content_topic: str,
        on_event: Callable[[str, Event], None],
        *,
        from_start: bool = False,
    ) -> None:
        self.bridge = bridge
        self.content_topic = content_topic
        self.on_event = on_event
        self.from_start = from_start
        self._subscription: Subscription | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Subscribe (creating the stream if needed) and start reading.

        Raises:
            AirlaneError: the gateway refused.
            Refused: the topic names no stream.
        """
        self._subscription = await self.bridge.subscribe_live(
            self.content_topic, from_start=self.from_start
        )
        self._task = asyncio.create_task(self._read(), name=f"waku-feed {self.content_topic}")

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
                    log.warning("waku: cannot follow %s again: %s", self.content_topic, exc)
                    return
                continue
            for event in batch:
                self.on_event(self.content_topic, event)

    async def aclose(self) -> None:
        """Stop reading and unsubscribe."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._subscription is not None:
            await self._subscription.aclose()
            self._subscription = None
