"""Bounds that hostile or merely long-lived peers reach, with real peers: a js-waku light node
that gets hundreds of filter pushes (it never closes its side of a push stream), a relay peer
that stops reading and asks (IWANT) for one large cached message thousands of times, and a
light-push client that pushes to more content topics than the node relays (each followed
topic holds a reader of its stream, which keeps the stream from expiring).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import socket
from collections.abc import AsyncIterator

import pytest

from airlane.core import Event
from airlane.transports.waku import LightClient, RequestFailed, WakuNode
from airlane.transports.waku.connection import PeerConnection
from airlane.transports.waku.pipe import TcpPipe
from airlane.transports.waku.relay import QUEUE_BYTES, RelayService
from airlane.transports.waku.streams import MuxedStream
from airlane.wire.libp2p import Identity, PeerId
from airlane.wire.waku import (
    LIGHTPUSH_V3,
    RELAY_PROTOCOL,
    LightPushRequest,
    LightPushResponse,
    RelayRpc,
    Status,
    WakuMessage,
    auto_shard,
    shard_topic,
)
from tests.waku.support import CLUSTER, TOPIC, dial, js_waku, local_node, node_binary

pytestmark = pytest.mark.timeout(90)

PUBSUB = shard_topic(CLUSTER, auto_shard(TOPIC, 8))


async def test_a_js_waku_light_node_keeps_receiving_past_the_stream_limit() -> None:
    """js-waku reads each filter-push stream to its end and never closes its own side, so a
    stream per push would leave every push stream half open on both sides: past the
    connection's stream limit (64 here) or js-libp2p's 100 filter-push streams per
    connection, pushes (and the peer's own requests) would be refused."""
    node_binary()
    async with local_node() as node, js_waku(str(node.multiaddrs[0])) as light:
        await light.command("subscribe", contentTopic=TOPIC)
        peer = PeerId.parse((await light.command("peers"))["peerId"])
        connection = node.connection_to(peer)
        assert connection is not None
        for n in range(200):  # paced: each push goes out on its own, as a chat's would
            await node.gateway.publish(
                node.bridge.principal, "waku" + TOPIC, Event.message({"n": n})
            )
            await asyncio.sleep(0.01)
        with contextlib.suppress(TimeoutError):  # the count is what the assertion shows
            await light.wait_messages(200, timeout=20)
        received = light.messages
        numbers = [int(base64.b64decode(m["payload"])[5:-1]) for m in received]
        assert numbers == list(range(200))
        assert node.filter.stats.dropped == 0
        # One push stream held open, not one per push: the connection stays far from its
        # limit (js-waku keeps a few streams of its own open ahead of use).
        assert connection.open_streams < 16
        # The light node's own requests still get a stream.
        pushed = await light.command(
            "push", contentTopic=TOPIC, payload=base64.b64encode(b"after").decode()
        )
        assert pushed["successes"] and not pushed["failures"]
        await light.wait_messages(201)
        # A subscription that ends resets its push stream; the next one gets a new stream.
        await light.command("unsubscribe", contentTopic=TOPIC)
        async with asyncio.timeout(10):
            while node.filter.topics_of(peer):
                await asyncio.sleep(0.02)
        await light.command("subscribe", contentTopic=TOPIC)
        await node.gateway.publish(node.bridge.principal, "waku" + TOPIC, Event.message("again"))
        again = await light.wait_messages(202)
        assert base64.b64decode(again[-1]["payload"]) == b'"again"'
        assert connection.open_streams < 16


class _StallablePipe:
    """A TCP pipe with a small receive buffer whose reading a test can stop: the node's writes
    to it then back up into the node's own queue for the peer."""

    websocket = False

    def __init__(self, pipe: TcpPipe) -> None:
        self._pipe = pipe
        self.remote = pipe.remote
        self.local = pipe.local
        self.reading = asyncio.Event()
        self.reading.set()

    async def read(self) -> bytes:
        await self.reading.wait()
        return await self._pipe.read()

    async def write(self, data: bytes) -> None:
        await self._pipe.write(data)

    async def close(self) -> None:
        self.reading.set()
        await self._pipe.close()


@contextlib.asynccontextmanager
async def _stalling_relay_peer(
    node: WakuNode,
) -> AsyncIterator[tuple[PeerConnection, _StallablePipe, MuxedStream]]:
    """A relay peer (this project's libp2p) on the node's TCP listener, subscribed to
    ``PUBSUB``; its pipe's ``reading`` can be cleared to stop reading."""
    address = next(a for a in node.multiaddrs if a.value("ws") is None)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # little slack in the kernel
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", int(address.value("tcp"))))
    reader, writer = await asyncio.open_connection(sock=sock)
    pipe = _StallablePipe(TcpPipe(reader, writer))

    async def inbound(connection: PeerConnection, stream: MuxedStream) -> None:
        while await stream.read():  # the node's own relay stream: read and let go
            pass

    connection = PeerConnection(
        pipe, Identity(), {RELAY_PROTOCOL: inbound}, initiator=True, remote=node.peer_id
    )
    runner = asyncio.create_task(connection.run())
    try:
        await asyncio.wait_for(connection.ready.wait(), 10)
        stream = await connection.open_stream(RELAY_PROTOCOL)
        await stream.write_message(RelayRpc(subscribe=(PUBSUB,)).encode())
        yield connection, pipe, stream
    finally:
        await connection.close()
        await asyncio.wait_for(runner, 10)


async def _push(connection: PeerConnection, message: WakuMessage) -> None:
    stream = await connection.open_stream(LIGHTPUSH_V3)
    await stream.write_message(LightPushRequest("p", message).encode())
    await stream.close()
    reply = await asyncio.wait_for(stream.read_message(1 << 16), 10)
    assert reply is not None
    assert LightPushResponse.decode(reply).status_code == Status.OK


async def _most_queued(node: WakuNode, peer: PeerId, seconds: float) -> int:
    """The most bytes queued for ``peer`` seen over ``seconds`` (sampled every 10 ms)."""
    relay = node.relay
    assert relay is not None
    most = 0
    for _ in range(int(seconds / 0.01)):
        most = max(most, relay.queued(peer)[1])
        await asyncio.sleep(0.01)
    return most


async def test_a_relay_peer_that_stops_reading_cannot_make_the_node_queue_gigabytes() -> None:
    """A peer stops reading and asks (IWANT) for one 100 KiB cached message 5,000 times in one
    RPC, and again one at a time: it is answered three times in all. Then it asks for more
    distinct messages than the peer's queue holds in bytes: the queue stays within
    `QUEUE_BYTES` (the oldest are dropped). Meanwhile another node relaying with the same
    node keeps getting what is pushed."""
    async with (
        local_node(tcp_port=0) as node,
        local_node(peers=(str(node.multiaddrs[0]),)) as other,
    ):
        relay = await _relaying(node)
        assert other.relay is not None
        async with (
            dial(node.multiaddrs[0]) as pusher,
            _stalling_relay_peer(node) as (hostile, pipe, stream),
        ):
            me = hostile.identity.peer_id
            async with asyncio.timeout(10):
                while relay.peer_count < 2:
                    await asyncio.sleep(0.02)
            big = [
                WakuMessage(bytes([n]) * (100 * 1024), TOPIC, timestamp=n + 1) for n in range(60)
            ]
            for message in big:  # cached for five heartbeats: asked for at once below
                await _push(pusher, message)
            ids = [message.hash(PUBSUB) for message in big]
            async with asyncio.timeout(10):  # the pushes were flooded to it: let them go out
                while relay.queued(me) != (0, 0):
                    await asyncio.sleep(0.02)
            pipe.reading.clear()
            await stream.write_message(RelayRpc(iwant=(ids[-1],) * 5000).encode())
            for _ in range(10):
                await stream.write_message(RelayRpc(iwant=(ids[-1],)).encode())
            # Three answers at most, however many asks: 5,000 would be 500 MB.
            one = len(big[0].encode()) + 256
            most = await _most_queued(node, me, 1.0)
            assert most <= 3 * one
            for _ in range(3):  # 18 MB asked for: more than the queue and the node's socket take
                await stream.write_message(RelayRpc(iwant=tuple(ids)).encode())
            most = await _most_queued(node, me, 1.0)
            assert most <= QUEUE_BYTES
            assert relay.stats.dropped > 0
            # The node still relays with the other node.
            await _push(pusher, WakuMessage(b"still relayed", TOPIC, timestamp=999))
            async with asyncio.timeout(10):
                while True:
                    stored = await other.bridge.history(TOPIC, PUBSUB, lambda entry: True)
                    if any(entry.message.payload == b"still relayed" for entry in stored):
                        break
                    await asyncio.sleep(0.05)


async def test_an_iwant_answer_of_large_messages_fits_what_a_node_reads() -> None:
    """Three 140 KiB messages a node joining late asks for (IWANT, after the offer it gets on
    subscribing) go out in RPCs it reads whole: one RPC of all three would be past the
    `max_payload` + 256 KiB a node reads in one, and it would reset the relay stream."""
    async with local_node() as node:
        relay = node.relay
        assert relay is not None
        messages = [
            WakuMessage(bytes([n]) * (140 * 1024), TOPIC, timestamp=n + 1) for n in range(3)
        ]
        for message in messages:
            await node.bridge.publish(message, PUBSUB)
        await relay.follow(TOPIC)  # from the stream's start: the three are cached
        async with local_node(peers=(str(node.multiaddrs[0]),)) as late:
            async with asyncio.timeout(10):
                while len(await late.bridge.history(TOPIC, PUBSUB, lambda entry: True)) < 3:
                    await asyncio.sleep(0.05)
            assert relay.peer_count == 1


async def _relaying(node: WakuNode) -> RelayService:
    """``node``'s relay, once it has a relay peer (within 10 s)."""
    relay = node.relay
    assert relay is not None
    async with asyncio.timeout(10):
        while relay.peer_count < 1:
            await asyncio.sleep(0.02)
    return relay


async def _until_stored(node: WakuNode, topic: str, payload: bytes) -> None:
    pubsub = shard_topic(CLUSTER, auto_shard(topic, 8))
    async with asyncio.timeout(10):
        while True:
            stored = await node.bridge.history(topic, pubsub, lambda entry: True)
            if any(entry.message.payload == payload for entry in stored):
                return
            await asyncio.sleep(0.05)


async def test_topics_past_the_relay_bound_are_refused_and_idle_ones_let_go() -> None:
    """A light-push client pushes to six new content topics of a node that follows three at
    most: the last three are refused (503, and not stored), the node follows three and keeps
    relaying them to another node. Without messages for a second the three are let go (their
    streams keep no reader, so they can expire); then a new topic is taken again, and a topic
    let go is followed again, from where it was let go, when a message arrives on it."""
    async with (
        local_node(max_relay_topics=3, relay_topic_idle_s=1.0) as node,
        local_node(peers=(str(node.multiaddrs[0]),)) as other,
    ):
        relay = await _relaying(node)
        topics = [f"/airlane-test/1/t{n}/proto" for n in range(6)]
        async with LightClient.connect(node.multiaddrs[0]) as client:
            statuses = []
            for n, topic in enumerate(topics):
                try:
                    await client.push(WakuMessage(b"m%d" % n, topic, timestamp=n + 1))
                except RequestFailed as exc:
                    statuses.append(exc.status)
                    assert "max_relay_topics" in (exc.description or "")
                else:
                    statuses.append(Status.OK)
            assert statuses == [Status.OK] * 3 + [Status.SERVICE_UNAVAILABLE] * 3
            assert sorted(relay.followed) == topics[:3]
            assert await node.content_topics() == topics[2::-1]  # the refused were not stored
            await client.push(WakuMessage(b"again", topics[0], timestamp=10))
            await _until_stored(other, topics[0], b"again")

            async with asyncio.timeout(10):  # idle: let go
                while relay.followed:
                    await asyncio.sleep(0.05)
            for topic in topics[:3]:
                info = await node.gateway.info(node.bridge.principal, "waku" + topic)
                assert info.subscribers == 0  # nothing holds the stream: it can expire
            await client.push(WakuMessage(b"room again", topics[3], timestamp=11))
            await _until_stored(other, topics[3], b"room again")
            await node.gateway.publish(
                node.bridge.principal, "waku" + topics[1], Event.message({"back": 1})
            )
            await _until_stored(other, topics[1], b'{"back":1}')


async def test_a_message_relayed_in_past_the_relay_bound_is_stored_not_followed() -> None:
    """Relay brings a message on a new topic to a node that follows its one topic already:
    the message is stored (and forwarded), its topic is not followed."""
    async with (
        local_node(max_relay_topics=1) as node,
        local_node(peers=(str(node.multiaddrs[0]),)) as other,
    ):
        relay = await _relaying(node)
        first, second = "/airlane-test/1/first/proto", "/airlane-test/1/second/proto"
        async with LightClient.connect(node.multiaddrs[0]) as client:
            await client.push(WakuMessage(b"first", first, timestamp=1))
        async with LightClient.connect(other.multiaddrs[0]) as client:
            await client.push(WakuMessage(b"second", second, timestamp=2))
        await _until_stored(node, second, b"second")
        assert relay.followed == [first]


async def test_a_message_pushed_after_relay_brought_it_is_stored_once() -> None:
    """A light push of a message this node already has through relay is answered OK and not
    stored again (docs/waku.md: appended once)."""
    async with (
        local_node() as node,
        local_node(peers=(str(node.multiaddrs[0]),)) as other,
    ):
        await _relaying(node)
        message = WakuMessage(b"once", TOPIC, timestamp=7)
        async with LightClient.connect(other.multiaddrs[0]) as client:
            await client.push(message)
        await _until_stored(node, TOPIC, b"once")  # relayed in
        async with LightClient.connect(node.multiaddrs[0]) as client:
            await client.push(message)  # the same message, pushed straight to this node
        await asyncio.sleep(0.3)
        stored = await node.bridge.history(TOPIC, PUBSUB, lambda entry: True)
        assert [entry.message.payload for entry in stored].count(b"once") == 1
