"""libp2p's framing layers: unsigned varints, the Protobuf field reader, multistream-select 1.0
and mplex.

These decoders read whatever a remote peer sends before anything is authenticated (varint,
multistream) or after only the channel is (Protobuf, mplex), so besides the round trips the
tests hold them to their bounds: non-minimal or over-long varints, lengths past the end, wire
types that are not supported, over-long lines and frames, and random bytes that may raise
only the module's own `DecodeError` subclass, never an `IndexError` or `ValueError`.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airlane.wire.errors import DecodeError, FrameTooLarge
from airlane.wire.libp2p.mplex import (
    MAX_FRAME,
    DataReceived,
    MplexConnection,
    MplexError,
    StreamEnded,
    StreamKey,
    StreamOpened,
    StreamReset,
)
from airlane.wire.libp2p.multistream import (
    HEADER,
    MAX_PROPOSALS,
    MultistreamDialer,
    MultistreamListener,
    NegotiationFailed,
    Selected,
    message,
)
from airlane.wire.libp2p.protobuf import (
    BYTES,
    FIXED32,
    FIXED64,
    VARINT,
    Writer,
    fields,
    packed_varints,
    text,
    zigzag_decode,
    zigzag_encode,
)
from airlane.wire.libp2p.varint import (
    MAX_VARINT_BYTES,
    PrefixedReader,
    decode_uvarint,
    encode_uvarint,
    prefixed,
)

from .chunking import PROPERTY, bytewise, chunkings

U64 = st.integers(0, 2**64 - 1)
I64 = st.integers(-(2**63), 2**63 - 1)

# -- varint -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, "00"),
        (1, "01"),
        (127, "7f"),
        (128, "8001"),
        (300, "ac02"),
        (16384, "808001"),
        (2**63, "80808080808080808001"),
        (2**64 - 1, "ffffffffffffffffff01"),
    ],
)
def test_varint_known_encodings(value: int, encoded: str) -> None:
    # The multiformats spec's own examples, and both ends of the 64-bit range.
    assert encode_uvarint(value) == bytes.fromhex(encoded)
    assert decode_uvarint(bytes.fromhex(encoded)) == (value, len(encoded) // 2)


@pytest.mark.parametrize("value", [-1, 2**64])
def test_varint_encoder_refuses_values_outside_64_bits(value: int) -> None:
    with pytest.raises(ValueError, match="out of range"):
        encode_uvarint(value)


@PROPERTY
@given(U64, st.binary(max_size=5), st.binary(max_size=5))
def test_varint_round_trips_at_any_offset(value: int, before: bytes, after: bytes) -> None:
    encoded = encode_uvarint(value)
    assert len(encoded) <= MAX_VARINT_BYTES
    data = before + encoded + after
    assert decode_uvarint(data, len(before)) == (value, len(before) + len(encoded))


@pytest.mark.parametrize("encoded", ["8000", "8100", "ff8000", "80808080808080808000"])
def test_varint_not_minimally_encoded_is_refused(encoded: str) -> None:
    # A trailing zero byte gives a second spelling of a value; multiformats forbids it.
    with pytest.raises(DecodeError, match="not minimally encoded"):
        decode_uvarint(bytes.fromhex(encoded))


def test_varint_longer_than_ten_bytes_is_refused() -> None:
    # Ten continuation bytes can never end in a 64-bit value: refused without waiting for more.
    with pytest.raises(DecodeError, match="longer than 10 bytes"):
        decode_uvarint(b"\x80" * 10)
    with pytest.raises(DecodeError, match="longer than 10 bytes"):
        decode_uvarint(b"\xff" * 10 + b"\x01")


def test_varint_over_64_bits_is_refused() -> None:
    # Ten bytes whose last carries more than the 64th bit.
    with pytest.raises(DecodeError, match="exceeds 64 bits"):
        decode_uvarint(b"\xff" * 9 + b"\x02")


@pytest.mark.parametrize("data", [b"", b"\x80", b"\xff" * 9, b"\x00\x80"])
def test_varint_truncated_is_none(data: bytes) -> None:
    offset = 1 if data == b"\x00\x80" else 0  # (a complete varint before the offset is ignored)
    assert decode_uvarint(data, offset) is None


def test_prefixed_puts_the_length_first() -> None:
    assert prefixed(b"abc") == b"\x03abc"
    assert prefixed(b"x" * 200)[:2] == b"\xc8\x01"


@PROPERTY
@given(st.data(), st.lists(st.binary(max_size=300), max_size=8))
def test_prefixed_reader_splits_any_chunking_identically(
    data: st.DataObject, messages: list[bytes]
) -> None:
    stream = b"".join(map(prefixed, messages))
    reader = PrefixedReader(limit=300)
    got = [message for chunk in data.draw(chunkings(stream)) for message in reader.feed(chunk)]
    assert got == messages
    assert reader.buffered == 0


def test_prefixed_reader_refuses_an_oversize_length_before_the_body() -> None:
    reader = PrefixedReader(limit=10)
    assert reader.feed(prefixed(b"x" * 10)) == [b"x" * 10]  # the limit itself is fine
    # Only the length has arrived: the reader must not wait for (and buffer) 2**40 bytes.
    with pytest.raises(FrameTooLarge) as info:
        reader.feed(encode_uvarint(2**40))
    assert info.value.size == 2**40 and info.value.limit == 10


def test_prefixed_reader_refuses_a_malformed_length() -> None:
    with pytest.raises(DecodeError):
        PrefixedReader(limit=100).feed(b"\x80\x00")


def test_prefixed_reader_keeps_a_partial_message_and_hands_over_the_rest() -> None:
    reader = PrefixedReader(limit=100)
    assert reader.feed(prefixed(b"one") + b"\x05ab") == [b"one"]
    assert reader.buffered == 3
    # After a handshake the remaining bytes belong to the next layer, untouched.
    assert reader.take_rest() == b"\x05ab"
    assert reader.buffered == 0


# -- protobuf ---------------------------------------------------------------------------------


def test_protobuf_writer_bytes_are_the_specs() -> None:
    # The Protobuf encoding guide's examples: field 1 = 150, field 2 = "testing".
    assert Writer().varint(1, 150).finish() == bytes.fromhex("089601")
    assert Writer().string(2, "testing").finish() == bytes.fromhex("120774657374696e67")
    # A negative int64 is its 64-bit two's complement: ten bytes.
    assert Writer().varint(1, -1).finish() == b"\x08" + b"\xff" * 9 + b"\x01"


def test_protobuf_writer_and_fields_round_trip() -> None:
    data = (
        Writer()
        .varint(1, 150)
        .data(2, b"\x00raw")
        .string(3, "héllo")
        .sint64(4, -1)
        .data(2**29 - 1, b"")  # the largest field number
        .finish()
    )
    assert list(fields(data)) == [
        (1, VARINT, 150),
        (2, BYTES, b"\x00raw"),
        (3, BYTES, "héllo".encode()),
        (4, VARINT, 1),
        (2**29 - 1, BYTES, b""),
    ]


def test_protobuf_fixed_width_fields_are_read_little_endian() -> None:
    # Writer has no fixed fields (nothing libp2p or Waku sends uses them), but a peer's
    # unknown fixed fields must be read past, so the reader decodes them.
    data = b"\x09" + (0x0102030405060708).to_bytes(8, "little") + b"\x15\x01\x00\x00\x80"
    assert list(fields(data)) == [(1, FIXED64, 0x0102030405060708), (2, FIXED32, 0x80000001)]


@pytest.mark.parametrize(
    ("value", "encoded"),
    [(0, 0), (-1, 1), (1, 2), (-2, 3), (2**63 - 1, 2**64 - 2), (-(2**63), 2**64 - 1)],
)
def test_zigzag_known_values(value: int, encoded: int) -> None:
    assert zigzag_encode(value) == encoded
    assert zigzag_decode(encoded) == value


@PROPERTY
@given(I64)
def test_zigzag_round_trips(value: int) -> None:
    assert zigzag_decode(zigzag_encode(value)) == value
    written = Writer().sint64(7, value).finish()
    [(number, wire_type, raw)] = fields(written)
    assert (number, wire_type) == (7, VARINT)
    assert isinstance(raw, int) and zigzag_decode(raw) == value


def test_protobuf_unknown_fields_of_every_wire_type_are_skipped() -> None:
    # Each decoder keeps only the fields it knows: here the identify reader must get past a
    # varint, a fixed64, a fixed32 and a length-delimited field it has never heard of.
    from airlane.wire.libp2p.identify import Identify

    noise = (
        Writer().varint(100, 7).data(101, b"skip me").finish()
        + b"\xa1\x06"  # key of field 100, fixed64 (100 << 3 | 1 = 0x321)
        + bytes(8)
        + b"\xad\x06"  # key of field 101, fixed32 (101 << 3 | 5 = 0x32d)
        + bytes(4)
    )
    decoded = Identify.decode(noise + Identify(protocols=("/x",)).encode())
    assert decoded.protocols == ("/x",)


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(b"\x08", id="varint-value-missing"),
        pytest.param(b"\x08\x96", id="varint-value-truncated"),
        pytest.param(b"\x80", id="key-truncated"),
        pytest.param(b"\x12\x05ab", id="length-past-end"),
        pytest.param(b"\x12", id="length-missing"),
        pytest.param(b"\x12" + encode_uvarint(2**63) + b"x", id="huge-length"),
        pytest.param(b"\x09" + bytes(7), id="fixed64-truncated"),
        pytest.param(b"\x0d" + bytes(3), id="fixed32-truncated"),
        pytest.param(b"\x0b\x0c", id="start-group-3"),
        pytest.param(b"\x0c", id="end-group-4"),
        pytest.param(b"\x0e\x00", id="wire-type-6"),
        pytest.param(b"\x0f\x00", id="wire-type-7"),
        pytest.param(b"\x00\x01", id="field-number-0"),
        pytest.param(b"\x02\x00", id="field-number-0-bytes"),
        pytest.param(b"\x88\x00\x01", id="non-minimal-key"),
    ],
)
def test_protobuf_malformed_messages_raise_decode_error(data: bytes) -> None:
    with pytest.raises(DecodeError):
        list(fields(data))


def test_protobuf_fields_before_a_bad_one_are_yielded_first() -> None:
    # A generator: a decoder may already hold the good fields when the bad one raises, which is
    # why every decoder builds its result only after the loop.
    reader = fields(b"\x08\x01\x12\x09ab")
    assert next(reader) == (1, VARINT, 1)
    with pytest.raises(DecodeError):
        next(reader)


@PROPERTY
@given(st.binary(max_size=200))
def test_protobuf_fields_on_random_bytes_raise_only_decode_error(data: bytes) -> None:
    try:
        for number, wire_type, value in fields(data):
            assert number >= 1 and wire_type in (VARINT, FIXED64, BYTES, FIXED32)
            assert isinstance(value, bytes if wire_type == BYTES else int)
    except DecodeError:
        pass


@PROPERTY
@given(st.lists(U64, max_size=20))
def test_packed_varints_round_trip(values: list[int]) -> None:
    assert packed_varints(b"".join(map(encode_uvarint, values))) == values


def test_packed_varints_truncated_raises() -> None:
    with pytest.raises(DecodeError, match="ends inside a varint"):
        packed_varints(b"\x01\x80")


def test_text_field_checks_utf8_and_wire_type() -> None:
    assert text("ünï".encode(), "name") == "ünï"
    with pytest.raises(DecodeError, match="name is not UTF-8"):
        text(b"\xff\xfe", "name")
    with pytest.raises(DecodeError, match="expected a length-delimited field"):
        text(5, "name")


# -- multistream-select -----------------------------------------------------------------------


def test_message_is_a_prefixed_line() -> None:
    assert message(HEADER) == b"\x13/multistream/1.0.0\n"
    assert message("na") == b"\x03na\n"


def test_dialer_and_listener_agree() -> None:
    dialer = MultistreamDialer("/noise")
    listener = MultistreamListener(lambda protocol: protocol == "/noise")
    reply, selected = listener.receive_data(dialer.proposal())
    assert selected == Selected("/noise", b"")
    assert reply == message("/noise")  # the echo accepts it
    assert dialer.receive_data(listener.greeting() + reply) == Selected("/noise", b"")


def test_listener_answers_na_then_accepts_a_later_proposal() -> None:
    listener = MultistreamListener(lambda protocol: protocol == "/mplex/6.7.0")
    reply, selected = listener.receive_data(message(HEADER) + message("/yamux/1.0.0"))
    assert (reply, selected) == (message("na"), None)
    # "ls" is not a protocol: the listener does not list, it refuses.
    assert listener.receive_data(message("ls")) == (message("na"), None)
    reply, selected = listener.receive_data(message("/mplex/6.7.0"))
    assert (reply, selected) == (message("/mplex/6.7.0"), Selected("/mplex/6.7.0", b""))


def test_optimistic_data_after_the_proposal_is_handed_on() -> None:
    # js-libp2p writes the protocol's first bytes right behind its proposal.
    dialer = MultistreamDialer("/ipfs/ping/1.0.0")
    listener = MultistreamListener(lambda protocol: True)
    early = b"\x00" * 32 + message("/not/a/proposal")  # looks like negotiation; is not ours
    _, selected = listener.receive_data(dialer.proposal() + early)
    assert selected == Selected("/ipfs/ping/1.0.0", early)
    # The dialer likewise hands on what the listener sent after its echo.
    after = dialer.receive_data(listener.greeting() + message("/ipfs/ping/1.0.0") + b"pong")
    assert after == Selected("/ipfs/ping/1.0.0", b"pong")


def test_listener_gives_up_after_too_many_proposals() -> None:
    listener = MultistreamListener(lambda protocol: False)
    listener.receive_data(message(HEADER))
    for index in range(MAX_PROPOSALS):
        assert listener.receive_data(message(f"/p/{index}")) == (message("na"), None)
    with pytest.raises(NegotiationFailed, match="no protocol agreed"):
        listener.receive_data(message("/one/more"))


def test_dialer_fails_on_na_and_on_a_different_answer() -> None:
    with pytest.raises(NegotiationFailed, match="does not speak /noise"):
        MultistreamDialer("/noise").receive_data(message(HEADER) + message("na"))
    with pytest.raises(NegotiationFailed, match="unexpected multistream answer"):
        MultistreamDialer("/noise").receive_data(message(HEADER) + message("/tls/1.0.0"))


@pytest.mark.parametrize("header", ["/multistream/2.0.0", "/noise", "", "/multistream/1.0.0 "])
def test_wrong_header_raises(header: str) -> None:
    with pytest.raises(NegotiationFailed, match=r"expected /multistream/1\.0\.0"):
        MultistreamListener(lambda protocol: True).receive_data(message(header))
    with pytest.raises(NegotiationFailed, match=r"expected /multistream/1\.0\.0"):
        MultistreamDialer("/noise").receive_data(message(header))


def test_over_long_line_raises_on_its_length_alone() -> None:
    listener = MultistreamListener(lambda protocol: True)
    with pytest.raises(NegotiationFailed, match="of 1025 bytes"):
        listener.receive_data(encode_uvarint(1025))
    # 1,024 bytes, newline included, is still a message.
    listener = MultistreamListener(lambda protocol: False)
    assert listener.receive_data(message(HEADER) + message("/" + "x" * 1022)) == (
        message("na"),
        None,
    )


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(prefixed(b"/multistream/1.0.0"), id="no-newline"),
        pytest.param(prefixed(b""), id="empty"),
        pytest.param(prefixed(b"\xff\xfe\n"), id="not-utf8"),
        pytest.param(b"\x80\x00", id="non-minimal-length"),
        pytest.param(b"\xff" * 11, id="length-over-10-bytes"),
    ],
)
def test_malformed_messages_raise(raw: bytes) -> None:
    with pytest.raises(NegotiationFailed):
        MultistreamListener(lambda protocol: True).receive_data(raw)
    with pytest.raises(NegotiationFailed):
        MultistreamDialer("/noise").receive_data(raw)


def test_bytes_one_at_a_time() -> None:
    dialer = MultistreamDialer("/noise")
    listener = MultistreamListener(lambda protocol: protocol == "/noise")
    replies = []
    selected = None
    for chunk in bytewise(dialer.proposal()):
        assert selected is None  # selection happens only on the last byte
        reply, selected = listener.receive_data(chunk)
        replies.append(reply)
    assert selected == Selected("/noise", b"")
    answer = listener.greeting() + b"".join(replies)
    results = [dialer.receive_data(chunk) for chunk in bytewise(answer)]
    assert results[:-1] == [None] * (len(answer) - 1)
    assert results[-1] == Selected("/noise", b"")


@PROPERTY
@given(st.binary(max_size=300))
def test_listener_on_random_bytes_raises_only_negotiation_failed(data: bytes) -> None:
    listener = MultistreamListener(lambda protocol: protocol == "/noise")
    try:
        reply, _ = listener.receive_data(message(HEADER) + data)
    except NegotiationFailed:
        return
    assert isinstance(reply, bytes)


# -- mplex ------------------------------------------------------------------------------------


def frame(stream_id: int, flag: int, payload: bytes = b"") -> bytes:
    """An mplex frame written out by hand (what a hostile peer can send)."""
    return encode_uvarint(stream_id << 3 | flag) + encode_uvarint(len(payload)) + payload


def connected() -> tuple[MplexConnection, MplexConnection, StreamKey, StreamKey]:
    """Two connections with one stream opened by ``a``: its key on each side."""
    a, b = MplexConnection(), MplexConnection()
    key, opening = a.open_stream()
    [event] = b.receive_data(opening)
    assert isinstance(event, StreamOpened)
    return a, b, key, event.stream


def test_open_stream_is_new_stream_on_the_other_side() -> None:
    a, b = MplexConnection(), MplexConnection()
    key, opening = a.open_stream()
    assert key == StreamKey(0, ours=True)
    assert opening == frame(0, 0, b"0")  # NewStream, named by its number as js-libp2p does
    assert b.receive_data(opening) == [StreamOpened(StreamKey(0, ours=False))]
    second, opening = a.open_stream()
    assert second == StreamKey(1, ours=True) and opening == frame(1, 0, b"1")
    assert (a.open_streams, b.open_streams) == (2, 1)


def test_data_both_ways_with_the_right_flags() -> None:
    a, b, ours, theirs = connected()
    # MessageInitiator (2) from the opener, MessageReceiver (1) from the other side.
    assert a.send(ours, b"ping") == frame(0, 2, b"ping")
    assert b.send(theirs, b"pong") == frame(0, 1, b"pong")
    assert b.receive_data(a.send(ours, b"ping")) == [DataReceived(theirs, b"ping")]
    assert a.receive_data(b.send(theirs, b"pong")) == [DataReceived(ours, b"pong")]
    assert a.send(ours, b"") == b""  # nothing to say, no frame


def test_both_sides_may_use_the_same_stream_number() -> None:
    # Stream 0 opened by each side are two streams: the key holds who opened it.
    a, b, ours, theirs = connected()
    b_key, opening = b.open_stream()
    [opened] = a.receive_data(opening)
    assert opened == StreamOpened(StreamKey(0, ours=False))
    assert a.receive_data(b.send(b_key, b"on b's stream")) == [
        DataReceived(StreamKey(0, ours=False), b"on b's stream")
    ]
    assert a.receive_data(b.send(theirs, b"on a's stream")) == [
        DataReceived(ours, b"on a's stream")
    ]


def test_half_close_both_ways_removes_the_stream() -> None:
    a, b, ours, theirs = connected()
    assert a.close(ours) == frame(0, 4)  # CloseInitiator
    assert a.close(ours) == b""  # once
    assert a.send(ours, b"late") == b""  # this side writes no more
    assert b.receive_data(frame(0, 4)) == [StreamEnded(theirs)]
    assert (a.open_streams, b.open_streams) == (1, 1)  # still open the other way
    assert a.receive_data(b.send(theirs, b"still here")) == [DataReceived(ours, b"still here")]
    assert b.close(theirs) == frame(0, 3)  # CloseReceiver
    assert b.open_streams == 0
    assert a.receive_data(frame(0, 3)) == [StreamEnded(ours)]
    assert a.open_streams == 0


def test_remote_close_first_then_local_close_removes_the_stream() -> None:
    a, b, ours, theirs = connected()
    assert a.receive_data(b.close(theirs)) == [StreamEnded(ours)]
    assert a.receive_data(frame(0, 3)) == []  # a second close says nothing new
    a.close(ours)
    assert a.open_streams == 0


def test_data_after_remote_close_is_ignored() -> None:
    a, b, ours, _theirs = connected()
    b.receive_data(a.close(ours))
    # A peer that keeps writing after its close: dropped, not delivered.
    assert b.receive_data(frame(0, 2, b"after close")) == []


def test_reset_abandons_the_stream_both_ways() -> None:
    a, b, ours, theirs = connected()
    assert a.reset(ours) == frame(0, 6)  # ResetInitiator
    assert a.open_streams == 0 and a.reset(ours) == b""
    assert b.receive_data(frame(0, 6)) == [StreamReset(theirs)]
    assert b.open_streams == 0
    assert b.send(theirs, b"x") == b"" and b.close(theirs) == b""
    # Late frames on a reset stream are dropped.
    assert a.receive_data(frame(0, 1, b"late")) == []
    assert b.receive_data(frame(0, 2, b"late")) == []


def test_receiver_reset_reaches_the_opener() -> None:
    a, b, ours, theirs = connected()
    assert b.reset(theirs) == frame(0, 5)  # ResetReceiver
    assert a.receive_data(frame(0, 5)) == [StreamReset(ours)]


def test_stream_past_max_streams_is_refused_with_a_reset() -> None:
    a, b = MplexConnection(), MplexConnection(max_streams=2)
    openings = b"".join(a.open_stream()[1] for _ in range(3))
    events = b.receive_data(openings)
    assert events == [StreamOpened(StreamKey(0, False)), StreamOpened(StreamKey(1, False))]
    assert b.open_streams == 2
    refusal = b.data_to_send()
    assert refusal == frame(2, 5)  # ResetReceiver for the third
    assert b.data_to_send() == b""
    assert a.receive_data(refusal) == [StreamReset(StreamKey(2, True))]
    # Whatever the opener had already sent on it is dropped.
    assert b.receive_data(frame(2, 2, b"too late")) == []


def test_open_stream_past_max_streams_raises() -> None:
    a = MplexConnection(max_streams=1)
    a.open_stream()
    with pytest.raises(MplexError, match="1 streams are open"):
        a.open_stream()


def test_duplicate_new_stream_raises() -> None:
    b = MplexConnection()
    b.receive_data(frame(5, 0, b"5"))
    with pytest.raises(MplexError, match="opened twice"):
        b.receive_data(frame(5, 0, b"5"))


def test_unknown_flag_raises() -> None:
    with pytest.raises(MplexError, match="unknown mplex flag 7"):
        MplexConnection().receive_data(frame(0, 7))


def test_frame_over_max_frame_raises_mplex_error() -> None:
    # Only the header arrives: the connection must refuse without buffering a megabyte, and
    # with its own error (MplexError, a DecodeError), as the docstring of receive_data says.
    with pytest.raises(MplexError):
        MplexConnection().receive_data(encode_uvarint(0 << 3 | 2) + encode_uvarint(MAX_FRAME + 1))


def test_frame_of_max_frame_is_accepted() -> None:
    _a, b, _ours, theirs = connected()
    payload = b"m" * MAX_FRAME
    assert b.receive_data(frame(0, 2, payload)) == [DataReceived(theirs, payload)]


def test_malformed_header_raises_mplex_error() -> None:
    with pytest.raises(MplexError):
        MplexConnection().receive_data(b"\x80\x00\x00")  # non-minimal header varint


def test_writes_over_64_kib_are_cut_into_frames() -> None:
    a, b, ours, _theirs = connected()
    payload = bytes(range(256)) * 800  # 204,800 bytes
    events = b.receive_data(a.send(ours, payload))
    assert len(events) == 4  # 3 full 64 KiB frames and the remainder
    assert all(isinstance(event, DataReceived) for event in events)
    sizes = [len(event.data) for event in events if isinstance(event, DataReceived)]
    assert max(sizes) == 64 * 1024
    assert b"".join(event.data for event in events if isinstance(event, DataReceived)) == payload


@PROPERTY
@given(st.data())
def test_any_chunking_gives_the_same_events(data: st.DataObject) -> None:
    a = MplexConnection()
    key, stream = a.open_stream()
    stream += a.send(key, b"hello") + a.send(key, b"x" * 300) + a.close(key)
    b = MplexConnection()
    events = [e for chunk in data.draw(chunkings(stream)) for e in b.receive_data(chunk)]
    theirs = StreamKey(0, ours=False)
    assert events == [
        StreamOpened(theirs),
        DataReceived(theirs, b"hello"),
        DataReceived(theirs, b"x" * 300),
        StreamEnded(theirs),
    ]


@PROPERTY
@given(st.binary(max_size=300))
def test_random_bytes_raise_only_mplex_error(data: bytes) -> None:
    connection = MplexConnection(max_streams=4)
    try:
        events = connection.receive_data(data)
    except MplexError:
        return
    assert all(
        isinstance(e, StreamOpened | DataReceived | StreamEnded | StreamReset) for e in events
    )
