"""The RSocket 1.0 codec: every frame type both ways, the bytes the spec lays out, the TCP
length prefix, the metadata extensions, and hostile input (only `RSocketProtocolError`)."""

from __future__ import annotations

import contextlib
import random

import pytest

from airlane.wire.rsocket import (
    Credentials,
    ErrorCode,
    Frame,
    FrameReader,
    FrameType,
    RSocketProtocolError,
    decode_authentication,
    decode_composite,
    decode_frame,
    decode_routing,
    encode_authentication,
    encode_composite,
    encode_frame,
    encode_routing,
    frame_with_length,
)
from airlane.wire.rsocket.frames import (
    FLAG_COMPLETE,
    FLAG_LEASE,
    FLAG_NEXT,
    FLAG_RESPOND,
    payload_frame,
)

FRAMES = [
    Frame(FrameType.SETUP, keepalive_ms=60_000, lifetime_ms=85_714, flags=FLAG_LEASE,
          metadata_mime="message/x.rsocket.composite-metadata.v0", data_mime="application/json",
          metadata=b"m", data=b'{"hello":1}', resume_token=b"token"),
    Frame(FrameType.SETUP, keepalive_ms=1000, lifetime_ms=5000, metadata_mime="a", data_mime="b"),
    Frame(FrameType.LEASE, keepalive_ms=30_000, lease_requests=100, metadata=b"lease"),
    Frame(FrameType.KEEPALIVE, flags=FLAG_RESPOND, position=12345, data=b"ka"),
    Frame(FrameType.REQUEST_RESPONSE, stream_id=1, metadata=b"route", data=b"call"),
    Frame(FrameType.REQUEST_FNF, stream_id=3, data=b"telemetry"),
    Frame(FrameType.REQUEST_STREAM, stream_id=5, request_n=8, metadata=b"", data=b"chat"),
    Frame(FrameType.REQUEST_CHANNEL, stream_id=7, request_n=1, flags=FLAG_COMPLETE, data=b"x"),
    Frame(FrameType.REQUEST_N, stream_id=5, request_n=2**31 - 1),
    Frame(FrameType.CANCEL, stream_id=5),
    Frame(FrameType.PAYLOAD, stream_id=5, flags=FLAG_NEXT | FLAG_COMPLETE, data=b"token"),
    Frame(FrameType.ERROR, stream_id=0, error_code=ErrorCode.INVALID_SETUP, data=b"why"),
    Frame(FrameType.ERROR, stream_id=9, error_code=ErrorCode.APPLICATION_ERROR, data=b"no"),
    Frame(FrameType.METADATA_PUSH, metadata=b"push"),
    Frame(FrameType.RESUME, resume_token=b"tok", position=10, first_position=4),
    Frame(FrameType.RESUME_OK, position=77),
    Frame(FrameType.EXT, stream_id=2, extended_type=0xABCD, data=b"ext"),
]  # fmt: skip


@pytest.mark.parametrize("frame", FRAMES, ids=lambda f: f.type.name)
def test_every_frame_type_goes_both_ways(frame: Frame) -> None:
    decoded = decode_frame(encode_frame(frame))
    assert decoded.type is frame.type and decoded.stream_id == frame.stream_id
    for name in ("metadata", "data", "request_n", "error_code", "keepalive_ms", "lifetime_ms",
                 "resume_token", "metadata_mime", "data_mime", "lease_requests", "position",
                 "first_position", "extended_type"):  # fmt: skip
        assert getattr(decoded, name) == getattr(frame, name), name
    assert decoded.flags & frame.flags == frame.flags  # (M and R are derived from fields)


def test_the_bytes_are_the_specs() -> None:
    # REQUEST_N on stream 5 for 10: stream id, then type 0x08 in the top six bits of 16.
    assert encode_frame(Frame(FrameType.REQUEST_N, stream_id=5, request_n=10)) == bytes.fromhex(
        "0000000520000000000a"
    )
    # PAYLOAD with metadata, next and complete: flags M (0x100), C (0x40), N (0x20); the
    # metadata's 24-bit length, the metadata, then the data.
    payload = Frame(FrameType.PAYLOAD, stream_id=1, flags=FLAG_NEXT | FLAG_COMPLETE,
                    metadata=b"m", data=b"d")  # fmt: skip
    assert encode_frame(payload) == bytes.fromhex("000000012960000001") + b"md"
    # Over TCP a 24-bit length goes first.
    cancel = Frame(FrameType.CANCEL, stream_id=3)
    assert frame_with_length(cancel) == bytes.fromhex("000006000000032400")


