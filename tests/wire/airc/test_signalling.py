"""AIRC signalling messages.

Invariants: every valid message survives encode -> decode unchanged; `decode_signal` raises
nothing but `AircProtocolError`, whatever the bytes, and every payload it accepts re-encodes
to exactly the same bytes; encoding a field that does not fit raises `ValueError`.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airlane.wire.airc.errors import AircProtocolError, ErrorCode
from airlane.wire.airc.signalling import (
    _LAYOUTS,
    MAX_AIRLANE_STREAM,
    MAX_BODY,
    MAX_ENCODER,
    MAX_EPOCH,
    MAX_MESSAGE,
    MAX_SDP,
    MAX_TOKEN,
    Auth,
    Authenticated,
    Cancel,
    Cancelled,
    CancelStream,
    Close,
    Error,
    GenAck,
    GenRequest,
    GoAway,
    LaneSet,
    Open,
    Opened,
    RtcAnswer,
    RtcCandidates,
    RtcClose,
    RtcOffer,
    SetLane,
    SignalMessage,
    SignalType,
    TimeRequest,
    TimeResponse,
    decode_signal,
    encode_signal,
)

from ..chunking import PROPERTY

U16 = st.integers(0, 0xFFFF)
U32 = st.integers(0, 0xFFFF_FFFF)
I32 = st.integers(-(2**31), 2**31 - 1)
U64 = st.integers(0, 2**64 - 1)


def utf8(limit: int) -> st.SearchStrategy[str]:
    """Text of at most ``limit`` UTF-8 bytes, including strings right at the limit."""
    return st.text(max_size=limit // 4) | st.text(
        st.characters(max_codepoint=0x7F), min_size=max(0, limit - 3), max_size=limit
    )


STREAM_NAME = utf8(MAX_AIRLANE_STREAM)
EPOCH = utf8(MAX_EPOCH)

MESSAGES: st.SearchStrategy[SignalMessage] = st.one_of(
    st.builds(GenRequest, U16, U16, U32, utf8(MAX_ENCODER), st.binary(max_size=300)),
    st.builds(GenAck, U16, U16, U32, U32, U32, I32, STREAM_NAME, EPOCH),
    st.builds(Open, U16, U16, STREAM_NAME, EPOCH, U64),
    st.builds(Opened, U16, U16, STREAM_NAME, EPOCH, U64, st.booleans()),
    st.builds(Close, U16, U64),
    st.builds(Cancel, U16, U16),
    st.builds(Cancelled, U16, U16, st.booleans()),
    st.builds(Error, U16, utf8(0xFF), utf8(MAX_MESSAGE)),
    st.builds(TimeRequest, U32),
    st.builds(TimeResponse, U32, U32, U32),
    st.builds(GoAway, st.sampled_from(ErrorCode), utf8(300)),
    st.builds(Auth, U16, utf8(MAX_TOKEN)),
    st.builds(Authenticated, U16, utf8(0xFF)),
    st.builds(RtcOffer, U16, utf8(300)),
    st.builds(RtcAnswer, U16, utf8(0xFF), utf8(300)),
    st.builds(RtcCandidates, U16, utf8(0xFF), utf8(300)),
    st.builds(RtcClose, U16, utf8(0xFF)),
    st.builds(SetLane, U16, st.integers(0, 0xFF)),
    st.builds(LaneSet, U16, st.integers(0, 0xFF), utf8(0xFF)),
    st.builds(CancelStream, U16, STREAM_NAME),
)


def assert_bad(payload: bytes, code: ErrorCode = ErrorCode.BAD_SIGNALLING) -> AircProtocolError:
    with pytest.raises(AircProtocolError) as info:
        decode_signal(payload)
    assert info.value.goaway is code
    return info.value


def test_layouts_match_the_dataclasses() -> None:
    assert set(_LAYOUTS) == set(SignalType)
    for cls, layout in _LAYOUTS.values():
        assert [name for name, _ in layout] == [f.name for f in dataclasses.fields(cls)]


def test_type_bytes() -> None:
    assert [(t.name, t.value) for t in SignalType] == [
        ("GEN_REQUEST", 0x01),
        ("GEN_ACK", 0x02),
        ("OPEN", 0x03),
        ("OPENED", 0x04),
        ("CLOSE", 0x05),
        ("CANCEL", 0x06),
        ("CANCELLED", 0x07),
        ("ERROR", 0x08),
        ("TIME_REQUEST", 0x09),
        ("TIME_RESPONSE", 0x0A),
        ("GOAWAY", 0x0B),
        ("AUTH", 0x0C),
        ("AUTHENTICATED", 0x0D),
        ("RTC_OFFER", 0x0E),
        ("RTC_ANSWER", 0x0F),
        ("RTC_CANDIDATES", 0x10),
        ("RTC_CLOSE", 0x11),
        ("SET_LANE", 0x12),
        ("LANE_SET", 0x13),
        ("CANCEL_STREAM", 0x14),
    ]


@pytest.mark.parametrize(
    ("msg", "wire"),
    [
        (
            GenRequest(7, 0xFFFF, 24000, "pcm", b"{}"),
            b"\x01\x00\x07\xff\xff\x00\x00\x5d\xc0\x03pcm\x00\x00\x00\x02{}",
        ),
        (
            GenAck(7, 3, 40_000, 1, 2, -1, "s", ""),
            b"\x02\x00\x07\x00\x03\x00\x00\x9c\x40\x00\x00\x00\x01\x00\x00\x00\x02"
            b"\xff\xff\xff\xff\x01s\x00",
        ),
        (Open(1, 2, "ab", "e", 5), b"\x03\x00\x01\x00\x02\x02ab\x01e" + (5).to_bytes(8, "big")),
        (Opened(1, 2, "", "", 0, True), b"\x04\x00\x01\x00\x02\x00\x00" + bytes(8) + b"\x01"),
        (Close(3, 2**64 - 1), b"\x05\x00\x03" + b"\xff" * 8),
        (Cancel(1, 2), b"\x06\x00\x01\x00\x02"),
        (Cancelled(1, 2, False), b"\x07\x00\x01\x00\x02\x00"),
        (Error(9, "x", "é"), b"\x08\x00\x09\x01x\x00\x02\xc3\xa9"),
        (TimeRequest(0x01020304), b"\x09\x01\x02\x03\x04"),
        (TimeResponse(1, 2, 3), b"\x0a\x00\x00\x00\x01\x00\x00\x00\x02\x00\x00\x00\x03"),
        (GoAway(ErrorCode.PEER_GOAWAY, "bye"), b"\x0b\x00\x0e\x00\x03bye"),
        (Auth(2, "k"), b"\x0c\x00\x02\x00\x01k"),
        (Authenticated(2, "me"), b"\x0d\x00\x02\x02me"),
        (RtcOffer(3, "v=0"), b"\x0e\x00\x03\x00\x00\x00\x03v=0"),
        (RtcAnswer(3, "s1", "v"), b"\x0f\x00\x03\x02s1\x00\x00\x00\x01v"),
        (RtcCandidates(4, "s", ""), b"\x10\x00\x04\x01s\x00\x00\x00\x00"),
        (RtcClose(5, "s"), b"\x11\x00\x05\x01s"),
        (SetLane(6, 0), b"\x12\x00\x06\x00"),
        (LaneSet(6, 2, "p"), b"\x13\x00\x06\x02\x01p"),
        (CancelStream(7, "st"), b"\x14\x00\x07\x02st"),
    ],
    ids=lambda value: type(value).__name__,
)
def test_known_encodings(msg: SignalMessage, wire: bytes) -> None:
    assert encode_signal(msg) == wire
    assert decode_signal(wire) == msg


@PROPERTY
@given(MESSAGES)
def test_round_trip(msg: SignalMessage) -> None:
    wire = encode_signal(msg)
    assert wire[0] == next(t for t, (cls, _) in _LAYOUTS.items() if cls is type(msg))
    decoded = decode_signal(wire)
    assert decoded == msg
    assert type(decoded) is type(msg)


@pytest.mark.parametrize(
    "msg",
    [
        GenRequest(0, 0, 0, "e" * MAX_ENCODER, bytes(MAX_BODY)),
        GenAck(0, 0, 0, 0, 0, 0, "s" * MAX_AIRLANE_STREAM, "é" * (MAX_EPOCH // 2)),
        Error(0, "c" * 0xFF, "m" * MAX_MESSAGE),
        GoAway(ErrorCode.NO_ERROR, "r" * 0xFFFF),
        RtcAnswer(0, "s" * 0xFF, "v" * MAX_SDP),
    ],
    ids=lambda msg: type(msg).__name__,
)
def test_fields_at_their_limits(msg: SignalMessage) -> None:
    assert decode_signal(encode_signal(msg)) == msg


def test_accepts_other_bytes_like_payloads() -> None:
    wire = encode_signal(GenRequest(1, 2, 3, "pcm", b"body"))
    for payload in (bytearray(wire), memoryview(wire)):
        msg = decode_signal(payload)  # type: ignore[arg-type]
        assert isinstance(msg, GenRequest)
        assert type(msg.body) is bytes


@PROPERTY
@given(MESSAGES)
def test_every_truncation_is_bad_signalling(msg: SignalMessage) -> None:
    wire = encode_signal(msg)
    for end in range(len(wire)):
        assert_bad(wire[:end])


@PROPERTY
@given(MESSAGES, st.binary(min_size=1, max_size=16))
def test_trailing_bytes_are_bad_signalling(msg: SignalMessage, tail: bytes) -> None:
    error = assert_bad(encode_signal(msg) + tail)
    assert "after the last field" in error.reason


def check_arbitrary(payload: bytes) -> None:
    try:
        msg = decode_signal(payload)
    except AircProtocolError:
        return
    assert encode_signal(msg) == payload


@PROPERTY
@given(st.binary(max_size=64))
def test_arbitrary_bytes(payload: bytes) -> None:
    check_arbitrary(payload)


@PROPERTY
@given(st.sampled_from(SignalType), st.binary(max_size=64))
def test_arbitrary_fields_after_a_known_type(signal_type: SignalType, tail: bytes) -> None:
    check_arbitrary(bytes([signal_type]) + tail)


@PROPERTY
@given(MESSAGES, st.data())
def test_mutated_encodings(msg: SignalMessage, data: st.DataObject) -> None:
    # Flipping one byte of a valid encoding explores lengths, bools and codes near the real
    # layout, which random bytes rarely reach.
    wire = bytearray(encode_signal(msg))
    index = data.draw(st.integers(0, len(wire) - 1))
    wire[index] = data.draw(st.integers(0, 0xFF))
    check_arbitrary(bytes(wire))


@pytest.mark.parametrize("type_byte", [0x00, 0x15, 0x7F, 0xFF])
@pytest.mark.parametrize("tail", [b"", b"\x00\x01\x02\x03"])
def test_unknown_type(type_byte: int, tail: bytes) -> None:
    assert_bad(bytes([type_byte]) + tail, ErrorCode.UNKNOWN_SIGNAL)


def test_empty_payload() -> None:
    assert_bad(b"")


def str8(raw: bytes) -> bytes:
    return len(raw).to_bytes(1, "big") + raw


@pytest.mark.parametrize(
    "payload",
    [
        # GenRequest encoder of 65 bytes
        b"\x01" + bytes(8) + str8(b"e" * (MAX_ENCODER + 1)) + bytes(4),
        # GenRequest body one byte over 1 MiB: refused from its length prefix alone
        b"\x01" + bytes(8) + str8(b"") + (MAX_BODY + 1).to_bytes(4, "big"),
        # GenAck airlane_stream of 201 bytes
        b"\x02" + bytes(20) + str8(b"s" * (MAX_AIRLANE_STREAM + 1)) + str8(b""),
        # Open epoch of 65 bytes
        b"\x03" + bytes(4) + str8(b"s") + str8(b"e" * (MAX_EPOCH + 1)) + bytes(8),
        # Opened airlane_stream of 255 bytes
        b"\x04" + bytes(4) + str8(b"s" * 255) + str8(b"") + bytes(9),
        # Error message of 1025 bytes
        b"\x08\x00\x01" + str8(b"c") + (MAX_MESSAGE + 1).to_bytes(2, "big") + b"m" * 1025,
        # RtcOffer sdp one byte over 64 KiB: refused from its length prefix alone
        b"\x0e\x00\x01" + (MAX_SDP + 1).to_bytes(4, "big"),
    ],
    ids=["encoder", "body", "gen-ack-stream", "epoch", "opened-stream", "message", "sdp"],
)
def test_over_limit_lengths_are_bad_signalling(payload: bytes) -> None:
    assert "exceeds the limit" in assert_bad(payload).reason


@pytest.mark.parametrize(
    "payload",
    [
        b"\x04" + bytes(4) + str8(b"") + str8(b"") + bytes(8) + b"\x02",  # Opened.ended = 2
        b"\x07" + bytes(4) + b"\xff",  # Cancelled.cancelled = 255
        b"\x08\x00\x01" + str8(b"\xff") + b"\x00\x00",  # Error.code not UTF-8
        b"\x08\x00\x01" + str8(b"") + b"\x00\x02\xed\xa0",  # Error.message truncated UTF-8
        b"\x03" + bytes(4) + str8(b"\xc0\x80") + str8(b"") + bytes(8),  # overlong NUL
        b"\x03" + bytes(4) + str8(b"\xed\xa0\x80") + str8(b"") + bytes(8),  # a surrogate
        b"\x0b\x00\x63\x00\x00",  # GoAway code 99 is no ErrorCode
    ],
    ids=["bool-2", "bool-255", "utf8-code", "utf8-message", "overlong", "surrogate", "code-99"],
)
def test_malformed_fields_are_bad_signalling(payload: bytes) -> None:
    assert_bad(payload)


@pytest.mark.parametrize(
    "msg",
    [
        GenRequest(-1, 0, 0, "", b""),
        GenRequest(0x10000, 0, 0, "", b""),
        GenRequest(0, 0x10000, 0, "", b""),
        GenRequest(0, 0, 2**32, "", b""),
        GenRequest(0, 0, 0, "e" * (MAX_ENCODER + 1), b""),
        GenRequest(0, 0, 0, "é" * 33, b""),  # 33 characters but 66 bytes
        GenRequest(0, 0, 0, "", bytes(MAX_BODY + 1)),
        GenAck(0, 0, 0, 0, 0, 2**31, "", ""),
        GenAck(0, 0, 0, 0, 0, -(2**31) - 1, "", ""),
        GenAck(0, 0, 0, 2**32, 0, 0, "", ""),
        GenAck(0, 0, 0, 0, 0, 0, "s" * (MAX_AIRLANE_STREAM + 1), ""),
        Open(0, 0, "", "e" * (MAX_EPOCH + 1), 0),
        Open(0, 0, "", "", 2**64),
        Open(0, 0, "", "", -1),
        Opened(0, 0, "\ud800", "", 0, False),  # a lone surrogate is not UTF-8
        Close(0, 2**64),
        Error(0, "c" * 256, ""),
        Error(0, "", "m" * (MAX_MESSAGE + 1)),
        RtcOffer(0, "v" * (MAX_SDP + 1)),
        RtcClose(0, "s" * 256),
        SetLane(0, 256),
        LaneSet(0, 0, "m" * 256),
        CancelStream(0, "s" * (MAX_AIRLANE_STREAM + 1)),
        TimeRequest(2**32),
        GoAway(99, ""),  # type: ignore[arg-type]
        GoAway(ErrorCode.NO_ERROR, "r" * 0x10000),
    ],
    ids=lambda msg: type(msg).__name__,
)
def test_encoding_out_of_range_raises_value_error(msg: SignalMessage) -> None:
    with pytest.raises(ValueError):
        encode_signal(msg)


@pytest.mark.parametrize(
    "msg",
    [
        Opened(0, 0, "", "", 0, 1),  # type: ignore[arg-type]
        Error(0, b"code", ""),  # type: ignore[arg-type]
        GenRequest(0, 0, 0, "", "body"),  # type: ignore[arg-type]
        Cancel("1", 0),  # type: ignore[arg-type]
        object(),
    ],
    ids=lambda msg: type(msg).__name__,
)
def test_encoding_the_wrong_type_raises_type_error(msg: SignalMessage) -> None:
    with pytest.raises(TypeError):
        encode_signal(msg)


def test_messages_are_frozen_and_slotted() -> None:
    msg = Cancel(1, 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        msg.stream = 3  # type: ignore[misc]
    assert not hasattr(msg, "__dict__")
