"""Waku relay between Airlane nodes (each with its own gateway and streams): what is pushed to
one node reaches a js-waku light node subscribed on another, what is published through one
node's gateway is in the others' stores, each message once on every node however the mesh
loops, a relay peer's bad RPCs and messages are refused, and a node that comes back under the
same identity is dialled again.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from collections.abc import Sequence

import pytest

from airlane.core import Event
from airlane.transports.waku import WakuNode
from airlane.wire.libp2p import Identity
from airlane.wire.libp2p.varint import prefixed
from airlane.wire.waku import (
    LIGHTPUSH_V3,
    RELAY_PROTOCOL,
    LightPushRequest,
    LightPushResponse,
    RelayMessage,
    RelayRpc,
    Status,
    WakuMessage,
    auto_shard,
    shard_topic,
)
from airlane.wire.waku.enr import Enr
from tests.waku.support import (
    CLUSTER,
    TOPIC,
    dial,
    js_relay,
    js_relay_listening,
    js_waku,
    local_node,
    node_binary,
)

pytestmark = pytest.mark.timeout(60)

PUBSUB = shard_topic(CLUSTER, auto_shard(TOPIC, 8))


async def _stored(node: WakuNode) -> list[bytes]:
    entries = await node.bridge.history(TOPIC, PUBSUB, lambda entry: True)
    return [entry.message.payload for entry in entries]


async def _until_stored(
    nodes: Sequence[WakuNode], payloads: list[bytes], timeout: float = 10
) -> None:
    async with asyncio.timeout(timeout):
        while True:
            held = [sorted(await _stored(node)) for node in nodes]
            if all(stored == sorted(payloads) for stored in held):
                return
            await asyncio.sleep(0.05)


async def _until_relaying(node: WakuNode, peers: int, timeout: float = 10) -> None:
    assert node.relay is not None
    async with asyncio.timeout(timeout):
        while node.relay.peer_count < peers:
            await asyncio.sleep(0.02)


async def _push(node: WakuNode, payload: bytes) -> None:
    async with dial(node.multiaddrs[0]) as connection:
        stream = await connection.open_stream(LIGHTPUSH_V3)
        await stream.write_message(
            LightPushRequest("p", WakuMessage(payload, TOPIC, timestamp=1)).encode()
        )
        await stream.close()
        reply = await asyncio.wait_for(stream.read_message(1 << 16), 10)
        assert reply is not None
        assert LightPushResponse.decode(reply).status_code == Status.OK


async def test_two_nodes_relay_to_each_other_and_to_a_js_waku_node() -> None:
    node_binary()
    async with local_node() as a, local_node(peers=(str(a.multiaddrs[0]),)) as b:
        await _until_relaying(a, 1)
        await _until_relaying(b, 1)
        async with js_waku(str(b.multiaddrs[0])) as light:
            await light.command("subscribe", contentTopic=TOPIC)
            await _push(a, b"pushed to a")
            received = await light.wait_messages(1)
            assert base64.b64decode(received[0]["payload"]) == b"pushed to a"
            # Published through b's gateway (as the HTTP API does): relayed to a.
            await b.gateway.publish(b.bridge.principal, "waku" + TOPIC, Event.message({"via": "b"}))
            await _until_stored([a, b], [b"pushed to a", b'{"via":"b"}'])
            pushed = await light.command(
                "push", contentTopic=TOPIC, payload=base64.b64encode(b"js").decode()
            )
            assert pushed["successes"]
            await _until_stored([a, b], [b"pushed to a", b'{"via":"b"}', b"js"])
        assert a.relay is not None and b.relay is not None
        assert a.relay.stats.relayed_in == 2 and b.relay.stats.relayed_in == 1


async def test_a_triangle_stores_each_message_once_on_every_node() -> None:
    async with local_node() as a, local_node(peers=(str(a.multiaddrs[0]),)) as b:
        peers = (str(a.multiaddrs[0]), str(b.multiaddrs[0]))
        async with local_node(peers=peers) as c:
            await _until_relaying(a, 2)
            await _until_relaying(b, 2)
            await _until_relaying(c, 2)
            async with asyncio.timeout(10):  # each node's mesh holds the other two
                while any(len(n.relay.mesh(PUBSUB)) < 2 for n in (a, b, c) if n.relay):
                    await asyncio.sleep(0.05)
            payloads = [b"m%d" % n for n in range(20)]
            for n, payload in enumerate(payloads):
                await _push((a, b, c)[n % 3], payload)
            await _until_stored([a, b, c], payloads)
            await asyncio.sleep(0.3)  # anything relayed twice would land by now
            for node in (a, b, c):
                assert sorted(await _stored(node)) == sorted(payloads)
            duplicates = sum(node.relay.stats.duplicates for node in (a, b, c) if node.relay)
            assert duplicates > 0  # the loop happened, and was cut


async def test_bad_relay_traffic_is_refused_and_the_relay_goes_on() -> None:
    async with local_node() as a, dial(a.multiaddrs[0]) as connection:
        stream = await connection.open_stream(RELAY_PROTOCOL)
        foreign = RelayMessage("/waku/2/rs/9/0", WakuMessage(b"x", TOPIC).encode())
        undecodable = RelayMessage(PUBSUB, b"\xff\xff\xff")
        good = RelayMessage(PUBSUB, WakuMessage(b"good", TOPIC, timestamp=5).encode())
        too_big = RelayMessage(
            PUBSUB, WakuMessage(b"x" * (a.config.max_payload + 1), TOPIC).encode()
        )
        await stream.write_message(
            RelayRpc(
                subscribe=(PUBSUB,), messages=(foreign, undecodable, too_big, good, good)
            ).encode()
        )
        await _until_stored([a], [b"good"])
        assert a.relay is not None
        assert a.relay.stats.refused == 3 and a.relay.stats.duplicates == 1
        # A malformed RPC resets that stream; the node still serves the connection.
        await stream.write(prefixed(b"\x0a\x05\x08"))
        with pytest.raises(ConnectionError):
            async with asyncio.timeout(10):
                while True:
                    await stream.read()
        await _push(a, b"after")
        assert sorted(await _stored(a)) == [b"after", b"good"]


async def test_a_node_back_under_the_same_identity_is_dialled_again() -> None:
    identity = Identity()
    async with contextlib.AsyncExitStack() as first:
        a = await first.enter_async_context(local_node(identity=identity))
        port = int(a.multiaddrs[0].value("tcp") or 0)
        address = str(a.multiaddrs[0])
        async with local_node(peers=(address,)) as b:
            assert b.relay is not None
            await _until_relaying(b, 1)
            await first.aclose()  # a stops; b keeps dialling it
            async with asyncio.timeout(10):
                while b.relay.peer_count:
                    await asyncio.sleep(0.02)
            async with local_node(identity=identity, port=port) as a_again:
                await _until_relaying(b, 1, timeout=20)
                await _push(a_again, b"after restart")
                await _until_stored([a_again, b], [b"after restart"])


async def test_peer_exchange_gives_a_js_waku_node_the_other_nodes_record() -> None:
    node_binary()
    async with (
        local_node(identity=Identity.generate("secp256k1")) as a,
        local_node(identity=Identity.generate("secp256k1"), peers=(str(a.multiaddrs[0]),)) as b,
    ):
        await _until_relaying(b, 1)
        async with asyncio.timeout(10):  # b asks a for its record once it dialled it
            while not b.exchange_records(10)[1:]:
                await asyncio.sleep(0.02)
        records = [Enr.decode(raw) for raw in b.exchange_records(10)]
        assert [record.peer_id() for record in records] == [b.peer_id, a.peer_id]
        assert records[1].multiaddrs() == [a.listen_addrs[0]]
        async with js_waku(str(b.multiaddrs[0]), peerExchange=True) as light:
            async with asyncio.timeout(20):
                while True:
                    known = (await light.command("peers", known=True))["known"]
                    found = {peer["peerId"]: peer["addresses"] for peer in known}
                    if str(a.peer_id) in found:
                        break
                    await asyncio.sleep(0.2)
            assert str(a.listen_addrs[0]) in found[str(a.peer_id)]


async def test_records_that_are_not_the_peers_own_are_not_kept() -> None:
    async with local_node(identity=Identity.generate("secp256k1")) as node:
        stranger = Identity.generate("secp256k1")
        assert stranger.secp256k1 is not None
        record = Enr.make(stranger.secp256k1, seq=1).encode()
        other = Identity.generate("secp256k1").peer_id
        assert not node.learn_record(other, record)  # signed, but by someone else
        assert not node.learn_record(stranger.peer_id, record[:-1] + b"\x00")  # tampered
        assert node.learn_record(stranger.peer_id, record)
        assert node.exchange_records(5)[1:] == (record,)


async def test_relay_with_js_libp2p_gossipsub() -> None:
    """Another gossipsub (js-libp2p's, under Waku's StrictNoSign rules): messages both ways,
    identified by the same hash on both sides."""
    node_binary()
    async with local_node() as a, js_relay(str(a.multiaddrs[0]), [PUBSUB]) as peer:
        await _until_relaying(a, 1)
        await _push(a, b"from python")
        received = await peer.wait_messages(1)
        sent = WakuMessage(b"from python", TOPIC, timestamp=1)
        assert received[0]["hash"] == received[0]["msgId"] == sent.hash(PUBSUB).hex()
        assert base64.b64decode(received[0]["payload"]) == b"from python"
        published = await peer.command(
            "publish",
            topic=PUBSUB,
            contentTopic=TOPIC,
            payload=base64.b64encode(b"from js").decode(),
            meta=base64.b64encode(b"m").decode(),
        )
        await _until_stored([a], [b"from python", b"from js"])
        entries = await a.bridge.history(TOPIC, PUBSUB, lambda entry: True)
        assert entries[-1].hash.hex() == published["hash"]
        assert entries[-1].message.meta == b"m"
        await asyncio.sleep(0.3)
        assert len(peer.messages) == 1  # its own message did not come back


@pytest.mark.parametrize("transport", ["ws", "tcp"])
async def test_a_node_dials_a_js_libp2p_relay_peer(transport: str) -> None:
    """This node as the initiator (its Noise and multistream dialer against js-libp2p's),
    over WebSocket and over TCP: relay both ways."""
    node_binary()
    listen = "/ip4/127.0.0.1/tcp/0/ws" if transport == "ws" else "/ip4/127.0.0.1/tcp/0"
    async with contextlib.AsyncExitStack() as stack:
        peer = await stack.enter_async_context(js_relay_listening([listen], [PUBSUB]))
        address = peer.started["addresses"][0]
        node = await stack.enter_async_context(local_node(peers=(address,)))
        await peer.command("await", peer=str(node.peer_id), topics=[PUBSUB])
        await _until_relaying(node, 1)
        await _push(node, b"dialled")
        received = await peer.wait_messages(1)
        assert base64.b64decode(received[0]["payload"]) == b"dialled"
        await peer.command(
            "publish", topic=PUBSUB, contentTopic=TOPIC, payload=base64.b64encode(b"back").decode()
        )
        await _until_stored([node], [b"dialled", b"back"])
