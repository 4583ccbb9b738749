"""The Waku node against what js-waku would never send, through this project's own libp2p
dialer (`tests.waku.support.dial`) and raw sockets: malformed and oversized requests get the
protocol's error answer, unknown protocols are refused, floods of streams and connections
are bounded, a peer that breaks the handshake is cut off, and none of it disturbs a js-waku
light node on the same node.
"""

from __future__ import annotations

import asyncio
import base64
import os

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from airlane.gateway import GatewayConfig
from airlane.hub import MemoryHub, MemoryHubConfig
from airlane.transports.waku import LightClient, RequestFailed, WakuConfig, WakuNode
from airlane.transports.waku.connection import PeerConnection
from airlane.wire.libp2p import NegotiationFailed
from airlane.wire.libp2p.protobuf import Writer
from airlane.wire.libp2p.varint import encode_uvarint
from airlane.wire.waku import (
    FILTER_SUBSCRIBE,
    LIGHTPUSH_V2,
    LIGHTPUSH_V3,
    METADATA,
    STORE,
    FilterRequest,
    FilterResponse,
    LightPushRequest,
    LightPushResponse,
    Metadata,
    Status,
    StoreQuery,
    StoreResponse,
    WakuMessage,
    auto_shard,
    shard_topic,
)
from tests.waku.support import CLUSTER, TOPIC, dial, js_waku, local_node, node_binary

pytestmark = pytest.mark.timeout(60)


async def _ask(
    connection: PeerConnection, protocol: str, request: bytes, limit: int = 1 << 20
) -> bytes:
    """One request on a new stream; the reply."""
    stream = await connection.open_stream(protocol)
    await stream.write_message(request)
    await stream.close()
    reply = await asyncio.wait_for(stream.read_message(limit), 10)
    assert reply is not None
    return reply


async def _push(
    connection: PeerConnection, message: WakuMessage, pubsub: str | None = None
) -> LightPushResponse:
    request = LightPushRequest("r1", message, pubsub).encode()
    return LightPushResponse.decode(await _ask(connection, LIGHTPUSH_V3, request))


async def test_light_push_answers_bad_requests_with_their_status() -> None:
    async with local_node(
        max_payload=1000, shards=(0, 1, 2, 3, 4, 5, 6, 7), rln_shards=(7,)
    ) as node:
        async with dial(node.multiaddrs[0]) as connection:
            good = await _push(connection, WakuMessage(b"ok", TOPIC, timestamp=1))
            assert good.status_code == Status.OK and good.request_id == "r1"
            # Undecodable protobuf: 400, and the node stays usable on the same connection.
            reply = LightPushResponse.decode(await _ask(connection, LIGHTPUSH_V3, b"\x0a\xff"))
            assert reply.status_code == Status.BAD_REQUEST
            too_big = await _push(connection, WakuMessage(b"x" * 1001, TOPIC))
            assert too_big.status_code == Status.PAYLOAD_TOO_LARGE
            assert "1001" in (too_big.status_desc or "")
            no_topic = Writer().string(1, "r2").data(21, Writer().data(1, b"p").finish()).finish()
            reply = LightPushResponse.decode(await _ask(connection, LIGHTPUSH_V3, no_topic))
            assert reply.status_code == Status.BAD_REQUEST
            assert "content topic" in (reply.status_desc or "")
            bad_topic = await _push(connection, WakuMessage(b"p", "not-a-topic"))
            assert bad_topic.status_code == Status.BAD_REQUEST
            other_cluster = await _push(connection, WakuMessage(b"p", TOPIC), "/waku/2/rs/7/0")
            assert other_cluster.status_code == Status.UNSUPPORTED_PUBSUB_TOPIC
            rln = await _push(connection, WakuMessage(b"p", TOPIC), shard_topic(CLUSTER, 7))
            assert rln.status_code == Status.SERVICE_UNAVAILABLE
            assert "RLN" in (rln.status_desc or "")
            unmappable = await _push(connection, WakuMessage(b"p", "/app/1/a b/proto"))
            assert unmappable.status_code == Status.BAD_REQUEST
            # Version 2 of the protocol, as older js-waku speaks it.
            v2 = await _ask(
                connection,
                LIGHTPUSH_V2,
                LightPushRequest("r3", WakuMessage(b"v2", TOPIC)).encode(2),
            )
            assert v2  # a PushRpc with a response
        stored = await node.bridge.history(
            TOPIC, shard_topic(CLUSTER, auto_shard(TOPIC, 8)), lambda entry: True
        )
        assert [entry.message.payload for entry in stored] == [b"ok", b"v2"]


