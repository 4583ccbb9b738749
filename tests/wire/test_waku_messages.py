"""Waku v2 on the wire: the ``WakuMessage`` and its deterministic hash (checked against a
value js-waku computed), content topics and autosharding, shard pubsub topics, and the
request/response messages of filter, light push (v2 and v3), store v3, metadata and peer
exchange.

A light client sends these to the service node, so each decoder is held to its bounds (payload,
meta, topic counts, 32-byte hashes) and, on random bytes, to raising only `DecodeError`, which
the node turns into the protocol's "bad request" answer.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airlane.wire.errors import DecodeError
from airlane.wire.libp2p.protobuf import BYTES, VARINT, Writer, fields
from airlane.wire.libp2p.varint import encode_uvarint
from airlane.wire.waku.message import (
    MAX_CONTENT_TOPIC,
    ContentTopic,
    WakuMessage,
    auto_shard,
    parse_shard_topic,
    shard_topic,
)
from airlane.wire.waku.protocols import (
    MAX_CONTENT_TOPICS,
    FilterRequest,
    FilterResponse,
    LightPushRequest,
    LightPushResponse,
    MessagePush,
    Metadata,
    PeerExchangeQuery,
    PeerExchangeResponse,
    Status,
    StoredMessage,
    StoreQuery,
    StoreResponse,
)

from .chunking import PROPERTY

MAX_PAYLOAD = 1024
MESSAGE = WakuMessage(b"hello", "/app/1/chat/proto", timestamp=1_700_000_000_000_000_000)

messages = st.builds(
    WakuMessage,
    payload=st.binary(max_size=MAX_PAYLOAD),
    content_topic=st.text(min_size=1, max_size=MAX_CONTENT_TOPIC),
    timestamp=st.none() | st.integers(-(2**63), 2**63 - 1),
    meta=st.none() | st.binary(max_size=64),
    ephemeral=st.booleans(),
    version=st.none() | st.integers(0, 2**32 - 1),
    rate_limit_proof=st.none() | st.binary(max_size=100),
)

# -- the message ------------------------------------------------------------------------------


@PROPERTY
@given(messages)
def test_message_round_trips(message: WakuMessage) -> None:
    assert WakuMessage.decode(message.encode(), max_payload=MAX_PAYLOAD) == message


def test_message_encoding_is_the_schemas() -> None:
    message = WakuMessage(b"p", "/a/1/n/e", timestamp=-1, meta=b"m", ephemeral=True, version=0)
    assert list(fields(message.encode())) == [
        (1, BYTES, b"p"),
        (2, BYTES, b"/a/1/n/e"),
        (3, VARINT, 0),
        (10, VARINT, 1),  # sint64: -1 zigzags to 1
        (11, BYTES, b"m"),
        (31, VARINT, 1),
    ]


def test_negative_timestamp_is_sint64() -> None:
    # A timestamp written as a plain int64 (ten bytes of two's complement) would read back huge.
    message = WakuMessage(b"", "/a/1/n/e", timestamp=-1_000_000)
    assert WakuMessage.decode(message.encode(), max_payload=0).timestamp == -1_000_000


def test_payload_over_max_payload_raises() -> None:
    data = WakuMessage(b"x" * 101, "/a/1/n/e").encode()
    assert WakuMessage.decode(data, max_payload=101).payload == b"x" * 101
    with pytest.raises(DecodeError, match="payload of 101 bytes"):
        WakuMessage.decode(data, max_payload=100)


def test_missing_content_topic_raises() -> None:
    with pytest.raises(DecodeError, match="needs a content topic"):
        WakuMessage.decode(Writer().data(1, b"payload").finish(), max_payload=100)
    with pytest.raises(DecodeError, match="needs a content topic"):
        WakuMessage.decode(Writer().string(2, "").finish(), max_payload=100)


def test_content_topic_over_the_limit_raises() -> None:
    data = WakuMessage(b"", "/" + "a" * MAX_CONTENT_TOPIC).encode()
    with pytest.raises(DecodeError, match="content topic of 257 characters"):
        WakuMessage.decode(data, max_payload=0)


def test_content_topic_not_utf8_raises() -> None:
    with pytest.raises(DecodeError, match="content topic is not UTF-8"):
        WakuMessage.decode(Writer().data(2, b"\xff").finish(), max_payload=0)


def test_meta_over_64_bytes_raises() -> None:
    assert (
        WakuMessage.decode(
            WakuMessage(b"", "/a/1/n/e", meta=b"m" * 64).encode(), max_payload=0
        ).meta
        == b"m" * 64
    )
    with pytest.raises(DecodeError, match="meta of 65 bytes"):
        WakuMessage.decode(WakuMessage(b"", "/a/1/n/e", meta=b"m" * 65).encode(), max_payload=0)


def test_unknown_fields_are_skipped() -> None:
    data = Writer().varint(5, 9).data(20, b"?").finish() + MESSAGE.encode()
    assert WakuMessage.decode(data, max_payload=MAX_PAYLOAD) == MESSAGE


def test_message_hash_matches_js_waku() -> None:
    # From a real run of js-waku 0.0.36 (messageHash in @waku/message-hash).
    message = WakuMessage(b"hello from js", "/app/1/chat/proto", timestamp=1796498749200000000)
    assert message.hash("/waku/2/rs/42/4").hex() == (
        "4e40b5975c9b1f19ac595d23abad67dfb2d52a22a3abbf8e8810b356bb182ac1"
    )


def test_message_hash_leaves_out_absent_parts() -> None:
    pubsub = "/waku/2/rs/1/0"
    bare = hashlib.sha256(pubsub.encode() + b"payload" + b"/a/1/n/e").digest()
    # No timestamp, a zero timestamp and no meta all add nothing.
    assert WakuMessage(b"payload", "/a/1/n/e").hash(pubsub) == bare
    assert WakuMessage(b"payload", "/a/1/n/e", timestamp=0).hash(pubsub) == bare
    full = WakuMessage(b"payload", "/a/1/n/e", timestamp=-2, meta=b"M", ephemeral=True)
    expected = (
        pubsub.encode() + b"payload" + b"/a/1/n/e" + b"M" + (-2).to_bytes(8, "big", signed=True)
    )
    assert full.hash(pubsub) == hashlib.sha256(expected).digest()
    # The pubsub topic is part of it: the same message on another shard is another message.
    assert full.hash("/waku/2/rs/1/1") != full.hash(pubsub)


@PROPERTY
@given(st.binary(max_size=200))
def test_message_decode_on_random_bytes_raises_only_decode_error(data: bytes) -> None:
    with contextlib.suppress(DecodeError):
        WakuMessage.decode(data, max_payload=MAX_PAYLOAD)


# -- content topics and sharding --------------------------------------------------------------


def test_content_topic_parse() -> None:
    assert ContentTopic.parse("/a/1/n/e") == ContentTopic("a", "1", "n", "e")
    assert str(ContentTopic.parse("/app/1/chat/proto")) == "/app/1/chat/proto"
    # Generation 0 is the only one defined, and is the same topic as none.
    assert ContentTopic.parse("/0/a/1/n/e") == ContentTopic("a", "1", "n", "e", generation=0)


@pytest.mark.parametrize(
    "topic",
    [
        "/1/a/1/n/e",  # generation 1 is not defined
        "/a/1/n",
        "/a/1",
        "",
        "/",
        "a/1/n/e",
        "//1/n/e",
        "/a//n/e",
        "/a/1/n/",
        "/a/1/n/e/",
        "/0/a/1/n/",
        "/a/1/n/e/x/y",
    ],
)
def test_content_topic_parse_refuses(topic: str) -> None:
    with pytest.raises(DecodeError):
        ContentTopic.parse(topic)


def test_auto_shard_matches_js_waku() -> None:
    # js-waku's contentTopicToShardIndex("/app/1/chat/proto", 8) is 4.
    assert auto_shard("/app/1/chat/proto", 8) == 4
    # The name and encoding do not take part, only application and version.
    assert auto_shard("/app/1/other/json", 8) == 4
    assert auto_shard("/0/app/1/chat/proto", 8) == 4
    with pytest.raises(DecodeError):
        auto_shard("not a topic", 8)


def test_shard_topic() -> None:
    assert shard_topic(42, 4) == "/waku/2/rs/42/4"
    assert parse_shard_topic("/waku/2/rs/42/4") == (42, 4)


@PROPERTY
@given(st.integers(0, 65535), st.integers(0, 65535))
def test_shard_topic_round_trips(cluster: int, shard: int) -> None:
    assert parse_shard_topic(shard_topic(cluster, shard)) == (cluster, shard)


@pytest.mark.parametrize(
    "topic",
    [
        "/waku/2/default-waku/proto",
        "/waku/2/rs/42",
        "/waku/2/rs/42/4/",
        "/waku/2/rs/42/4/1",
        "/waku/3/rs/42/4",
        "waku/2/rs/42/4",
        "/waku/2/rs/a/4",
        "/waku/2/rs/42/",
        "/waku/2/rs/-1/0",
        "/waku/2/rs/65536/0",
        "/waku/2/rs/0/65536",
        # Only canonical digits: the topic's text goes into message hashes.
        "/waku/2/rs/1/+4",
        "/waku/2/rs/1/ 4",
        "/waku/2/rs/1/4_0",
        "/waku/2/rs/01/4",
    ],
)
def test_parse_shard_topic_refuses(topic: str) -> None:
    with pytest.raises(DecodeError):
        parse_shard_topic(topic)


# -- filter -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "request_",
    [
        FilterRequest("r1", FilterRequest.PING),
        FilterRequest("r2", FilterRequest.SUBSCRIBE, "/waku/2/rs/1/0", ("/a/1/n/e", "/b/1/n/e")),
        FilterRequest("r3", FilterRequest.UNSUBSCRIBE, "/waku/2/rs/1/0", ("/a/1/n/e",)),
        FilterRequest("r4", FilterRequest.UNSUBSCRIBE_ALL),
    ],
    ids=["ping", "subscribe", "unsubscribe", "unsubscribe-all"],
)
def test_filter_request_round_trips(request_: FilterRequest) -> None:
    assert FilterRequest.decode(request_.encode()) == request_


def test_filter_request_refuses_unknown_kind_and_too_many_topics() -> None:
    with pytest.raises(DecodeError, match="unknown filter request type 4"):
        FilterRequest.decode(Writer().string(1, "r").varint(2, 4).finish())
    topics = tuple(f"/a/1/t{index}/e" for index in range(MAX_CONTENT_TOPICS))
    full = FilterRequest("r", FilterRequest.SUBSCRIBE, "/waku/2/rs/1/0", topics)
    assert FilterRequest.decode(full.encode()) == full
    over = FilterRequest("r", FilterRequest.SUBSCRIBE, "/waku/2/rs/1/0", (*topics, "/x/1/y/z"))
    with pytest.raises(DecodeError, match="more than 100 content topics"):
        FilterRequest.decode(over.encode())


def test_filter_response_and_message_push_round_trip() -> None:
    for response in (FilterResponse("r", Status.OK), FilterResponse("r", 404, "not found")):
        assert FilterResponse.decode(response.encode()) == response
    push = MessagePush(MESSAGE, "/waku/2/rs/1/0")
    assert MessagePush.decode(push.encode(), max_payload=MAX_PAYLOAD) == push
    with pytest.raises(DecodeError, match="payload of"):
        MessagePush.decode(push.encode(), max_payload=4)
    with pytest.raises(DecodeError, match="without its message"):
        MessagePush.decode(Writer().string(2, "/waku/2/rs/1/0").finish(), max_payload=10)


# -- light push -------------------------------------------------------------------------------


@pytest.mark.parametrize("pubsub", [None, "/waku/2/rs/1/3"])
@pytest.mark.parametrize("version", [2, 3])
def test_light_push_request_round_trips(version: int, pubsub: str | None) -> None:
    request = LightPushRequest("req-1", MESSAGE, pubsub)
    decoded = LightPushRequest.decode(
        request.encode(version), version=version, max_payload=MAX_PAYLOAD
    )
    assert decoded == request


def test_light_push_v2_request_shape() -> None:
    # PushRpc { requestId = 1; PushRequest request = 2 { pubsubTopic = 1; message = 2 } }
    data = LightPushRequest("id", MESSAGE, "/waku/2/rs/1/3").encode(2)
    inner = Writer().string(1, "/waku/2/rs/1/3").data(2, MESSAGE.encode()).finish()
    assert list(fields(data)) == [(1, BYTES, b"id"), (2, BYTES, inner)]


@pytest.mark.parametrize("version", [2, 3])
def test_light_push_without_message_raises(version: int) -> None:
    data = LightPushRequest("id", MESSAGE, "/waku/2/rs/1/3").encode(version)
    if version == 2:
        stripped = Writer().string(1, "id").data(2, Writer().string(1, "/t").finish()).finish()
    else:
        stripped = Writer().string(1, "id").string(20, "/t").finish()
    with pytest.raises(DecodeError, match="without its message"):
        LightPushRequest.decode(stripped, version=version, max_payload=MAX_PAYLOAD)
    with pytest.raises(DecodeError, match="without its message"):
        LightPushRequest.decode(b"", version=version, max_payload=MAX_PAYLOAD)
    with pytest.raises(DecodeError, match="payload of"):
        LightPushRequest.decode(data, version=version, max_payload=1)


def test_light_push_response_v3_round_trips() -> None:
    for response in (
        LightPushResponse("r", Status.OK, relay_peer_count=3),
        LightPushResponse("r", Status.NO_PEERS, "no peers to relay to"),
        LightPushResponse("r", Status.OK, relay_peer_count=0),
    ):
        assert LightPushResponse.decode(response.encode()) == response


def test_light_push_response_v2_encoding() -> None:
    # PushRpc { requestId = 1; PushResponse response = 3 { isSuccess = 1; info = 2 } }
    ok = LightPushResponse("r", Status.OK, relay_peer_count=2).encode(2)
    inner = Writer().varint(1, 1).finish()
    assert list(fields(ok)) == [(1, BYTES, b"r"), (3, BYTES, inner)]
    failed = LightPushResponse("r", Status.PAYLOAD_TOO_LARGE, "too big").encode(2)
    inner = Writer().varint(1, 0).string(2, "too big").finish()
    assert list(fields(failed)) == [(1, BYTES, b"r"), (3, BYTES, inner)]


# -- store ------------------------------------------------------------------------------------


def test_store_query_round_trips_with_every_field() -> None:
    query = StoreQuery(
        request_id="q",
        include_data=True,
        pubsub_topic="/waku/2/rs/1/0",
        content_topics=("/a/1/n/e", "/b/1/n/e"),
        time_start=-5,  # sint64: a negative start must survive
        time_end=1_700_000_000_000_000_000,
        message_hashes=(b"\x01" * 32, b"\x02" * 32),
        cursor=b"\x03" * 32,
        forward=True,
        limit=20,
    )
    assert StoreQuery.decode(query.encode()) == query
    minimal = StoreQuery("q", include_data=False)
    assert StoreQuery.decode(minimal.encode()) == minimal


@pytest.mark.parametrize(
    ("data", "match"),
    [
        pytest.param(
            StoreQuery("q", content_topics=tuple(f"/a/1/{i}/e" for i in range(101))).encode(),
            "more than 100 content topics",
            id="101-topics",
        ),
        pytest.param(
            StoreQuery("q", message_hashes=(b"\x01" * 32,) * 101).encode(),
            "at most 100 hashes",
            id="101-hashes",
        ),
        pytest.param(
            StoreQuery("q", message_hashes=(b"\x01" * 31,)).encode(), "32 bytes", id="short-hash"
        ),
        pytest.param(
            StoreQuery("q", message_hashes=(b"\x01" * 33,)).encode(), "32 bytes", id="long-hash"
        ),
        pytest.param(
            StoreQuery("q", cursor=b"\x01" * 31).encode(), "32-byte message hash", id="short-cursor"
        ),
        pytest.param(
            StoreQuery("q", cursor=b"\x01" * 33).encode(), "32-byte message hash", id="long-cursor"
        ),
        pytest.param(StoreQuery("q", cursor=b"").encode(), "32-byte", id="empty-cursor"),
    ],
)
def test_store_query_limits(data: bytes, match: str) -> None:
    with pytest.raises(DecodeError, match=match):
        StoreQuery.decode(data)


def test_store_response_round_trips() -> None:
    digest = MESSAGE.hash("/waku/2/rs/1/0")
    response = StoreResponse(
        "q",
        Status.OK,
        "OK",
        (
            StoredMessage(digest, MESSAGE, "/waku/2/rs/1/0"),
            StoredMessage(b"\x07" * 32),  # include_data false: the hash alone
        ),
        cursor=digest,
    )
    assert StoreResponse.decode(response.encode(), max_payload=MAX_PAYLOAD) == response
    empty = StoreResponse("q", Status.BAD_REQUEST, "bad cursor")
    assert StoreResponse.decode(empty.encode(), max_payload=0) == empty


# -- metadata and peer exchange ---------------------------------------------------------------


def test_metadata_round_trips_unpacked() -> None:
    metadata = Metadata(cluster_id=42, shards=(0, 4, 7))
    assert list(fields(metadata.encode())) == [
        (1, VARINT, 42),
        (2, VARINT, 0),
        (2, VARINT, 4),
        (2, VARINT, 7),
    ]
    assert Metadata.decode(metadata.encode()) == metadata
    assert Metadata.decode(b"") == Metadata()


def test_metadata_decodes_packed_shards() -> None:
    # nwaku writes the repeated uint32 packed; js-waku writes it unpacked. Both are read.
    packed = Writer().varint(1, 42).data(2, b"".join(map(encode_uvarint, (0, 4, 7)))).finish()
    assert Metadata.decode(packed) == Metadata(42, (0, 4, 7))
    mixed = packed + Writer().varint(2, 9).finish()
    assert Metadata.decode(mixed) == Metadata(42, (0, 4, 7, 9))


def test_metadata_refuses_too_many_shards_and_truncated_packing() -> None:
    many = Writer().data(2, b"\x01" * 1025).finish()
    with pytest.raises(DecodeError, match="1,024 shards"):
        Metadata.decode(many)
    with pytest.raises(DecodeError):
        Metadata.decode(Writer().data(2, b"\x01\x80").finish())


def test_peer_exchange_query_round_trips() -> None:
    assert PeerExchangeQuery.decode(PeerExchangeQuery(5).encode()) == PeerExchangeQuery(5)
    # A query without num_peers asks for zero; an RPC without a query is refused.
    assert PeerExchangeQuery.decode(Writer().data(1, b"").finish()) == PeerExchangeQuery(0)
    with pytest.raises(DecodeError, match="without its query"):
        PeerExchangeQuery.decode(b"")
    with pytest.raises(DecodeError, match="without its query"):
        PeerExchangeQuery.decode(PeerExchangeResponse((b"enr",)).encode())


def test_peer_exchange_response_encoding() -> None:
    # PeerExchangeRPC { response = 2 { repeated PeerInfo peerInfos = 1 { bytes enr = 1 } } }
    enrs = (b"enr-one", b"enr-two")
    [(number, wire_type, response)] = fields(PeerExchangeResponse(enrs).encode())
    assert (number, wire_type) == (2, BYTES) and isinstance(response, bytes)
    infos = list(fields(response))
    assert [(number, wire_type) for number, wire_type, _ in infos] == [(1, BYTES), (1, BYTES)]
    assert [list(fields(info)) for _, _, info in infos if isinstance(info, bytes)] == [
        [(1, BYTES, b"enr-one")],
        [(1, BYTES, b"enr-two")],
    ]
    assert list(fields(PeerExchangeResponse().encode())) == [(2, BYTES, b"")]


# -- hostile input ----------------------------------------------------------------------------

DECODERS: dict[str, Callable[[bytes], object]] = {
    "filter-request": FilterRequest.decode,
    "filter-response": FilterResponse.decode,
    "message-push": lambda data: MessagePush.decode(data, max_payload=MAX_PAYLOAD),
    "lightpush-v2": lambda data: LightPushRequest.decode(data, version=2, max_payload=100),
    "lightpush-v3": lambda data: LightPushRequest.decode(data, version=3, max_payload=100),
    "lightpush-response": LightPushResponse.decode,
    "store-query": StoreQuery.decode,
    "store-response": lambda data: StoreResponse.decode(data, max_payload=MAX_PAYLOAD),
    "metadata": Metadata.decode,
    "peer-exchange": PeerExchangeQuery.decode,
}


@pytest.mark.parametrize("decode", DECODERS.values(), ids=DECODERS.keys())
def test_decoders_on_random_bytes_raise_only_decode_error(
    decode: Callable[[bytes], object],
) -> None:
    @PROPERTY
    @given(st.binary(max_size=200))
    def check(data: bytes) -> None:
        with contextlib.suppress(DecodeError):
            decode(data)

    check()


@pytest.mark.parametrize("decode", DECODERS.values(), ids=DECODERS.keys())
def test_decoders_on_random_nested_fields_raise_only_decode_error(
    decode: Callable[[bytes], object],
) -> None:
    # Random bytes seldom form valid fields; these always do, with random sub-messages, so
    # the nested readers (the message inside a push, the request inside a PushRpc) run.
    field_strategy = st.tuples(
        st.sampled_from([1, 2, 3, 10, 11, 12, 13, 20, 21, 51, 52, 53]),
        st.binary(max_size=60) | st.integers(0, 2**64 - 1),
    )

    @PROPERTY
    @given(st.lists(field_strategy, max_size=6))
    def check(chosen: list[tuple[int, bytes | int]]) -> None:
        writer = Writer()
        for number, value in chosen:
            if isinstance(value, bytes):
                writer.data(number, value)
            else:
                writer.varint(number, value)
        with contextlib.suppress(DecodeError):
            decode(writer.finish())

    check()
