"""`FilterService`: 12/WAKU2-FILTER's service side, fed from Airlane streams.

A light node subscribes (a pubsub topic and up to `WakuConfig.max_topics_per_peer` content
topics); the service reads each subscribed content topic's stream from its end with one hub
subscription per topic however many peers want it (`_TopicWatch`), and pushes every new event,
as a Waku message, to each subscriber over one ``filter-push`` stream of that peer's
connection, kept open while the subscription lasts (js-waku never closes its side of one).
Each subscriber has a bounded queue and one pushing task: a slow or vanished subscriber loses
its oldest pushes (counted in `FilterStats.dropped`), never the node's memory; the store keeps
everything that is not ephemeral. Subscriptions lapse `WakuConfig.subscription_ttl_s` after
the last subscribe or ping, as the specification asks.

Topics are read by `airlane.transports.waku.feeds.TopicFeed`s, one per subscribed content
topic whoever subscribed to it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from airlane.core.errors import AirlaneError
from airlane.transports.waku.bridge import Refused, WakuBridge
from airlane.transports.waku.config import WakuConfig
from airlane.transports.waku.connection import PeerConnection
from airlane.transports.waku.feeds import TopicFeed
from airlane.transports.waku.streams import MuxedStream, StreamClosed
from airlane.wire.errors import WireError
from airlane.wire.libp2p import PeerId
from airlane.wire.waku import FILTER_PUSH, FilterRequest, MessagePush, Status, WakuMessage

__all__ = ["FilterService", "FilterStats"]

log = logging.getLogger("airlane.waku")

SWEEP_S = 15.0
"""How often lapsed subscriptions are looked for (more often for short lifetimes)."""


@dataclass(slots=True)
class FilterStats:
    """Counters for /metrics and tests."""

    pushed: int = 0
    dropped: int = 0
    subscribers: int = 0


class _Subscriber:
    __slots__ = ("connection", "expires", "pusher", "queue", "stream", "topics", "wake")

    def __init__(self, expires: float) -> None:
        self.topics: dict[str, str] = {}  # content topic -> pubsub topic
        self.expires = expires
        self.queue: deque[MessagePush] = deque()
        self.wake = asyncio.Event()
        self.pusher: asyncio.Task[None] | None = None
        self.stream: MuxedStream | None = None
        """The push stream, kept open while the subscription lasts (see `_push`)."""
        self.connection: PeerConnection | None = None
        """The connection ``stream`` belongs to."""

    async def abandon(self) -> None:
        """Reset the push stream, if any (both sides then forget it), and let go of it."""
        stream, connection = self.stream, self.connection
        self.stream = self.connection = None
        if stream is None or connection is None:
            return
        with contextlib.suppress(ConnectionError, OSError, WireError):
            await stream.reset()
        connection.release(stream)


class FilterService:
    """Subscriptions and pushes. See the module docstring."""

    def __init__(
        self,
        bridge: WakuBridge,
        config: WakuConfig,
        connection_to: Callable[[PeerId], PeerConnection | None],
    ) -> None:
        self.bridge = bridge
        self.config = config
        self.connection_to = connection_to
        self.stats = FilterStats()
        self._subscribers: dict[PeerId, _Subscriber] = {}
        self._feeds: dict[str, TopicFeed] = {}
        self._peers: dict[str, set[PeerId]] = {}  # content topic -> subscribed peers
        self._sweeper: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()  # subscribe/unsubscribe change watches one at a time

    async def start(self) -> None:
        """Start looking for lapsed subscriptions."""
        self._sweeper = asyncio.create_task(self._sweep(), name="waku-filter-sweep")

    async def aclose(self) -> None:
        """Stop every reader and pusher."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        for peer in list(self._subscribers):
            self._drop_subscriber(peer)
        for feed in list(self._feeds.values()):
            await feed.aclose()
        self._feeds.clear()
        self._peers.clear()

    def topics_of(self, peer: PeerId) -> dict[str, str]:
        """A peer's subscriptions: content topic -> pubsub topic."""
        subscriber = self._subscribers.get(peer)
        return dict(subscriber.topics) if subscriber is not None else {}

    # -- requests ---------------------------------------------------------------------------

    async def handle(self, peer: PeerId, request: FilterRequest) -> tuple[int, str | None]:
        """Answer one subscribe request: ``(status, description)``."""
        kind = request.kind
        if kind == FilterRequest.PING:
            subscriber = self._subscribers.get(peer)
            if subscriber is None or not subscriber.topics:
                return Status.NOT_FOUND, "no subscriptions for this peer"
            subscriber.expires = time.monotonic() + self.config.subscription_ttl_s
            return Status.OK, None
        if kind == FilterRequest.UNSUBSCRIBE_ALL:
            async with self._lock:
                if peer not in self._subscribers:
                    return Status.NOT_FOUND, "no subscriptions for this peer"
                topics = list(self._subscribers[peer].topics)
                self._drop_subscriber(peer)
                await self._unwatch(peer, topics)
            return Status.OK, None
        if not request.content_topics:
            return Status.BAD_REQUEST, "a filter request names content topics"
        if kind == FilterRequest.UNSUBSCRIBE:
            async with self._lock:
                subscriber = self._subscribers.get(peer)
                if subscriber is None:
                    return Status.NOT_FOUND, "no subscriptions for this peer"
                for topic in request.content_topics:
                    subscriber.topics.pop(topic, None)
                await self._unwatch(peer, list(request.content_topics))
                if not subscriber.topics:
                    self._drop_subscriber(peer)
            return Status.OK, None
        try:
            pubsub = {
                topic: self.bridge.pubsub_for(topic, request.pubsub_topic)
                for topic in request.content_topics
            }
            for topic in request.content_topics:
                self.bridge.stream_for(topic)
        except Refused as exc:
            return exc.status, exc.reason
        async with self._lock:
            subscriber = self._subscribers.get(peer)
            if subscriber is None and len(self._subscribers) >= self.config.max_peers:
                # Subscriptions outlive connections (until they lapse): bounded on their own.
                return Status.TOO_MANY_REQUESTS, "this node holds as many subscribers as it takes"
            existing = set(subscriber.topics) if subscriber is not None else set()
            if len(existing | set(pubsub)) > self.config.max_topics_per_peer:
                return (
                    Status.TOO_MANY_REQUESTS,
                    f"at most {self.config.max_topics_per_peer} content topics per peer",
                )
            try:
                for topic in pubsub:
                    await self._watch(peer, topic)
            except (AirlaneError, Refused) as exc:
                await self._unwatch(peer, [t for t in pubsub if t not in existing])
                return Status.SERVICE_UNAVAILABLE, f"cannot follow the topic: {exc}"
            if subscriber is None:
                subscriber = self._subscribers[peer] = _Subscriber(0.0)
                subscriber.pusher = asyncio.create_task(
                    self._push(peer, subscriber), name=f"waku-push {peer}"
                )
                self.stats.subscribers = len(self._subscribers)
            subscriber.topics.update(pubsub)
            subscriber.expires = time.monotonic() + self.config.subscription_ttl_s
        return Status.OK, None

    async def _watch(self, peer: PeerId, topic: str) -> None:
        if topic not in self._feeds:
            feed = TopicFeed(self.bridge, topic, self._on_message)
            await feed.start()
            self._feeds[topic] = feed
            self._peers[topic] = set()
        self._peers[topic].add(peer)

    async def _unwatch(self, peer: PeerId, topics: list[str]) -> None:
        for topic in topics:
            peers = self._peers.get(topic)
            if peers is None:
                continue
            peers.discard(peer)
            if not peers:
                del self._peers[topic]
                await self._feeds.pop(topic).aclose()

    def _on_message(self, content_topic: str, message: WakuMessage, pubsub: str | None) -> None:
        self.deliver(content_topic, self._peers.get(content_topic, set()), message)

    def _drop_subscriber(self, peer: PeerId) -> None:
        subscriber = self._subscribers.pop(peer, None)
        if subscriber is not None and subscriber.pusher is not None:
            subscriber.pusher.cancel()
        self.stats.subscribers = len(self._subscribers)

    async def _sweep(self) -> None:
        period = min(SWEEP_S, self.config.subscription_ttl_s / 2)
        while True:
            await asyncio.sleep(period)
            now = time.monotonic()
            lapsed = [peer for peer, sub in self._subscribers.items() if sub.expires < now]
            for peer in lapsed:
                async with self._lock:
                    subscriber = self._subscribers.get(peer)
                    if subscriber is None or subscriber.expires >= now:
                        continue
                    topics = list(subscriber.topics)
                    self._drop_subscriber(peer)
                    await self._unwatch(peer, topics)
                log.info("waku: the filter subscription of %s lapsed", peer)

    # -- pushing ----------------------------------------------------------------------------

    def deliver(self, content_topic: str, peers: set[PeerId], message: WakuMessage) -> None:
        """Queue ``message`` for every peer subscribed to its content topic."""
        limit = self.config.push_queue
        for peer in peers:
            subscriber = self._subscribers.get(peer)
            if subscriber is None:
                continue
            pubsub = subscriber.topics.get(content_topic)
            if pubsub is None:
                continue
            if len(subscriber.queue) >= limit:
                subscriber.queue.popleft()
                self.stats.dropped += 1
            subscriber.queue.append(MessagePush(message, pubsub))
            subscriber.wake.set()

    async def _push(self, peer: PeerId, subscriber: _Subscriber) -> None:
        """Push what is queued for ``peer``, on one ``filter-push`` stream per connection.

        The stream stays open for the subscription's life: js-waku reads a push stream until
        the node closes it and never closes its own side, so a stream per push would stay
        half open on both sides, and past the connection's stream limit (or js-libp2p's 100
        inbound filter-push streams) every later push, and the peer's own requests, would
        be refused. The stream is reset when the subscription ends, which frees it on both
        sides.
        """
        queue = subscriber.queue
        try:
            while True:
                await subscriber.wake.wait()
                subscriber.wake.clear()
                if not queue:
                    continue
                connection = self.connection_to(peer)
                if connection is None:
                    self.stats.dropped += len(queue)
                    queue.clear()
                    continue
                try:
                    await self._write_queue(connection, subscriber)
                except (ConnectionError, OSError, WireError) as exc:
                    log.debug("waku: pushing to %s failed: %s", peer, exc)
                    self.stats.dropped += len(queue)
                    queue.clear()
                    await subscriber.abandon()
        finally:
            await subscriber.abandon()

    async def _write_queue(self, connection: PeerConnection, subscriber: _Subscriber) -> None:
        """Write everything queued, in order, on the subscriber's push stream (opened on
        ``connection`` when it has none there); a reused stream found broken (the peer reset
        it) is replaced once."""
        if subscriber.connection is not connection:
            await subscriber.abandon()  # none yet, or the peer came back on a new connection
        queue = subscriber.queue
        fresh = False
        while queue:
            stream = subscriber.stream
            if stream is None:
                stream = await connection.open_stream(FILTER_PUSH)
                subscriber.stream, subscriber.connection, fresh = stream, connection, True
            try:
                await stream.write_message(queue[0].encode())
            except StreamClosed:
                if fresh:
                    raise
                await subscriber.abandon()
                continue
            queue.popleft()
            self.stats.pushed += 1
