"""`RelayService`: Waku relay (11/WAKU2-RELAY) between nodes, on ``/vac/waku/relay/2.0.0``.

Nodes that relay to each other each open one stream to the other and send gossipsub RPCs on
it: the pubsub topics they subscribe to (this node: every shard it serves), GRAFTs for them,
and published messages. What this node relays out is every event of its content-topic
streams that it has not seen, whether published over Airlane's API, pushed by a light node
or relayed in (and then seen already); what comes in is appended to the content topic's
stream, once (`seen`, by message hash), and forwarded to the other relay peers subscribed to
its pubsub topic, at most `FANOUT` of them. Messages with an author, sequence number or
signature are dropped, as ``StrictNoSign`` requires.

Each relay peer has a bounded queue of RPCs and one writer task: a slow peer loses its oldest
messages (counted), never the node's memory. The streams a node relays are found by listing
its content-topic streams every `DISCOVER_S`: those that exist when relay starts are read from
their end, those created later from their first event, so nothing published on a new topic
before its discovery is missed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from airlane.core.errors import AirlaneError
from airlane.transports.waku.bridge import Refused
from airlane.transports.waku.connection import PeerConnection
from airlane.transports.waku.feeds import TopicFeed
from airlane.transports.waku.streams import MuxedStream
from airlane.wire.errors import WireError
from airlane.wire.libp2p import PeerId
from airlane.wire.waku import (
    RELAY_PROTOCOL,
    RelayMessage,
    RelayRpc,
    WakuMessage,
    auto_shard,
    shard_topic,
)

if TYPE_CHECKING:
    from airlane.transports.waku.node import WakuNode

__all__ = ["RelayService", "RelayStats"]

log = logging.getLogger("airlane.waku")

FANOUT = 8
"""Peers a message is forwarded to per pubsub topic at most (gossipsub's mesh degree)."""
SEEN_MAX = 65536
SEEN_TTL_S = 120.0
"""Message hashes remembered, and for how long: a message seen again is dropped."""
QUEUE = 1024
"""RPCs queued for one relay peer at most; past it the oldest are dropped."""
DISCOVER_S = 1.0
MAX_TOPICS = 1000
"""Content topics relayed out at most."""


@dataclass(slots=True)
class RelayStats:
    """Counters for /metrics and tests."""

    relayed_in: int = 0
    relayed_out: int = 0
    duplicates: int = 0
    dropped: int = 0
    refused: int = 0


class _RelayPeer:
    __slots__ = ("connection", "queue", "stream", "topics", "wake", "writer")

    def __init__(self, connection: PeerConnection) -> None:
        self.connection = connection
        self.topics: set[str] = set()
        self.stream: MuxedStream | None = None
        self.queue: deque[bytes] = deque()
        self.wake = asyncio.Event()
        self.writer: asyncio.Task[None] | None = None


class RelayService:
    """Relay among Waku nodes. See the module docstring."""

    def __init__(self, node: WakuNode) -> None:
        self.node = node
        self.bridge = node.bridge
        config = node.config
        self.topics = frozenset(shard_topic(config.cluster_id, shard) for shard in config.shards)
        """The pubsub topics this node relays: every shard it serves."""
        self.stats = RelayStats()
        self._peers: dict[PeerId, _RelayPeer] = {}
        self._seen: OrderedDict[bytes, float] = OrderedDict()
        self._feeds: dict[str, TopicFeed] = {}
        self._discovery: asyncio.Task[None] | None = None

    @property
    def peer_count(self) -> int:
        """Relay peers connected now."""
        return len(self._peers)

    async def start(self) -> None:
        """Follow the content-topic streams that exist (from their end), then look for new
        ones."""
        await self._discover(from_start=False)
        self._discovery = asyncio.create_task(self._discover_forever(), name="waku-relay")

    async def aclose(self) -> None:
        """Stop following streams and writing to peers."""
        if self._discovery is not None:
            self._discovery.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._discovery
        for feed in self._feeds.values():
            await feed.aclose()
        self._feeds.clear()
        for peer in list(self._peers):
            self._drop(peer)

    # -- which streams ----------------------------------------------------------------------

    async def _discover_forever(self) -> None:
        while True:
            await asyncio.sleep(DISCOVER_S)
            try:
                await self._discover(from_start=True)
            except AirlaneError as exc:
                log.warning("waku relay: cannot list the content-topic streams: %s", exc)

    async def _discover(self, *, from_start: bool) -> None:
        for topic in await self.node.content_topics():
            if topic not in self._feeds and len(self._feeds) < MAX_TOPICS:
                await self.follow(topic, from_start=from_start)

    async def follow(self, content_topic: str, *, from_start: bool = True) -> None:
        """Relay what the content topic's stream gets (from its first event by default)."""
        if content_topic in self._feeds:
            return
        feed = TopicFeed(self.bridge, content_topic, self._on_message, from_start=from_start)
        try:
            await feed.start()
        except (AirlaneError, Refused) as exc:
            log.warning("waku relay: cannot follow %s: %s", content_topic, exc)
            return
        self._feeds[content_topic] = feed

    def _on_message(self, content_topic: str, message: WakuMessage, pubsub: str | None) -> None:
        if pubsub is None:
            config = self.node.config
            shard = auto_shard(content_topic, config.shards_in_cluster)
            pubsub = shard_topic(config.cluster_id, shard)
        if pubsub not in self.topics:
            return
        if self._seen_before(message.hash(pubsub)):
            return
        self._forward(RelayMessage(pubsub, message.encode()), source=None)

    def _seen_before(self, digest: bytes) -> bool:
        """Whether ``digest`` was seen within `SEEN_TTL_S`; remembers it either way."""
        now = time.monotonic()
        seen = self._seen
        while seen and next(iter(seen.values())) < now - SEEN_TTL_S:
            seen.popitem(last=False)
        if digest in seen:
            return True
        seen[digest] = now
        if len(seen) > SEEN_MAX:
            seen.popitem(last=False)
        return False

    # -- peers ------------------------------------------------------------------------------

    async def attach(self, connection: PeerConnection) -> None:
        """Start relaying with the peer of ``connection`` (this side opens its stream)."""
        peer = connection.peer
        if peer is None or peer in self._peers:
            return
        relay_peer = self._peers[peer] = _RelayPeer(connection)
        try:
            relay_peer.stream = await connection.open_stream(RELAY_PROTOCOL)
        except (ConnectionError, OSError, WireError) as exc:
            log.info("waku relay: cannot open a relay stream to %s: %s", peer, exc)
            self._drop(peer)
            return
        hello = RelayRpc(subscribe=tuple(sorted(self.topics)), graft=tuple(sorted(self.topics)))
        relay_peer.queue.append(hello.encode())
        relay_peer.wake.set()
        relay_peer.writer = asyncio.create_task(self._write(peer, relay_peer))
        connection.spawn(self._watch_answer(peer, relay_peer.stream))
        log.info("waku relay: relaying with %s", peer)

    async def _watch_answer(self, peer: PeerId, stream: MuxedStream) -> None:
        """Read our own stream: a refused proposal, its reset, or the connection's end (this
        task is the connection's, cancelled as it closes) ends relaying with the peer
        (gossipsub sends nothing back on it)."""
        try:
            while await stream.read():
                pass
        except (ConnectionError, OSError, WireError) as exc:
            log.info("waku relay: %s does not relay: %s", peer, exc)
        finally:
            current = self._peers.get(peer)
            if current is not None and current.stream is stream:
                self._drop(peer)

    def _drop(self, peer: PeerId) -> None:
        relay_peer = self._peers.pop(peer, None)
        if relay_peer is not None and relay_peer.writer is not None:
            relay_peer.writer.cancel()

    async def _write(self, peer: PeerId, relay_peer: _RelayPeer) -> None:
        stream = relay_peer.stream
        assert stream is not None
        try:
            while True:
                await relay_peer.wake.wait()
                relay_peer.wake.clear()
                while relay_peer.queue:
                    await stream.write_message(relay_peer.queue.popleft())
        except (ConnectionError, OSError, WireError) as exc:
            log.info("waku relay: writing to %s failed: %s", peer, exc)
            if self._peers.get(peer) is relay_peer:
                del self._peers[peer]

    def _send(self, relay_peer: _RelayPeer, rpc: bytes) -> None:
        if len(relay_peer.queue) >= QUEUE:
            relay_peer.queue.popleft()
            self.stats.dropped += 1
        relay_peer.queue.append(rpc)
        relay_peer.wake.set()

    def _forward(self, message: RelayMessage, source: PeerId | None) -> None:
        targets = [
            relay_peer
            for peer, relay_peer in self._peers.items()
            if peer != source and message.topic in relay_peer.topics
        ]
        if len(targets) > FANOUT:
            targets = random.sample(targets, FANOUT)
        if not targets:
            return
        rpc = RelayRpc(messages=(message,)).encode()
        for relay_peer in targets:
            self._send(relay_peer, rpc)
            self.stats.relayed_out += 1

    # -- the peer's stream ------------------------------------------------------------------

    async def handle(self, connection: PeerConnection, stream: MuxedStream) -> None:
        """A peer's relay stream: its subscriptions and messages, until it closes."""
        peer = connection.peer
        assert peer is not None
        await self.attach(connection)
        max_rpc = self.node.config.max_payload + 64 * 1024
        while (raw := await stream.read_message(max_rpc)) is not None:
            rpc = RelayRpc.decode(raw)
            relay_peer = self._peers.get(peer)
            if relay_peer is not None:
                relay_peer.topics.update(t for t in rpc.subscribe if t in self.topics)
                relay_peer.topics.difference_update(rpc.unsubscribe)
            for message in rpc.messages:
                await self._relayed_in(peer, message)

    async def _relayed_in(self, peer: PeerId, relayed: RelayMessage) -> None:
        if relayed.topic not in self.topics or relayed.signed:
            self.stats.refused += 1
            return
        try:
            message = WakuMessage.decode(relayed.data, max_payload=self.node.config.max_payload)
        except WireError:
            self.stats.refused += 1
            return
        if self._seen_before(message.hash(relayed.topic)):
            self.stats.duplicates += 1
            return
        try:
            await self.bridge.publish(message, relayed.topic)
        except Refused as exc:
            log.info("waku relay: a message from %s was not stored: %s", peer, exc.reason)
            self.stats.refused += 1
            return
        self.stats.relayed_in += 1
        self._forward(relayed, source=peer)
        await self.follow(message.content_topic)
