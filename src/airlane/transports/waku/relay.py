"""`RelayService`: Waku relay (11/WAKU2-RELAY) between nodes, on ``/vac/waku/relay/2.0.0``.

Nodes that relay to each other each open one stream to the other and send gossipsub v1.1 RPCs
on it. This node subscribes to every shard it serves and keeps, per pubsub topic, a **mesh**:
up to `D` of the peers subscribed to it, GRAFTed (and PRUNEd past `D_HIGH`, topped up below
`D_LOW`) at each heartbeat (`HEARTBEAT_S`). A message is forwarded to the topic's mesh; a
message that starts here (published over Airlane's API, pushed by a light node) goes to every
subscribed peer, as gossipsub's flood publishing does. At each heartbeat the ids of the
messages of the last `GOSSIP_WINDOWS` heartbeats are offered (IHAVE) to up to `D_LAZY`
subscribed peers outside the mesh, and a peer that asks (IWANT) gets them from the message
cache (`CACHE_WINDOWS` heartbeats); ids offered to this node that it has not seen it asks for.
A peer that joins a topic is offered its recent ids at once (it may have missed them while
connecting). So a message that missed a node through the mesh still reaches it.

Messages are identified by their Waku hash: one seen within `SEEN_TTL_S` is dropped, so each
is stored once on every node however the mesh loops. What comes in is appended to its content
topic's stream (or log) and forwarded; messages with an author, sequence number or signature
are dropped, as ``StrictNoSign`` requires. What this node relays out is every event of its
content-topic streams that it has not seen: the streams are found by listing them every
`DISCOVER_S` (those that exist when relay starts are read from their end, later ones from their
first event, and a light push on a new topic has it followed at once).

Each followed topic holds a reader of its stream, and a stream with a reader never expires, so
followed topics are bounded (`WakuConfig.max_relay_topics`: a light push to a new topic past it
is answered 503, a message relayed in on one is stored and forwarded but its topic is not
followed) and a topic without messages for `WakuConfig.relay_topic_idle_s` is let go: its
stream may then expire as any idle stream does, and a new message on it (seen by the listing,
or pushed or relayed in) has it followed again from where it was let go.

Each relay peer has a queue of RPCs bounded in count (`QUEUE`) and in bytes (`QUEUE_BYTES`),
and one writer task: a slow peer loses its oldest RPCs (counted), never the node's memory. An
IWANT is answered with each message it names once, and one peer gets the same message through
IWANT at most `GOSSIP_RETRANSMISSION` times (gossipsub's own rule), so a peer that stops
reading and asks for one large message thousands of times gets it three times. Peer scoring is
left out (see docs/waku.md).
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

from airlane.core import Position
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
    Status,
    WakuMessage,
    auto_shard,
    shard_topic,
)

if TYPE_CHECKING:
    from airlane.transports.waku.node import WakuNode

__all__ = ["RelayService", "RelayStats"]

log = logging.getLogger("airlane.waku")

D, D_LOW, D_HIGH, D_LAZY = 6, 4, 12, 6
"""gossipsub v1.1's mesh degree, its bounds, and how many peers outside it gossip reaches."""
HEARTBEAT_S = 1.0
GOSSIP_WINDOWS = 3
CACHE_WINDOWS = 5
"""Heartbeats whose messages are offered (IHAVE), and kept for IWANT."""
CACHE_MAX = 10_000
"""Messages the cache holds at most."""
MAX_IWANT = 500
"""Message ids asked of one peer per IHAVE at most."""
SEEN_MAX = 65536
SEEN_TTL_S = 120.0
"""Message hashes remembered, and for how long: a message seen again is dropped."""
QUEUE = 1024
"""RPCs queued for one relay peer at most; past it the oldest are dropped."""
QUEUE_BYTES = 4 << 20
"""Bytes of RPCs queued for one relay peer at most (27 messages of the largest payload); past
it the oldest are dropped. A count alone would let 1,024 RPCs of large messages pile up for a
peer that stops reading."""
GOSSIP_RETRANSMISSION = 3
"""Times one peer is sent the same message in answer to its IWANTs (gossipsub's
``GossipSubGossipRetransmission``); more asks for it are ignored."""
ANSWER_MESSAGES = 64
"""Messages in one RPC answering an IWANT at most (and at most `WakuConfig.max_payload` bytes
of them, so the RPC stays within what a peer reads in one)."""
DISCOVER_S = 1.0
"""How often the content-topic streams are listed (and idle topics let go)."""
PARKED_MAX = 10_000
"""Topics not followed whose position relay remembers (where it let them go)."""