async def test_unknown_protocols_and_oversized_messages_reset_only_their_stream() -> None:
    async with local_node() as node, dial(node.multiaddrs[0]) as connection:
        stream = await connection.open_stream("/not/a/protocol/1.0.0")
        with pytest.raises(NegotiationFailed, match="does not speak"):
            await asyncio.wait_for(stream.read(), 10)
        # A length prefix far past any limit: that stream is reset, the connection lives.
        stream = await connection.open_stream(STORE)
        await stream.write(encode_uvarint(1 << 30))
        with pytest.raises(ConnectionError):
            await asyncio.wait_for(stream.read_message(1 << 20), 10)
        metadata = Metadata.decode(await _ask(connection, METADATA, Metadata(CLUSTER, ()).encode()))
        assert metadata.cluster_id == CLUSTER and metadata.shards == node.config.shards


async def test_a_stream_flood_is_bounded_per_connection() -> None:
    async with local_node(max_streams=8) as node, dial(node.multiaddrs[0]) as connection:
        streams = []
        for _ in range(8):  # opened and left idle, as js-waku does ahead of use
            streams.append(await connection.open_stream(LIGHTPUSH_V3))
        extra = await connection.open_stream(LIGHTPUSH_V3)
        with pytest.raises(ConnectionError):
            await asyncio.wait_for(extra.read(), 10)  # refused with a reset
        for stream in streams:
            await stream.reset()
        await asyncio.sleep(0.2)
        good = await _push(connection, WakuMessage(b"after", TOPIC))
        assert good.status_code == Status.OK


async def test_filter_limits_ping_and_unsubscribe() -> None:
    async with local_node(max_topics_per_peer=3) as node, dial(node.multiaddrs[0]) as connection:

        async def filter_request(kind: int, topics: tuple[str, ...] = ()) -> FilterResponse:
            pubsub = shard_topic(CLUSTER, auto_shard(TOPIC, 8)) if topics else None
            request = FilterRequest("f", kind, pubsub, topics).encode()
            return FilterResponse.decode(await _ask(connection, FILTER_SUBSCRIBE, request))

        assert (await filter_request(FilterRequest.PING)).status_code == Status.NOT_FOUND
        topics = tuple(f"/airlane-test/1/t{n}/proto" for n in range(4))
        too_many = await filter_request(FilterRequest.SUBSCRIBE, topics)
        assert too_many.status_code == Status.TOO_MANY_REQUESTS
        assert (await filter_request(FilterRequest.SUBSCRIBE, topics[:3])).status_code == Status.OK
        assert (await filter_request(FilterRequest.PING)).status_code == Status.OK
        assert len(node.filter.topics_of(connection.identity.peer_id)) == 3
        no_topics = await filter_request(FilterRequest.SUBSCRIBE)
        assert no_topics.status_code == Status.BAD_REQUEST
        unsubscribed = await filter_request(FilterRequest.UNSUBSCRIBE, topics[:1])
        assert unsubscribed.status_code == Status.OK
        assert len(node.filter.topics_of(connection.identity.peer_id)) == 2
        assert (await filter_request(FilterRequest.UNSUBSCRIBE_ALL)).status_code == Status.OK
        assert node.filter.topics_of(connection.identity.peer_id) == {}
        assert (await filter_request(FilterRequest.PING)).status_code == Status.NOT_FOUND


