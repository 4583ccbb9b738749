"""The protocol handlers of the Waku service node: identify, ping, metadata, filter
subscribe, light push (versions 2 and 3), store and peer exchange.

Each handler gets an inbound stream that chose its protocol. Request-response handlers read
requests until the peer closes the stream (js-waku sends one per stream), each within
`WakuConfig.request_timeout_s`, and answer every request they can read; one they cannot
read gets the protocol's "bad request" answer (a stream reset where the protocol has none).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from airlane.transports.waku.bridge import Refused, StoredEntry
from airlane.transports.waku.connection import Handler, PeerConnection
from airlane.transports.waku.streams import MuxedStream
from airlane.wire.errors import DecodeError
from airlane.wire.libp2p import (
    IDENTIFY_PROTOCOL,
    IDENTIFY_PUSH_PROTOCOL,
    PING_PROTOCOL,
    PING_SIZE,
    Identify,
    Multiaddr,
)
from airlane.wire.waku import (
    FILTER_SUBSCRIBE,
    LIGHTPUSH_V2,
    LIGHTPUSH_V3,
    METADATA,
    PEER_EXCHANGE,
    RELAY_PROTOCOL,
    STORE,
    FilterRequest,
    FilterResponse,
    LightPushRequest,
    LightPushResponse,
    Metadata,
    PayloadTooLarge,
    PeerExchangeQuery,
    PeerExchangeResponse,
    Status,
    StoredMessage,
    StoreQuery,
    StoreResponse,
)

if TYPE_CHECKING:
    from airlane.transports.waku.node import WakuNode

__all__ = ["handlers"]

log = logging.getLogger("airlane.waku")

_SMALL = 64 * 1024
"""The largest request other than a light push (subscriptions, queries, metadata)."""


def handlers(node: WakuNode) -> dict[str, Handler]:
    """Every protocol the node answers, by protocol id."""
    service = _Service(node)
    relay: dict[str, Handler] = {} if node.relay is None else {RELAY_PROTOCOL: node.relay.handle}
    return relay | {
        IDENTIFY_PROTOCOL: service.identify,
        IDENTIFY_PUSH_PROTOCOL: service.identify_push,
        PING_PROTOCOL: service.ping,
        METADATA: service.metadata,
        FILTER_SUBSCRIBE: service.filter_subscribe,
        LIGHTPUSH_V3: service.lightpush_v3,
        LIGHTPUSH_V2: service.lightpush_v2,
        STORE: service.store,
        PEER_EXCHANGE: service.peer_exchange,
    }


class _Service:
    def __init__(self, node: WakuNode) -> None:
        self.node = node
        self.config = node.config

    async def _request(self, stream: MuxedStream, limit: int) -> bytes | None:
        """The next request; None once the peer closed (or took too long: then reset)."""
        try:
            async with asyncio.timeout(self.config.request_timeout_s):
                return await stream.read_message(limit)
        except TimeoutError:
            await stream.reset()
            return None

    async def _answer_all(
        self, stream: MuxedStream, limit: int, answer: Callable[[bytes], Awaitable[bytes]]
    ) -> None:
        while (request := await self._request(stream, limit)) is not None:
            await stream.write_message(await answer(request))
        await stream.close()

    # -- libp2p -----------------------------------------------------------------------------

    async def identify(self, connection: PeerConnection, stream: MuxedStream) -> None:
        node = self.node
        host, port = connection.pipe.remote
        observed = Multiaddr.of(host, port, ws=connection.pipe.websocket)
        message = Identify(
            public_key=node.identity.public_key.encode(),
            listen_addrs=tuple(node.listen_addrs),
            protocols=tuple(sorted(node.handlers)),
            observed_addr=observed,
            agent_version=node.agent,
        )
        await stream.write_message(message.encode())
        await stream.close()

    async def identify_push(self, connection: PeerConnection, stream: MuxedStream) -> None:
        # Nothing here depends on a peer's later updates: read to the end, bounded.
        while await stream.read_message(_SMALL) is not None:
            pass
        await stream.close()

    async def ping(self, connection: PeerConnection, stream: MuxedStream) -> None:
        pending = b""
        while True:
            data = await stream.read()
            if not data:
                break
            pending += data
            while len(pending) >= PING_SIZE:
                await stream.write(pending[:PING_SIZE])
                pending = pending[PING_SIZE:]
        await stream.close()

    # -- Waku -------------------------------------------------------------------------------

    async def metadata(self, connection: PeerConnection, stream: MuxedStream) -> None:
        config = self.config
        ours = Metadata(config.cluster_id, config.shards).encode()

        async def answer(request: bytes) -> bytes:
            try:
                theirs = Metadata.decode(request)
            except DecodeError:
                return ours
            if theirs.cluster_id is not None and theirs.cluster_id != config.cluster_id:
                log.info(
                    "waku: %s is in cluster %d, this node in %d",
                    connection.peer,
                    theirs.cluster_id,
                    config.cluster_id,
                )
            return ours

        await self._answer_all(stream, _SMALL, answer)

    async def filter_subscribe(self, connection: PeerConnection, stream: MuxedStream) -> None:
        peer = connection.peer
        assert peer is not None
        service = self.node.filter

        async def answer(raw: bytes) -> bytes:
            try:
                request = FilterRequest.decode(raw)
            except DecodeError as exc:
                return FilterResponse("", Status.BAD_REQUEST, str(exc)).encode()
            status, description = await service.handle(peer, request)
            return FilterResponse(request.request_id, status, description).encode()

        await self._answer_all(stream, _SMALL, answer)

    async def lightpush_v3(self, connection: PeerConnection, stream: MuxedStream) -> None:
        await self._lightpush(stream, 3)

    async def lightpush_v2(self, connection: PeerConnection, stream: MuxedStream) -> None:
        await self._lightpush(stream, 2)

    async def _lightpush(self, stream: MuxedStream, version: int) -> None:
        bridge = self.node.bridge
        relay = self.node.relay
        max_payload = self.config.max_payload

        async def answer(raw: bytes) -> bytes:
            try:
                request = LightPushRequest.decode(raw, version=version, max_payload=max_payload)
            except DecodeError as exc:
                too_large = isinstance(exc, PayloadTooLarge)
                status = Status.PAYLOAD_TOO_LARGE if too_large else Status.BAD_REQUEST
                return LightPushResponse("", status, str(exc)).encode(version)
            message = request.message
            try:
                if message.version not in (None, 0):
                    raise Refused(Status.BAD_REQUEST, f"message version {message.version}")
                pubsub = bridge.pubsub_for(message.content_topic, request.pubsub_topic)
                if relay is not None and relay.has_seen(message, pubsub):
                    # Relayed here already (from another node, or pushed before): stored
                    # once, as relay stores what it sees twice once.
                    count = self.node.relay_peer_count()
                    return LightPushResponse(request.request_id, Status.OK, None, count).encode(
                        version
                    )
                if relay is not None:  # past max_relay_topics a new topic is refused, unstored
                    relay.admit(message.content_topic)
                await bridge.publish(message, pubsub)
                if relay is not None:  # a new topic is relayed now, not at the next discovery
                    await relay.follow(message.content_topic)
            except Refused as exc:
                response = LightPushResponse(request.request_id, exc.status, exc.reason)
                return response.encode(version)
            self.node.stats.pushed_in += 1
            count = self.node.relay_peer_count()
            return LightPushResponse(request.request_id, Status.OK, None, count).encode(version)

        await self._answer_all(stream, max_payload + 4096, answer)

    async def store(self, connection: PeerConnection, stream: MuxedStream) -> None:
        await self._answer_all(stream, _SMALL, self._store_answer)

    async def _store_answer(self, raw: bytes) -> bytes:
        try:
            query = StoreQuery.decode(raw)
        except DecodeError as exc:
            return StoreResponse("", Status.BAD_REQUEST, str(exc)).encode()
        try:
            return (await self._query(query)).encode()
        except Refused as exc:
            return StoreResponse(query.request_id, exc.status, exc.reason).encode()

    async def _query(self, query: StoreQuery) -> StoreResponse:
        bridge = self.node.bridge
        config = self.config
        topics = list(query.content_topics) or await self.node.content_topics()
        if not topics:
            return StoreResponse(query.request_id, Status.OK)
        hashes = set(query.message_hashes)

        def accept(entry: StoredEntry) -> bool:
            timestamp = entry.message.timestamp or 0
            if query.pubsub_topic and entry.pubsub_topic != query.pubsub_topic:
                return False
            if query.time_start is not None and timestamp < query.time_start:
                return False
            if query.time_end is not None and timestamp > query.time_end:
                return False
            return not hashes or entry.hash in hashes

        entries: list[StoredEntry] = []
        for topic in topics:
            pubsub = bridge.pubsub_for(topic, query.pubsub_topic)
            entries += await bridge.history(topic, pubsub, accept)
        if len(topics) > 1:  # one topic is in its stream's order already
            entries.sort(key=lambda entry: entry.message.timestamp or 0)
        start, end = 0, len(entries)
        if query.cursor is not None:
            at = next((i for i, e in enumerate(entries) if e.hash == query.cursor), None)
            if at is None:
                raise Refused(Status.BAD_REQUEST, "the cursor names no stored message")
            if query.forward:
                start = at + 1
            else:
                end = at
        limit = min(query.limit or config.store_page, config.store_max_page)
        if query.forward:
            page = entries[start : start + limit]
            more = start + limit < end
            cursor = page[-1].hash if page and more else None
        else:
            page = entries[max(start, end - limit) : end]  # ascending within the page
            more = end - limit > start
            cursor = page[0].hash if page and more else None
        stored = tuple(
            StoredMessage(
                entry.hash,
                entry.message if query.include_data else None,
                entry.pubsub_topic if query.include_data else None,
            )
            for entry in page
        )
        return StoreResponse(query.request_id, Status.OK, None, stored, cursor)

    async def peer_exchange(self, connection: PeerConnection, stream: MuxedStream) -> None:
        async def answer(raw: bytes) -> bytes:
            query = PeerExchangeQuery.decode(raw)  # a malformed one resets the stream
            return PeerExchangeResponse(self.node.exchange_records(query.num_peers)).encode()

        await self._answer_all(stream, _SMALL, answer)
