"""Relay's gossipsub control messages, from a peer written here that sends exactly what a test
needs: GRAFT and PRUNE move a peer in and out of a topic's mesh (a GRAFT for a topic the node
does not serve is answered with PRUNE), an offer (IHAVE) of an unseen message is answered with
IWANT for it alone, an IWANT is answered from the message cache, and at a heartbeat the node
keeps its mesh at gossipsub's degree and offers recent messages to the peers outside it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from airlane.transports.waku import WakuNode
from airlane.transports.waku.connection import PeerConnection
from airlane.transports.waku.pipe import open_pipe
from airlane.transports.waku.relay import HEARTBEAT_S, D
from airlane.transports.waku.streams import MuxedStream
from airlane.wire.libp2p import Identity
from airlane.wire.waku import (
    RELAY_PROTOCOL,
    RelayMessage,
    RelayRpc,
    WakuMessage,
    auto_shard,
    shard_topic,
)
from tests.waku.support import CLUSTER, TOPIC, local_node

pytestmark = pytest.mark.timeout(60)

PUBSUB = shard_topic(CLUSTER, auto_shard(TOPIC, 8))


class RawPeer:
    """A relay peer that sends the RPCs a test writes and keeps those the node sends."""

    def __init__(self, connection: PeerConnection) -> None:
        self.connection = connection
        self.received: asyncio.Queue[RelayRpc] = asyncio.Queue()
        self.stream: MuxedStream | None = None
        connection.handlers[RELAY_PROTOCOL] = self._inbound

    async def _inbound(self, connection: PeerConnection, stream: MuxedStream) -> None:
        while (raw := await stream.read_message(1 << 22)) is not None:
            await self.received.put(RelayRpc.decode(raw))

    async def send(self, rpc: RelayRpc) -> None:
        if self.stream is None:
            self.stream = await self.connection.open_stream(RELAY_PROTOCOL)
        await self.stream.write_message(rpc.encode())

    async def next_matching(self, want: str, timeout: float = 10.0) -> RelayRpc:
        """The next RPC from the node with a non-empty ``want`` field."""
        async with asyncio.timeout(timeout):
            while True:
                rpc = await self.received.get()
                if getattr(rpc, want):
                    return rpc


@contextlib.asynccontextmanager
async def raw_peer(node: WakuNode) -> AsyncIterator[RawPeer]:
    pipe = await open_pipe(node.multiaddrs[0])
    connection = PeerConnection(pipe, Identity(), {}, initiator=True, remote=node.peer_id)
    peer = RawPeer(connection)
    runner = asyncio.create_task(connection.run())
    try:
        await asyncio.wait_for(connection.ready.wait(), 10)
        yield peer
    finally:
        await connection.close()
        await asyncio.wait_for(runner, 10)


async def _until(predicate: object, timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():  # type: ignore[operator]
            await asyncio.sleep(0.02)


async def test_graft_and_prune_move_a_peer_in_and_out_of_the_mesh() -> None:
    async with local_node() as node, raw_peer(node) as peer:
        relay = node.relay
        assert relay is not None
        me = peer.connection.identity.peer_id
        await peer.send(RelayRpc(subscribe=(PUBSUB,), graft=(PUBSUB,)))
        await _until(lambda: me in relay.mesh(PUBSUB))
        await peer.send(RelayRpc(prune=(PUBSUB,)))
        await _until(lambda: me not in relay.mesh(PUBSUB))
        await peer.send(RelayRpc(graft=("/waku/2/rs/9/9",)))
        answer = await peer.next_matching("prune")
        assert answer.prune == ("/waku/2/rs/9/9",)


async def test_an_offer_is_answered_with_iwant_for_what_the_node_has_not_seen() -> None:
    async with local_node() as node, raw_peer(node) as peer:
        seen = WakuMessage(b"seen", TOPIC, timestamp=1)
        await peer.send(
            RelayRpc(subscribe=(PUBSUB,), messages=(RelayMessage(PUBSUB, seen.encode()),))
        )
        unseen = WakuMessage(b"unseen", TOPIC, timestamp=2)
        offer = (PUBSUB, (seen.hash(PUBSUB), unseen.hash(PUBSUB)))
        await peer.send(RelayRpc(ihave=(offer,)))
        asked = await peer.next_matching("iwant")
        assert asked.iwant == (unseen.hash(PUBSUB),)
        await peer.send(RelayRpc(messages=(RelayMessage(PUBSUB, unseen.encode()),)))
        assert node.relay is not None
        await _until(lambda: node.relay.stats.gossip_in == 1)  # type: ignore[union-attr]


async def test_iwant_is_answered_from_the_message_cache() -> None:
    async with local_node() as node, raw_peer(node) as peer:
        await peer.send(RelayRpc(subscribe=(PUBSUB,)))
        relay = node.relay
        assert relay is not None
        me = peer.connection.identity.peer_id
        await _until(lambda: me in relay._peers and PUBSUB in relay._peers[me].topics)
        message = WakuMessage(b"cached", TOPIC, timestamp=3)
        await node.bridge.publish(message, PUBSUB)
        await relay.follow(TOPIC)
        first = await peer.next_matching("messages")  # flood-published to subscribers
        assert first.messages[0].data == message.encode()
        await peer.send(RelayRpc(iwant=(message.hash(PUBSUB), b"\x00" * 32)))
        again = await peer.next_matching("messages")
        assert [m.data for m in again.messages] == [message.encode()]


async def test_the_heartbeat_keeps_the_mesh_at_its_degree_and_gossips_outside_it() -> None:
    async with local_node() as node, contextlib.AsyncExitStack() as stack:
        relay = node.relay
        assert relay is not None
        peers = [await stack.enter_async_context(raw_peer(node)) for _ in range(D + 1)]
        for peer in peers:
            await peer.send(RelayRpc(subscribe=(PUBSUB,)))
        await _until(lambda: len(relay.mesh(PUBSUB)) == D, timeout=5 * HEARTBEAT_S + 5)
        grafted = [p for p in peers if p.connection.identity.peer_id in relay.mesh(PUBSUB)]
        outside = [p for p in peers if p not in grafted]
        assert len(outside) == 1
        for peer in grafted:
            assert (await peer.next_matching("graft")).graft == (PUBSUB,)
        message = WakuMessage(b"gossiped", TOPIC, timestamp=4)
        # In from one mesh peer: forwarded to the rest of the mesh, offered to the one outside.
        await grafted[0].send(RelayRpc(messages=(RelayMessage(PUBSUB, message.encode()),)))
        offer = await outside[0].next_matching("ihave", timeout=3 * HEARTBEAT_S + 5)
        assert offer.ihave == ((PUBSUB, (message.hash(PUBSUB),)),)
        forwarded = await grafted[1].next_matching("messages")
        assert forwarded.messages[0].data == message.encode()


async def test_a_peer_that_subscribes_late_is_offered_what_it_missed() -> None:
    """A message that starts here before a peer's subscription arrives reaches no one by flood
    publishing; the peer is offered it (IHAVE) as soon as it subscribes, though as the only
    peer it is grafted into the mesh, where heartbeat gossip never goes."""
    async with local_node() as node, raw_peer(node) as peer:
        relay = node.relay
        assert relay is not None
        me = peer.connection.identity.peer_id
        await peer.send(RelayRpc())  # an empty RPC: relaying, subscribed to nothing yet
        await _until(lambda: me in relay._peers)
        message = WakuMessage(b"before you came", TOPIC, timestamp=5)
        await node.bridge.publish(message, PUBSUB)
        await relay.follow(TOPIC)
        await _until(lambda: relay._cache.recent(PUBSUB))
        assert relay.stats.relayed_out == 0  # no one was subscribed
        await peer.send(RelayRpc(subscribe=(PUBSUB,)))
        offer = await peer.next_matching("ihave", timeout=3 * HEARTBEAT_S + 5)
        assert offer.ihave == ((PUBSUB, (message.hash(PUBSUB),)),)
        await peer.send(RelayRpc(iwant=(message.hash(PUBSUB),)))
        sent = await peer.next_matching("messages")
        assert [m.data for m in sent.messages] == [message.encode()]