async def test_subscribers_are_bounded_even_after_they_disconnect() -> None:
    async with local_node(max_peers=2) as node:
        pubsub = shard_topic(CLUSTER, auto_shard(TOPIC, 8))
        request = FilterRequest("f", FilterRequest.SUBSCRIBE, pubsub, (TOPIC,)).encode()
        statuses = []
        for _ in range(3):  # each a new identity, gone before the next comes
            async with dial(node.multiaddrs[0]) as connection:
                reply = await _ask(connection, FILTER_SUBSCRIBE, request)
                statuses.append(FilterResponse.decode(reply).status_code)
        assert statuses == [Status.OK, Status.OK, Status.TOO_MANY_REQUESTS]
        assert node.filter.stats.subscribers == 2


async def test_a_filter_subscription_lapses_without_pings() -> None:
    async with local_node(subscription_ttl_s=0.4) as node, dial(node.multiaddrs[0]) as connection:
        pubsub = shard_topic(CLUSTER, auto_shard(TOPIC, 8))
        request = FilterRequest("f", FilterRequest.SUBSCRIBE, pubsub, (TOPIC,)).encode()
        assert (
            FilterResponse.decode(await _ask(connection, FILTER_SUBSCRIBE, request)).status_code
            == 200
        )
        async with asyncio.timeout(5):
            while node.filter.topics_of(connection.identity.peer_id):
                await asyncio.sleep(0.05)
        assert node.filter.stats.subscribers == 0


async def test_store_refuses_an_unknown_cursor_and_pages_by_hash() -> None:
    async with local_node() as node, dial(node.multiaddrs[0]) as connection:
        for n in range(5):
            assert (
                await _push(connection, WakuMessage(b"%d" % n, TOPIC, timestamp=n + 1))
            ).status_code == 200
        query = StoreQuery("q", content_topics=(TOPIC,), forward=True, limit=2)
        page = StoreResponse.decode(
            await _ask(connection, STORE, query.encode()), max_payload=1 << 20
        )
        assert [m.message.payload for m in page.messages if m.message] == [b"0", b"1"]
        assert page.cursor == page.messages[-1].message_hash
        after = StoreQuery("q", content_topics=(TOPIC,), forward=True, limit=2, cursor=page.cursor)
        page2 = StoreResponse.decode(
            await _ask(connection, STORE, after.encode()), max_payload=1 << 20
        )
        assert [m.message.payload for m in page2.messages if m.message] == [b"2", b"3"]
        hashes_only = StoreQuery("q", include_data=False, content_topics=(TOPIC,), forward=True)
        bare = StoreResponse.decode(
            await _ask(connection, STORE, hashes_only.encode()), max_payload=1 << 20
        )
        assert len(bare.messages) == 5 and all(m.message is None for m in bare.messages)
        by_hash = StoreQuery("q", message_hashes=(page.messages[0].message_hash,), forward=True)
        found = StoreResponse.decode(
            await _ask(connection, STORE, by_hash.encode()), max_payload=1 << 20
        )
        assert [m.message_hash for m in found.messages] == [page.messages[0].message_hash]
        unknown = StoreQuery("q", content_topics=(TOPIC,), cursor=b"\x01" * 32)
        refused = StoreResponse.decode(
            await _ask(connection, STORE, unknown.encode()), max_payload=1 << 20
        )
        assert refused.status_code == Status.BAD_REQUEST
        garbage = StoreResponse.decode(
            await _ask(connection, STORE, b"\xff\xff"), max_payload=1 << 20
        )
        assert garbage.status_code == Status.BAD_REQUEST


async def _raw_junk(node: WakuNode) -> None:
    """Peers that break the connection's first layers in every way a test here can think of."""
    address = node.multiaddrs[0]
    url = f"ws://127.0.0.1:{address.value('tcp')}"
    for junk in (
        os.urandom(300),
        b"\x13/multistream/1.0.0\n\x07/noise\n" + os.urandom(200),
        b"\x00" * 10,
    ):
        async with connect(url) as ws:
            await ws.send(junk)
            with pytest.raises(ConnectionClosed):  # by the node, not by the timeout
                async with asyncio.timeout(10):
                    while True:
                        await ws.recv()
    async with connect(url) as ws:
        await ws.send("text, not binary")
        with pytest.raises(ConnectionClosed):
            async with asyncio.timeout(10):
                while True:
                    await ws.recv()