@dataclass(slots=True)
class RelayStats:
    """Counters for /metrics and tests."""

    relayed_in: int = 0
    relayed_out: int = 0
    duplicates: int = 0
    dropped: int = 0
    refused: int = 0
    gossip_in: int = 0
    """Messages that came because this node asked (IWANT) after an offer (IHAVE)."""


class _RelayPeer:
    __slots__ = ("connection", "queue", "queued_bytes", "stream", "topics", "wake", "writer")

    def __init__(self, connection: PeerConnection) -> None:
        self.connection = connection
        self.topics: set[str] = set()
        self.stream: MuxedStream | None = None
        self.queue: deque[bytes] = deque()
        self.queued_bytes = 0
        """The bytes of the RPCs in ``queue``."""
        self.wake = asyncio.Event()
        self.writer: asyncio.Task[None] | None = None


class _MessageCache:
    """Recent messages by id, in heartbeat windows (gossipsub's mcache), and how many times each
    was sent to a peer that asked for it (IWANT)."""

    def __init__(self) -> None:
        self.messages: dict[bytes, RelayMessage] = {}
        self.windows: deque[list[bytes]] = deque([[]])
        self.sent: dict[bytes, dict[PeerId, int]] = {}
        """Message id -> peer -> IWANT answers: forgotten with the message, so bounded by
        the cache."""

    def wanted(self, message_id: bytes, peer: PeerId) -> RelayMessage | None:
        """The message for ``peer``'s IWANT, None if it is not cached or ``peer`` had it
        `GOSSIP_RETRANSMISSION` times already."""
        message = self.messages.get(message_id)
        if message is None:
            return None
        sent = self.sent.setdefault(message_id, {})
        count = sent.get(peer, 0)
        if count >= GOSSIP_RETRANSMISSION:
            return None
        sent[peer] = count + 1
        return message

    def put(self, message_id: bytes, message: RelayMessage) -> None:
        # Past the bound a burst's newest messages are relayed but not offered in gossip.
        if message_id not in self.messages and len(self.messages) < CACHE_MAX:
            self.messages[message_id] = message
            self.windows[0].append(message_id)

    def recent(self, topic: str) -> list[bytes]:
        """Ids of the last `GOSSIP_WINDOWS` heartbeats' messages on ``topic``."""
        ids = []
        for window in list(self.windows)[:GOSSIP_WINDOWS]:
            ids += [i for i in window if self.messages[i].topic == topic]
        return ids

    def shift(self) -> None:
        self.windows.appendleft([])
        while len(self.windows) > CACHE_WINDOWS:
            for message_id in self.windows.pop():
                self.messages.pop(message_id, None)
                self.sent.pop(message_id, None)


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
        self._mesh: dict[str, set[PeerId]] = {topic: set() for topic in self.topics}
        self._cache = _MessageCache()
        self._seen: OrderedDict[bytes, float] = OrderedDict()
        self._asked: OrderedDict[bytes, None] = OrderedDict()  # ids this node asked for
        self._feeds: dict[str, TopicFeed] = {}
        self._active: dict[str, float] = {}  # followed topic -> when it last had a message
        # Topics not followed -> the position relay has relayed them to (where a topic was
        # let go, or where its stream was when listed with no room to follow it).
        self._parked: OrderedDict[str, Position] = OrderedDict()
        self._listed: set[str] = set()  # the topics of the last listing
        self._following = asyncio.Lock()  # feeds start and stop one at a time
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def peer_count(self) -> int:
        """Relay peers connected now."""
        return len(self._peers)

    def mesh(self, topic: str) -> set[PeerId]:
        """The peers in this node's mesh for ``topic``."""
        return set(self._mesh.get(topic, ()))

    @property
    def followed(self) -> list[str]:
        """The content topics relay follows now (at most `WakuConfig.max_relay_topics`)."""
        return list(self._feeds)

    def queued(self, peer: PeerId) -> tuple[int, int]:
        """RPCs queued for ``peer`` and their bytes (``(0, 0)`` for a peer not relaying)."""
        relay_peer = self._peers.get(peer)
        if relay_peer is None:
            return 0, 0
        return len(relay_peer.queue), relay_peer.queued_bytes

    async def start(self) -> None:
        """Follow the content-topic streams that exist (from their end, up to
        `WakuConfig.max_relay_topics`), then look for new ones, and start the heartbeat."""
        await self._discover(from_start=False)
        self._tasks = [
            asyncio.create_task(self._discover_forever(), name="waku-relay-discovery"),
            asyncio.create_task(self._heartbeats(), name="waku-relay-heartbeat"),
        ]

    async def aclose(self) -> None:
        """Stop following streams, the heartbeat and writing to peers."""
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for feed in self._feeds.values():
            await feed.aclose()
        self._feeds.clear()
        self._active.clear()
        for peer in list(self._peers):
            self._drop(peer)

    # -- which streams ----------------------------------------------------------------------

    async def _discover_forever(self) -> None:
        while True:
            await asyncio.sleep(DISCOVER_S)
            try:
                await self._let_go_idle()
                await self._discover(from_start=True)
            except AirlaneError as exc:
                log.warning("waku relay: cannot list the content-topic streams: %s", exc)

    async def _discover(self, *, from_start: bool) -> None:
        """Follow the listed topics not followed yet: a stream first listed now from its first
        event (``from_start``; those there when relay starts from their end); a topic let go,
        or not followed for want of room, only once it has messages past where relay left
        it, from there. A followed topic holds a reader of its stream, which keeps the stream
        from expiring: one without messages is let go (`_let_go_idle`) and stays so."""
        listed = set()
        parked = self._parked
        for topic, info in await self.node.content_topic_streams():
            listed.add(topic)
            if topic in self._feeds:
                continue
            if info is None:  # a topic kept in an event log (configured): always followed
                await self.follow(topic, from_start=from_start)
                continue
            now = Position(info.epoch, info.last_seq)
            since = parked.get(topic)
            if since is None:
                new = from_start and topic not in self._listed
                if not await self.follow(topic, from_start=new):
                    # No room: relayed from here once there is (what came before is not, so
                    # that nothing relayed in and forwarded already goes out again).
                    self._park(topic, now)
            elif since != now:
                await self.follow(topic, after=since)
        self._listed = listed

    def _park(self, topic: str, position: Position) -> None:
        """Remember where relay left a topic it does not follow, for `PARKED_MAX` topics (the
        oldest is forgotten: pushed to again, such a topic is followed from its stream's
        first event, and its messages older than `SEEN_TTL_S` are relayed again)."""
        self._parked[topic] = position
        self._parked.move_to_end(topic)
        while len(self._parked) > PARKED_MAX:
            self._parked.popitem(last=False)

    async def _let_go_idle(self) -> None:
        """Stop following the topics without a message for `WakuConfig.relay_topic_idle_s`,
        remembering where each was, so their streams can expire and their share of
        `WakuConfig.max_relay_topics` goes to other topics."""
        before = time.monotonic() - self.node.config.relay_topic_idle_s
        idle = [topic for topic, at in self._active.items() if at < before]
        if not idle:
            return
        async with self._following:
            for topic in idle:
                feed = self._feeds.get(topic)
                if feed is None or self._active.get(topic, 0.0) >= before:
                    continue
                if self.bridge.logs.log_for(topic) is not None:
                    self._active[topic] = time.monotonic()  # a configured log: holds no reader
                    continue
                position = feed.position
                del self._feeds[topic]
                del self._active[topic]
                await feed.aclose()
                if position is not None:
                    self._park(topic, position)
                log.debug("waku relay: %s was idle; let go", topic)

    def admit(self, content_topic: str) -> None:
        """Check that ``content_topic`` can be followed (it is, or there is room): what a light
        push asks before storing a message on a new topic.

        Raises:
            Refused: 503, this node follows `WakuConfig.max_relay_topics` topics already.
        """
        if content_topic not in self._feeds:
            self._check_room()

    def _check_room(self) -> None:
        limit = self.node.config.max_relay_topics
        if len(self._feeds) >= limit:
            raise Refused(
                Status.SERVICE_UNAVAILABLE,
                f"this node relays at most {limit} content topics at once (max_relay_topics); "
                f"a topic is let go after {self.node.config.relay_topic_idle_s:g} s without "
                "messages",
            )

    async def follow(
        self, content_topic: str, *, from_start: bool = True, after: Position | None = None
    ) -> bool:
        """Relay what the content topic's stream gets: from its first event by default, from
        its end with ``from_start=False``, after ``after`` if given; a topic let go is followed
        again from where it was let go. Whether it is followed (False past
        `WakuConfig.max_relay_topics`, or if the gateway refused: logged)."""
        if content_topic in self._feeds:
            self._active[content_topic] = time.monotonic()
            return True
        async with self._following:
            if content_topic in self._feeds:
                return True
            try:
                self._check_room()
            except Refused as exc:
                log.debug("waku relay: not following %s: %s", content_topic, exc.reason)
                return False
            parked = self._parked.pop(content_topic, None)
            feed = TopicFeed(
                self.bridge,
                content_topic,
                self._on_message,
                from_start=from_start,
                after=after or parked,
            )
            try:
                await feed.start()
            except (AirlaneError, Refused) as exc:
                log.info("waku relay: cannot follow %s: %s", content_topic, exc)
                if parked is not None:
                    self._park(content_topic, parked)
                return False
            self._feeds[content_topic] = feed
            self._active[content_topic] = time.monotonic()
            return True

    def _on_message(self, content_topic: str, message: WakuMessage, pubsub: str | None) -> None:
        if content_topic in self._active:
            self._active[content_topic] = time.monotonic()
        if pubsub is None:
            config = self.node.config
            shard = auto_shard(content_topic, config.shards_in_cluster)
            pubsub = shard_topic(config.cluster_id, shard)
        if pubsub not in self.topics:
            return
        digest = message.hash(pubsub)
        if self._seen_before(digest):
            return
        relayed = RelayMessage(pubsub, message.encode())
        self._cache.put(digest, relayed)
        self._forward(relayed, source=None)

    def has_seen(self, message: WakuMessage, pubsub: str) -> bool:
        """Whether ``message`` (on ``pubsub``) went through this node's relay within
        `SEEN_TTL_S`, relayed in or out: it is stored here already."""
        return self._seen_now(message.hash(pubsub))

    def _seen_before(self, digest: bytes) -> bool:
        """Whether ``digest`` was seen within `SEEN_TTL_S`; remembers it either way."""
        if self._seen_now(digest):
            return True
        self._seen[digest] = time.monotonic()
        if len(self._seen) > SEEN_MAX:
            self._seen.popitem(last=False)
        return False

    def _seen_now(self, digest: bytes) -> bool:
        now = time.monotonic()
        seen = self._seen
        while seen and next(iter(seen.values())) < now - SEEN_TTL_S:
            seen.popitem(last=False)
        return digest in seen

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
        self._send(relay_peer, RelayRpc(subscribe=tuple(sorted(self.topics))).encode())
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
        for mesh in self._mesh.values():
            mesh.discard(peer)
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
                    rpc = relay_peer.queue.popleft()
                    relay_peer.queued_bytes -= len(rpc)
                    await stream.write_message(rpc)
        except (ConnectionError, OSError, WireError) as exc:
            log.info("waku relay: writing to %s failed: %s", peer, exc)
            if self._peers.get(peer) is relay_peer:
                self._drop(peer)

    def _send(self, relay_peer: _RelayPeer, rpc: bytes) -> None:
        """Queue ``rpc`` for the peer, dropping the oldest past `QUEUE` or `QUEUE_BYTES` (an
        RPC larger than `QUEUE_BYTES` alone is still sent)."""
        queue = relay_peer.queue
        while queue and (len(queue) >= QUEUE or relay_peer.queued_bytes + len(rpc) > QUEUE_BYTES):
            relay_peer.queued_bytes -= len(queue.popleft())
            self.stats.dropped += 1
        queue.append(rpc)
        relay_peer.queued_bytes += len(rpc)
        relay_peer.wake.set()

    def _subscribed(self, topic: str) -> list[PeerId]:
        return [peer for peer, relay_peer in self._peers.items() if topic in relay_peer.topics]

    def _forward(self, message: RelayMessage, source: PeerId | None) -> None:
        """To the topic's mesh; a message that starts here to every subscribed peer."""
        if source is None:
            targets = self._subscribed(message.topic)
        else:
            targets = [peer for peer in self._mesh.get(message.topic, ()) if peer != source]
        if not targets:
            return
        rpc = RelayRpc(messages=(message,)).encode()
        for peer in targets:
            self._send(self._peers[peer], rpc)
            self.stats.relayed_out += 1

    # -- the heartbeat ----------------------------------------------------------------------

    async def _heartbeats(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            self.heartbeat()

    def heartbeat(self) -> None:
        """Keep each topic's mesh between `D_LOW` and `D_HIGH`, offer recent messages to peers
        outside it, and move the message cache on."""
        for topic, mesh in self._mesh.items():
            subscribed = self._subscribed(topic)
            mesh.intersection_update(subscribed)
            if len(mesh) < D_LOW:
                candidates = [peer for peer in subscribed if peer not in mesh]
                for peer in random.sample(candidates, min(len(candidates), D - len(mesh))):
                    mesh.add(peer)
                    self._send(self._peers[peer], RelayRpc(graft=(topic,)).encode())
            elif len(mesh) > D_HIGH:
                for peer in random.sample(sorted(mesh, key=str), len(mesh) - D):
                    mesh.discard(peer)
                    self._send(self._peers[peer], RelayRpc(prune=(topic,)).encode())
            offered = self._cache.recent(topic)
            if offered:
                outside = [peer for peer in subscribed if peer not in mesh]
                rpc = RelayRpc(ihave=((topic, tuple(offered)),)).encode()
                for peer in random.sample(outside, min(len(outside), D_LAZY)):
                    self._send(self._peers[peer], rpc)
        self._cache.shift()

    # -- the peer's stream ------------------------------------------------------------------

    async def handle(self, connection: PeerConnection, stream: MuxedStream) -> None:
        """A peer's relay stream: its subscriptions, control messages and messages, until it
        closes."""
        peer = connection.peer
        assert peer is not None
        await self.attach(connection)
        max_rpc = self.node.config.max_payload + 256 * 1024
        while (raw := await stream.read_message(max_rpc)) is not None:
            rpc = RelayRpc.decode(raw)
            relay_peer = self._peers.get(peer)
            if relay_peer is None:
                continue
            before = set(relay_peer.topics)
            relay_peer.topics.update(t for t in rpc.subscribe if t in self.topics)
            relay_peer.topics.difference_update(rpc.unsubscribe)
            self._control(peer, relay_peer, rpc)
            self._offer_recent(relay_peer, relay_peer.topics - before)
            for message in rpc.messages:
                await self._relayed_in(peer, message)

    def _control(self, peer: PeerId, relay_peer: _RelayPeer, rpc: RelayRpc) -> None:
        refused = []
        for topic in rpc.graft:
            mesh = self._mesh.get(topic)
            if mesh is None or len(mesh) >= D_HIGH:
                refused.append(topic)  # not a topic here, or a full mesh: PRUNE
            else:
                mesh.add(peer)
                relay_peer.topics.add(topic)
        for topic in rpc.prune:
            self._mesh.get(topic, set()).discard(peer)
        wanted = [
            message_id
            for topic, ids in rpc.ihave
            if topic in self.topics
            for message_id in ids
            if not self._seen_now(message_id)
        ][:MAX_IWANT]
        for message_id in wanted:
            self._asked[message_id] = None
        while len(self._asked) > MAX_IWANT * 10:
            self._asked.popitem(last=False)
        if refused or wanted:
            self._send(relay_peer, RelayRpc(prune=tuple(refused), iwant=tuple(wanted)).encode())
        if rpc.iwant:
            self._answer(peer, relay_peer, rpc.iwant)

    def _answer(self, peer: PeerId, relay_peer: _RelayPeer, iwant: tuple[bytes, ...]) -> None:
        """Send the cached messages an IWANT names: each id once however often it is named,
        each message at most `GOSSIP_RETRANSMISSION` times to one peer, in RPCs of at most
        `ANSWER_MESSAGES` messages and ``max_payload`` bytes, and no more than `QUEUE_BYTES`
        in all (the queue would drop the rest at once)."""
        limit = self.node.config.max_payload
        batch: list[RelayMessage] = []
        size = total = 0
        for message_id in dict.fromkeys(iwant):
            cached = self._cache.messages.get(message_id)
            if cached is not None and total + len(cached.data) > QUEUE_BYTES:
                self.stats.dropped += 1  # it would only push out what this answer queued
                continue
            message = self._cache.wanted(message_id, peer)
            if message is None:
                continue
            if batch and (len(batch) >= ANSWER_MESSAGES or size + len(message.data) > limit):
                self._send(relay_peer, RelayRpc(messages=tuple(batch)).encode())
                batch, size = [], 0
            batch.append(message)
            size += len(message.data)
            total += len(message.data)
        if batch:
            self._send(relay_peer, RelayRpc(messages=tuple(batch)).encode())

    def _offer_recent(self, relay_peer: _RelayPeer, topics: set[str]) -> None:
        """Offer a peer that has just joined ``topics`` their recent messages (IHAVE).

        A message that started here before the peer's subscription arrived went to no one
        (flood publishing reaches subscribed peers only), and heartbeat gossip goes to peers
        outside the mesh, which a lone peer is not once it is grafted: without this offer
        such a message would never reach it.
        """
        offers = tuple(
            (topic, tuple(recent))
            for topic in sorted(topics)
            if (recent := self._cache.recent(topic))
        )
        if offers:
            self._send(relay_peer, RelayRpc(ihave=offers).encode())

    async def _relayed_in(self, peer: PeerId, relayed: RelayMessage) -> None:
        if relayed.topic not in self.topics or relayed.signed:
            self.stats.refused += 1
            return
        try:
            message = WakuMessage.decode(relayed.data, max_payload=self.node.config.max_payload)
        except WireError:
            self.stats.refused += 1
            return
        digest = message.hash(relayed.topic)
        if self._seen_before(digest):
            self.stats.duplicates += 1
            return
        try:
            await self.bridge.publish(message, relayed.topic)
        except Refused as exc:
            log.info("waku relay: a message from %s was not stored: %s", peer, exc.reason)
            self.stats.refused += 1
            return
        self.stats.relayed_in += 1
        if digest in self._asked:  # it came because this node asked
            del self._asked[digest]
            self.stats.gossip_in += 1
        self._cache.put(digest, relayed)
        self._forward(relayed, source=peer)
        # Followed from here on (this message is forwarded already); past max_relay_topics it
        # is not: the message is stored and forwarded all the same, and its stream, which no
        # reader holds, expires as any idle stream does.
        await self.follow(message.content_topic, from_start=False)
