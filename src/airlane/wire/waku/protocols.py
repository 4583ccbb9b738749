"""The request and response messages of the Waku protocols a service node answers: filter
(12/WAKU2-FILTER), light push (19/WAKU2-LIGHTPUSH, versions 2 and 3), store (version 3),
metadata (66/WAKU2-METADATA) and peer exchange (34/WAKU2-PEER-EXCHANGE).

Each protocol runs over a libp2p stream as varint-length-prefixed Protobuf messages. Decoders
check sizes and fields the service node relies on and raise `DecodeError`; the node answers a
request it cannot read with the protocol's "bad request" status.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from airlane.wire.errors import DecodeError
from airlane.wire.libp2p.protobuf import (
    BYTES,
    VARINT,
    Writer,
    fields,
    packed_varints,
    text,
    zigzag_decode,
)
from airlane.wire.waku.message import WakuMessage

__all__ = [
    "FILTER_PUSH",
    "FILTER_SUBSCRIBE",
    "LIGHTPUSH_V2",
    "LIGHTPUSH_V3",
    "METADATA",
    "PEER_EXCHANGE",
    "STORE",
    "FilterRequest",
    "FilterResponse",
    "LightPushRequest",
    "LightPushResponse",
    "MessagePush",
    "Metadata",
    "PeerExchangeQuery",
    "PeerExchangeResponse",
    "Status",
    "StoreQuery",
    "StoreResponse",
    "StoredMessage",
]

FILTER_SUBSCRIBE = "/vac/waku/filter-subscribe/2.0.0-beta1"
FILTER_PUSH = "/vac/waku/filter-push/2.0.0-beta1"
LIGHTPUSH_V2 = "/vac/waku/lightpush/2.0.0-beta1"
LIGHTPUSH_V3 = "/vac/waku/lightpush/3.0.0"
STORE = "/vac/waku/store-query/3.0.0"
METADATA = "/vac/waku/metadata/1.0.0"
PEER_EXCHANGE = "/vac/waku/peer-exchange/2.0.0-alpha1"

MAX_CONTENT_TOPICS = 100
"""Content topics in one filter request or store query (the filter spec's own limit)."""
MAX_HASHES = 100
"""Message hashes looked up by one store query."""


class Status:
    """Status codes the Waku request-response protocols share (HTTP's numbers)."""

    OK = 200
    BAD_REQUEST = 400
    NOT_FOUND = 404
    PAYLOAD_TOO_LARGE = 413
    UNSUPPORTED_PUBSUB_TOPIC = 421
    TOO_MANY_REQUESTS = 429
    INTERNAL_ERROR = 500
    SERVICE_UNAVAILABLE = 503
    NO_PEERS = 505


def _string(value: int | bytes, what: str) -> str:
    return text(value, what)


def _message(value: int | bytes, max_payload: int) -> WakuMessage:
    if not isinstance(value, bytes):
        raise DecodeError("a Waku message field must be length-delimited")
    return WakuMessage.decode(value, max_payload=max_payload)


# -- filter -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FilterRequest:
    """``FilterSubscribeRequest``: ping, subscribe, unsubscribe or unsubscribe-all."""

    PING, SUBSCRIBE, UNSUBSCRIBE, UNSUBSCRIBE_ALL = 0, 1, 2, 3

    request_id: str
    kind: int
    pubsub_topic: str | None = None
    content_topics: tuple[str, ...] = ()

    def encode(self) -> bytes:
        """The Protobuf."""
        writer = Writer().string(1, self.request_id).varint(2, self.kind)
        if self.pubsub_topic is not None:
            writer.string(10, self.pubsub_topic)
        for topic in self.content_topics:
            writer.string(11, topic)
        return writer.finish()

    @classmethod
    def decode(cls, data: bytes) -> FilterRequest:
        """Read the Protobuf; `DecodeError` for an unknown kind or too many topics."""
        request_id = ""
        kind = 0
        pubsub: str | None = None
        topics: list[str] = []
        for number, wire_type, value in fields(data):
            if number == 1 and wire_type == BYTES:
                request_id = _string(value, "request id")
            elif number == 2 and wire_type == VARINT and isinstance(value, int):
                kind = value
            elif number == 10 and wire_type == BYTES:
                pubsub = _string(value, "pubsub topic")
            elif number == 11 and wire_type == BYTES:
                if len(topics) >= MAX_CONTENT_TOPICS:
                    raise DecodeError(f"more than {MAX_CONTENT_TOPICS} content topics")
                topics.append(_string(value, "content topic"))
        if kind > cls.UNSUBSCRIBE_ALL:
            raise DecodeError(f"unknown filter request type {kind}")
        return cls(request_id, kind, pubsub, tuple(topics))


@dataclass(frozen=True, slots=True)
class FilterResponse:
    """``FilterSubscribeResponse``."""

    request_id: str
    status_code: int
    status_desc: str | None = None

    def encode(self) -> bytes:
        """The Protobuf."""
        writer = Writer().string(1, self.request_id).varint(10, self.status_code)
        if self.status_desc is not None:
            writer.string(11, self.status_desc)
        return writer.finish()

    @classmethod
    def decode(cls, data: bytes) -> FilterResponse:
        """Read the Protobuf."""
        request_id, code, desc = "", 0, None
        for number, wire_type, value in fields(data):
            if number == 1 and wire_type == BYTES:
                request_id = _string(value, "request id")
            elif number == 10 and wire_type == VARINT and isinstance(value, int):
                code = value
            elif number == 11 and wire_type == BYTES:
                desc = _string(value, "status description")
        return cls(request_id, code, desc)


@dataclass(frozen=True, slots=True)
class MessagePush:
    """A message the filter service pushes to a subscriber."""

    message: WakuMessage
    pubsub_topic: str

    def encode(self) -> bytes:
        """The Protobuf."""
        return Writer().data(1, self.message.encode()).string(2, self.pubsub_topic).finish()

    @classmethod
    def decode(cls, data: bytes, *, max_payload: int) -> MessagePush:
        """Read the Protobuf."""
        message: WakuMessage | None = None
        pubsub = ""
        for number, wire_type, value in fields(data):
            if number == 1 and wire_type == BYTES:
                message = _message(value, max_payload)
            elif number == 2 and wire_type == BYTES:
                pubsub = _string(value, "pubsub topic")
        if message is None:
            raise DecodeError("a filter push without its message")
        return cls(message, pubsub)


# -- light push -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LightPushRequest:
    """A light push request, in version 3's shape (version 2's ``PushRpc`` is converted)."""

    request_id: str
    message: WakuMessage
    pubsub_topic: str | None = None

    def encode(self, version: int = 3) -> bytes:
        """The Protobuf of ``version`` (2: a ``PushRpc`` holding a ``PushRequest``)."""
        if version == 2:
            request = Writer().string(1, self.pubsub_topic or "").data(2, self.message.encode())
            return Writer().string(1, self.request_id).data(2, request.finish()).finish()
        writer = Writer().string(1, self.request_id)
        if self.pubsub_topic is not None:
            writer.string(20, self.pubsub_topic)
        return writer.data(21, self.message.encode()).finish()

    @classmethod
    def decode(cls, data: bytes, *, version: int, max_payload: int) -> LightPushRequest:
        """Read a version 2 or 3 request.

        Raises:
            DecodeError: malformed, or without a message.
        """
        request_id = ""
        pubsub: str | None = None
        message: WakuMessage | None = None
        if version == 2:
            inner: bytes | None = None
            for number, wire_type, value in fields(data):
                if number == 1 and wire_type == BYTES:
                    request_id = _string(value, "request id")
                elif number == 2 and wire_type == BYTES and isinstance(value, bytes):
                    inner = value
            for number, wire_type, value in fields(inner or b""):
                if number == 1 and wire_type == BYTES:
                    pubsub = _string(value, "pubsub topic") or None
                elif number == 2 and wire_type == BYTES:
                    message = _message(value, max_payload)
        else:
            for number, wire_type, value in fields(data):
                if number == 1 and wire_type == BYTES:
                    request_id = _string(value, "request id")
                elif number == 20 and wire_type == BYTES:
                    pubsub = _string(value, "pubsub topic")
                elif number == 21 and wire_type == BYTES:
                    message = _message(value, max_payload)
        if message is None:
            raise DecodeError("a light push request without its message")
        return cls(request_id, message, pubsub)


@dataclass(frozen=True, slots=True)
class LightPushResponse:
    """A light push response, in version 3's shape."""

    request_id: str
    status_code: int
    status_desc: str | None = None
    relay_peer_count: int | None = None

    def encode(self, version: int = 3) -> bytes:
        """The Protobuf of ``version`` (2: a ``PushRpc`` holding a ``PushResponse``)."""
        if version == 2:
            response = Writer().varint(1, int(self.status_code == Status.OK))
            if self.status_desc is not None:
                response.string(2, self.status_desc)
            return Writer().string(1, self.request_id).data(3, response.finish()).finish()
        writer = Writer().string(1, self.request_id).varint(10, self.status_code)
        if self.status_desc is not None:
            writer.string(11, self.status_desc)
        if self.relay_peer_count is not None:
            writer.varint(12, self.relay_peer_count)
        return writer.finish()

    @classmethod
    def decode(cls, data: bytes) -> LightPushResponse:
        """Read a version 3 response."""
        request_id, code, desc, count = "", 0, None, None
        for number, wire_type, value in fields(data):
            if number == 1 and wire_type == BYTES:
                request_id = _string(value, "request id")
            elif number == 10 and wire_type == VARINT and isinstance(value, int):
                code = value
            elif number == 11 and wire_type == BYTES:
                desc = _string(value, "status description")
            elif number == 12 and wire_type == VARINT and isinstance(value, int):
                count = value
        return cls(request_id, code, desc, count)


# -- store ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StoreQuery:
    """``StoreQueryRequest`` (store v3): by content topics and time range, or by hashes,
    paged by a cursor (a message hash)."""

    request_id: str
    include_data: bool = True
    pubsub_topic: str | None = None
    content_topics: tuple[str, ...] = ()
    time_start: int | None = None
    time_end: int | None = None
    message_hashes: tuple[bytes, ...] = ()
    cursor: bytes | None = None
    forward: bool = False
    limit: int | None = None

    def encode(self) -> bytes:
        """The Protobuf."""
        writer = Writer().string(1, self.request_id).varint(2, int(self.include_data))
        if self.pubsub_topic is not None:
            writer.string(10, self.pubsub_topic)
        for topic in self.content_topics:
            writer.string(11, topic)
        if self.time_start is not None:
            writer.sint64(12, self.time_start)
        if self.time_end is not None:
            writer.sint64(13, self.time_end)
        for digest in self.message_hashes:
            writer.data(20, digest)
        if self.cursor is not None:
            writer.data(51, self.cursor)
        writer.varint(52, int(self.forward))
        if self.limit is not None:
            writer.varint(53, self.limit)
        return writer.finish()

    @classmethod
    def decode(cls, data: bytes) -> StoreQuery:
        """Read the Protobuf; `DecodeError` for too many topics or hashes, or a hash or
        cursor that is not 32 bytes."""
        values: dict[str, object] = {}
        topics: list[str] = []
        hashes: list[bytes] = []
        for number, wire_type, value in fields(data):
            if number == 1 and wire_type == BYTES:
                values["request_id"] = _string(value, "request id")
            elif number == 2 and wire_type == VARINT:
                values["include_data"] = bool(value)
            elif number == 10 and wire_type == BYTES:
                values["pubsub_topic"] = _string(value, "pubsub topic")
            elif number == 11 and wire_type == BYTES:
                if len(topics) >= MAX_CONTENT_TOPICS:
                    raise DecodeError(f"more than {MAX_CONTENT_TOPICS} content topics")
                topics.append(_string(value, "content topic"))
            elif number in (12, 13) and wire_type == VARINT and isinstance(value, int):
                values["time_start" if number == 12 else "time_end"] = zigzag_decode(value)
            elif number == 20 and wire_type == BYTES and isinstance(value, bytes):
                if len(hashes) >= MAX_HASHES or len(value) != 32:
                    raise DecodeError("a store query takes at most 100 hashes of 32 bytes")
                hashes.append(value)
            elif number == 51 and wire_type == BYTES and isinstance(value, bytes):
                if len(value) != 32:
                    raise DecodeError("a store cursor is a 32-byte message hash")
                values["cursor"] = value
            elif number == 52 and wire_type == VARINT:
                values["forward"] = bool(value)
            elif number == 53 and wire_type == VARINT and isinstance(value, int):
                values["limit"] = value
        return cls(
            request_id=str(values.get("request_id", "")),
            include_data=bool(values.get("include_data", False)),
            pubsub_topic=values.get("pubsub_topic"),  # type: ignore[arg-type]
            content_topics=tuple(topics),
            time_start=values.get("time_start"),  # type: ignore[arg-type]
            time_end=values.get("time_end"),  # type: ignore[arg-type]
            message_hashes=tuple(hashes),
            cursor=values.get("cursor"),  # type: ignore[arg-type]
            forward=bool(values.get("forward", False)),
            limit=values.get("limit"),  # type: ignore[arg-type]
        )


@dataclass(frozen=True, slots=True)
class StoredMessage:
    """``WakuMessageKeyValue``: a stored message's hash, and the message where asked for."""

    message_hash: bytes
    message: WakuMessage | None = None
    pubsub_topic: str | None = None

    def encode(self) -> bytes:
        """The Protobuf."""
        writer = Writer().data(1, self.message_hash)
        if self.message is not None:
            writer.data(2, self.message.encode())
        if self.pubsub_topic is not None:
            writer.string(3, self.pubsub_topic)
        return writer.finish()


@dataclass(frozen=True, slots=True)
class StoreResponse:
    """``StoreQueryResponse``."""

    request_id: str
    status_code: int
    status_desc: str | None = None
    messages: tuple[StoredMessage, ...] = ()
    cursor: bytes | None = None

    def encode(self) -> bytes:
        """The Protobuf."""
        writer = Writer().string(1, self.request_id).varint(10, self.status_code)
        if self.status_desc is not None:
            writer.string(11, self.status_desc)
        for stored in self.messages:
            writer.data(20, stored.encode())
        if self.cursor is not None:
            writer.data(51, self.cursor)
        return writer.finish()

    @classmethod
    def decode(cls, data: bytes, *, max_payload: int) -> StoreResponse:
        """Read the Protobuf (Airlane's own client and tests)."""
        request_id, code, desc, cursor = "", 0, None, None
        messages: list[StoredMessage] = []
        for number, wire_type, value in fields(data):
            if number == 1 and wire_type == BYTES:
                request_id = _string(value, "request id")
            elif number == 10 and wire_type == VARINT and isinstance(value, int):
                code = value
            elif number == 11 and wire_type == BYTES:
                desc = _string(value, "status description")
            elif number == 20 and wire_type == BYTES and isinstance(value, bytes):
                digest, message, pubsub = b"", None, None
                for inner, inner_type, item in fields(value):
                    if inner == 1 and isinstance(item, bytes):
                        digest = item
                    elif inner == 2 and inner_type == BYTES:
                        message = _message(item, max_payload)
                    elif inner == 3 and inner_type == BYTES:
                        pubsub = _string(item, "pubsub topic")
                messages.append(StoredMessage(digest, message, pubsub))
            elif number == 51 and wire_type == BYTES and isinstance(value, bytes):
                cursor = value
        return cls(request_id, code, desc, tuple(messages), cursor)


# -- metadata and peer exchange ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Metadata:
    """``WakuMetadataRequest`` and ``WakuMetadataResponse`` (the same fields): the cluster a
    node is in and the shards it serves."""

    cluster_id: int | None = None
    shards: tuple[int, ...] = ()

    def encode(self) -> bytes:
        """The Protobuf (shards unpacked, as js-waku writes them)."""
        writer = Writer()
        if self.cluster_id is not None:
            writer.varint(1, self.cluster_id)
        for shard in self.shards:
            writer.varint(2, shard)
        return writer.finish()

    @classmethod
    def decode(cls, data: bytes) -> Metadata:
        """Read the Protobuf (shards packed or not); at most 1,024 shards."""
        cluster: int | None = None
        shards: list[int] = []
        for number, wire_type, value in fields(data):
            if number == 1 and wire_type == VARINT and isinstance(value, int):
                cluster = value & 0xFFFFFFFF
            elif number == 2 and wire_type == VARINT and isinstance(value, int):
                shards.append(value & 0xFFFFFFFF)
            elif number == 2 and wire_type == BYTES and isinstance(value, bytes):
                shards.extend(item & 0xFFFFFFFF for item in packed_varints(value))
            if len(shards) > 1024:
                raise DecodeError("more than 1,024 shards")
        return cls(cluster, tuple(shards))


@dataclass(frozen=True, slots=True)
class PeerExchangeQuery:
    """``PeerExchangeRPC`` with a query: how many peers the light node asks for."""

    num_peers: int

    @classmethod
    def decode(cls, data: bytes) -> PeerExchangeQuery:
        """Read the RPC; `DecodeError` when it holds no query."""
        for number, wire_type, value in fields(data):
            if number == 1 and wire_type == BYTES and isinstance(value, bytes):
                count = 0
                for inner, inner_type, item in fields(value):
                    if inner == 1 and inner_type == VARINT and isinstance(item, int):
                        count = item
                return cls(count)
        raise DecodeError("a peer exchange request without its query")

    def encode(self) -> bytes:
        """The RPC."""
        return Writer().data(1, Writer().varint(1, self.num_peers).finish()).finish()


@dataclass(frozen=True, slots=True)
class PeerExchangeResponse:
    """``PeerExchangeRPC`` with a response: peers as signed ENR records."""

    enrs: tuple[bytes, ...] = field(default=())

    def encode(self) -> bytes:
        """The RPC."""
        response = Writer()
        for enr in self.enrs:
            response.data(1, Writer().data(1, enr).finish())
        return Writer().data(2, response.finish()).finish()

    @classmethod
    def decode(cls, data: bytes) -> PeerExchangeResponse:
        """Read the RPC's response (records are not checked here: `airlane.wire.waku.enr`);
        at most 100 records."""
        enrs: list[bytes] = []
        for number, wire_type, value in fields(data):
            if number != 2 or wire_type != BYTES or not isinstance(value, bytes):
                continue
            for inner, inner_type, info in fields(value):
                if inner != 1 or inner_type != BYTES or not isinstance(info, bytes):
                    continue
                for field_number, field_type, enr in fields(info):
                    if field_number == 1 and field_type == BYTES and isinstance(enr, bytes):
                        if len(enrs) >= 100:
                            raise DecodeError("more than 100 peer records")
                        enrs.append(enr)
        return cls(tuple(enrs))