async def test_hostile_peers_do_not_disturb_a_js_waku_light_node() -> None:
    node_binary()
    async with (
        local_node(handshake_timeout_s=1.0) as node,
        js_waku(str(node.multiaddrs[0])) as light,
    ):
        await light.command("subscribe", contentTopic=TOPIC)
        await _raw_junk(node)
        # A peer that says nothing: cut off after the handshake timeout.
        url = f"ws://127.0.0.1:{node.multiaddrs[0].value('tcp')}"
        async with connect(url) as silent:
            with pytest.raises(ConnectionClosed):  # after the 1 s handshake timeout
                async with asyncio.timeout(5):
                    while True:
                        await silent.recv()
        async with dial(node.multiaddrs[0]) as connection:
            assert (await _push(connection, WakuMessage(b"still here", TOPIC))).status_code == 200
        received = await light.wait_messages(1)
        assert base64.b64decode(received[0]["payload"]) == b"still here"


async def test_connections_past_max_peers_are_closed() -> None:
    async with (
        local_node(max_peers=2) as node,
        dial(node.multiaddrs[0]),
        dial(node.multiaddrs[0]),
    ):
        with pytest.raises(TimeoutError):  # closed before the handshake: never ready
            async with dial(node.multiaddrs[0]):
                pass
        assert node.stats.refused_connections == 1


async def test_the_python_light_client_over_tcp() -> None:
    async with local_node(tcp_port=0) as node:
        tcp = next(address for address in node.multiaddrs if address.value("ws") is None)
        received: list[tuple[bytes, str]] = []
        async with LightClient.connect(tcp) as client:
            pubsub = shard_topic(CLUSTER, auto_shard(TOPIC, 8))
            await client.subscribe(pubsub, [TOPIC], lambda m, p: received.append((m.payload, p)))
            await client.ping()
            assert await client.push(WakuMessage(b"over tcp", TOPIC, timestamp=7)) == 0
            async with asyncio.timeout(10):
                while not received:
                    await asyncio.sleep(0.02)
            assert received == [(b"over tcp", pubsub)]
            page = await client.store(StoreQuery("q", content_topics=(TOPIC,), forward=True))
            assert [m.message.payload for m in page.messages if m.message] == [b"over tcp"]
            with pytest.raises(RequestFailed) as refused:
                await client.push(WakuMessage(b"x", "/app/1/a b/proto"))
            assert refused.value.status == Status.BAD_REQUEST


async def test_gateway_refusals_reach_a_light_push_as_their_status() -> None:
    # The gateway's own event limit (smaller than the node's payload limit): 413.
    limited = GatewayConfig(max_event_bytes=300)
    async with local_node(gateway_config=limited) as node, dial(node.multiaddrs[0]) as connection:
        refused = await _push(connection, WakuMessage(b"x" * 600, TOPIC))
        assert refused.status_code == Status.PAYLOAD_TOO_LARGE
        assert "event_too_large" in (refused.status_desc or "")
    # A hub at its stream limit: "not now", 503.
    one_stream = MemoryHub(MemoryHubConfig(max_streams=1))
    async with local_node(hub=one_stream) as node, dial(node.multiaddrs[0]) as connection:
        assert (await _push(connection, WakuMessage(b"a", TOPIC))).status_code == Status.OK
        full = await _push(connection, WakuMessage(b"b", "/airlane-test/1/other/proto"))
        assert full.status_code == Status.SERVICE_UNAVAILABLE
        assert "hub_full" in (full.status_desc or "")


def test_an_rln_only_cluster_is_refused_with_the_reason() -> None:
    with pytest.raises(ValueError, match="RLN proofs"):
        WakuConfig(cluster_id=1)
    with pytest.raises(ValueError, match="rln_shards must be among shards"):
        WakuConfig(shards=(0,), rln_shards=(3,))