def test_a_byte_stream_splits_into_frames_whatever_the_chunks() -> None:
    stream = b"".join(frame_with_length(frame) for frame in FRAMES)
    for size in (1, 2, 7, 64, len(stream)):
        reader = FrameReader()
        got = [f for start in range(0, len(stream), size) for f in
               reader.feed(stream[start : start + size])]  # fmt: skip
        assert [f.type for f in got] == [f.type for f in FRAMES]


def test_malformed_frames_are_protocol_errors() -> None:
    cases = [
        b"\x00\x00",  # shorter than the header
        bytes.fromhex("80000001200000000001"),  # the stream id's reserved bit
        bytes.fromhex("000000010400"),  # SETUP on a stream other than 0
        bytes.fromhex("000000001000"),  # REQUEST_RESPONSE on stream 0
        bytes.fromhex("00000005200000000000"),  # REQUEST_N of 0
        bytes.fromhex("0000000518000000"),  # REQUEST_STREAM cut inside its request n
        bytes.fromhex("00000005290000ffff") + b"x",  # metadata longer than the frame
        bytes.fromhex("00000001f800"),  # an unknown type without the ignore flag
    ]
    for raw in cases:
        with pytest.raises(RSocketProtocolError):
            decode_frame(raw)
    ignored = decode_frame(bytes.fromhex("00000001fa00"))  # unknown, I flag: ignorable
    assert ignored.type is FrameType.EXT and ignored.extended_type == -1
    with pytest.raises(RSocketProtocolError):
        FrameReader(max_frame=1024).feed(b"\x00\x10\x00")


def test_random_bytes_only_ever_raise_protocol_errors() -> None:
    rng = random.Random(37)
    valid = [encode_frame(frame) for frame in FRAMES]
    for n in range(20_000):
        if n % 2:
            raw = bytearray(rng.choice(valid))
            for _ in range(rng.randint(1, 4)):
                raw[rng.randrange(len(raw))] = rng.randrange(256)
            raw = raw[: rng.randint(0, len(raw))]
        else:
            raw = bytearray(rng.randbytes(rng.randint(0, 40)))
        with contextlib.suppress(RSocketProtocolError):  # anything else fails the test
            decode_frame(bytes(raw))


def test_composite_metadata_with_routing_and_authentication() -> None:
    route = encode_routing(["chat.generate", "tenant.a"])
    assert route == b"\x0dchat.generate\x08tenant.a"
    bearer = encode_authentication(Credentials("bearer", token="sk-1"))
    assert bearer == b"\x81sk-1"
    simple = encode_authentication(Credentials("simple", username="ann", password="pw"))
    assert simple == b"\x80\x00\x03annpw"
    composite = encode_composite(
        [("message/x.rsocket.routing.v0", route), ("application/x-custom", b"v"),
         ("message/x.rsocket.authentication.v0", bearer)]
    )  # fmt: skip
    assert composite[:4] == b"\xfe\x00\x00\x17"  # routing's well-known id 0x7E, 23 bytes
    entries = decode_composite(composite)
    assert [name for name, _ in entries] == [
        "message/x.rsocket.routing.v0", "application/x-custom",
        "message/x.rsocket.authentication.v0",
    ]  # fmt: skip
    assert decode_routing(entries[0][1]) == ["chat.generate", "tenant.a"]
    assert decode_authentication(entries[2][1]) == Credentials("bearer", token="sk-1")
    assert decode_authentication(simple) == Credentials("simple", "ann", "pw")
    for bad in (b"\x05ab", b"\x13app", b"\xfe\x00\x00\x09ab"):
        with pytest.raises(RSocketProtocolError):
            (decode_routing if bad[0] == 5 else decode_composite)(bad)
    with pytest.raises(RSocketProtocolError):
        decode_authentication(b"\x80\x00\x09ann")


@pytest.mark.parametrize("framed", [True, False])
@pytest.mark.parametrize("flags", [0x20, 0x60, 0x40])
def test_the_payload_fast_path_makes_the_codecs_bytes(framed: bool, flags: int) -> None:
    for data in (b"", b"x", b"{}" * 3000):
        frame = Frame(FrameType.PAYLOAD, 7, flags, data=data)
        expected = frame_with_length(frame) if framed else encode_frame(frame)
        assert payload_frame(7, flags, data, framed=framed) == expected
