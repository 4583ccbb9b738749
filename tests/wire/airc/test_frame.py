"""The AIRC frame: header, CRC-16/CCITT-FALSE, encoder and decoder.

Invariants: decode(encode(frames)) == frames however the byte stream is chunked; every
malformed frame raises `AircProtocolError` with its own `ErrorCode` whether fed whole or one
byte at a time, and the decoder refuses all input after that; after any feed the decoder
holds at most one incomplete frame (``HEADER_SIZE + max_payload`` bytes).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airlane.wire.airc.errors import AircProtocolError, ErrorCode
from airlane.wire.airc.frame import (
    HEADER_SIZE,
    MAX_PAYLOAD,
    Flags,
    Frame,
    FrameDecoder,
    crc16,
    encode_frame,
)

from ..chunking import PROPERTY, SPLITTERS, chunkings

FLAG_VALUES = [Flags(bits) for bits in range(8)]  # every combination of ACK, EOM, PRIORITY

frame_strategy = st.builds(
    Frame,
    stream_id=st.integers(0, 0xFFFF),
    seq=st.integers(0, 0xFFFFFFFF),
    timestamp=st.integers(0, 0xFFFFFFFF),
    payload=st.binary(max_size=3000),
    flags=st.sampled_from(FLAG_VALUES),
)


def reference_crc16(data: bytes) -> int:
    """CRC-16/CCITT-FALSE bit by bit, straight from its definition (poly 0x1021, init
    0xFFFF, no reflection, no final XOR): an independent check of `crc16`."""
    crc = 0xFFFF
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def feed_all(decoder: FrameDecoder, chunks: list[bytes]) -> list[Frame]:
    frames = []
    for chunk in chunks:
        frames += decoder.feed(chunk)
        assert decoder.buffered <= HEADER_SIZE + decoder.max_payload
    return frames


# -- CRC and the golden frame ---------------------------------------------------------------


def test_crc_check_value() -> None:
    assert crc16(b"123456789") == 0x29B1
    assert reference_crc16(b"123456789") == 0x29B1


@PROPERTY
@given(st.binary(max_size=200))
def test_crc_matches_reference(data: bytes) -> None:
    assert crc16(data) == reference_crc16(data)


# stream 0x0102, seq 0x03040506, time 0x0708090A, EOM | PRIORITY, payload b"hi"
GOLDEN_FRAME = Frame(0x0102, 0x03040506, 0x0708090A, b"hi", Flags.EOM | Flags.PRIORITY)
GOLDEN_HEADER = bytes(
    [
        0x41, 0x49, 0x52, 0x43,  # magic "AIRC"
        0x02,  # version (v1.2)
        0x06,  # flags: EOM (2) | PRIORITY (4)
        0x01, 0x02,  # stream_id
        0x03, 0x04, 0x05, 0x06,  # seq
        0x07, 0x08, 0x09, 0x0A,  # timestamp
        0x00, 0x02,  # payload_len
        0x8C, 0x88,  # crc16 of the 18 bytes above, then 0x00 0x00, then b"hi"
    ]
)  # fmt: skip


def test_golden_frame() -> None:
    assert len(GOLDEN_HEADER) == HEADER_SIZE
    zeroed = GOLDEN_HEADER[:18] + b"\x00\x00"
    assert reference_crc16(zeroed + b"hi") == 0x8C88
    assert encode_frame(GOLDEN_FRAME) == GOLDEN_HEADER + b"hi"
    assert FrameDecoder().feed(GOLDEN_HEADER + b"hi") == [GOLDEN_FRAME]


def test_empty_payload_frame_is_header_only() -> None:
    data = encode_frame(Frame(7, 0, 0, b"", Flags.ACK))
    assert len(data) == HEADER_SIZE
    assert data[16:18] == b"\x00\x00"
    assert FrameDecoder().feed(data) == [Frame(7, 0, 0, b"", Flags.ACK)]


# -- round trips ------------------------------------------------------------------------------


FIXTURES: dict[str, list[Frame]] = {
    "golden": [GOLDEN_FRAME],
    "ack": [Frame(1, 5, 9, b"", Flags.ACK)],
    "several": [
        Frame(0, 1, 0, b"a", Flags.EOM),
        Frame(255, 1, 1, b"", Flags.EOM | Flags.PRIORITY),
        Frame(0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, b"AIRC" * 100),
    ],
    "max-payload": [Frame(3, 2, 1, bytes(range(256)) * 255 + bytes(255), Flags.EOM)],
}


@pytest.mark.parametrize("split", SPLITTERS.values(), ids=SPLITTERS.keys())
@pytest.mark.parametrize("frames", FIXTURES.values(), ids=FIXTURES.keys())
def test_fixture(frames: list[Frame], split: Callable[[bytes], list[bytes]]) -> None:
    decoder = FrameDecoder()
    assert feed_all(decoder, split(b"".join(map(encode_frame, frames)))) == frames
    assert decoder.buffered == 0


@pytest.mark.parametrize("cut", [1, 3, 4, 19, 20, 21])
def test_trailing_partial_frame_is_held(cut: int) -> None:
    decoder = FrameDecoder()
    following = encode_frame(Frame(9, 9, 9, b"next!", Flags.EOM))
    assert decoder.feed(encode_frame(GOLDEN_FRAME) + following[:cut]) == [GOLDEN_FRAME]
    assert decoder.buffered == cut
    assert decoder.feed(following[cut:]) == [Frame(9, 9, 9, b"next!", Flags.EOM)]
    assert decoder.buffered == 0


@PROPERTY
@given(st.data(), st.lists(frame_strategy, max_size=6))
def test_round_trip_any_chunking(data: st.DataObject, frames: list[Frame]) -> None:
    stream = b"".join(map(encode_frame, frames))
    for split in SPLITTERS.values():
        assert feed_all(FrameDecoder(), split(stream)) == frames
    decoder = FrameDecoder()
    assert feed_all(decoder, data.draw(chunkings(stream))) == frames
    assert decoder.buffered == 0


@PROPERTY
@given(st.data(), st.integers(0, 64), st.lists(st.binary(max_size=80), max_size=8))
def test_buffers_at_most_one_frame(
    data: st.DataObject, max_payload: int, payloads: list[bytes]
) -> None:
    """Valid frames up to ``max_payload`` pass; however chunked, the decoder never holds
    more than one incomplete frame."""
    frames = [Frame(1, i, i, p[:max_payload], Flags.EOM) for i, p in enumerate(payloads)]
    stream = b"".join(map(encode_frame, frames))
    decoder = FrameDecoder(max_payload)
    assert feed_all(decoder, data.draw(chunkings(stream))) == frames


# -- malformed input ------------------------------------------------------------------------


def _flip(data: bytes, index: int, mask: int = 0x01) -> bytes:
    return data[:index] + bytes([data[index] ^ mask]) + data[index + 1 :]


GOOD = encode_frame(Frame(4, 10, 20, b"payload!", Flags.EOM))

MALFORMED: dict[str, tuple[bytes, ErrorCode]] = {
    "bad-magic": (b"AIRD" + GOOD[4:], ErrorCode.BAD_MAGIC),
    "http-request": (b"GET / HTTP/1.1\r\n\r\n", ErrorCode.BAD_MAGIC),
    "bad-magic-after-good-frame": (GOOD + b"\x00" * 24, ErrorCode.BAD_MAGIC),
    "version-1": (GOOD[:4] + b"\x01" + GOOD[5:], ErrorCode.BAD_VERSION),
    "version-3": (GOOD[:4] + b"\x03" + GOOD[5:], ErrorCode.BAD_VERSION),
    **{
        f"reserved-flag-bit-{bit}": (_flip(GOOD, 5, 1 << bit), ErrorCode.RESERVED_FLAGS)
        for bit in range(3, 8)
    },
    "crc-field": (_flip(GOOD, 19), ErrorCode.BAD_CRC),
    "crc-header-stream": (_flip(GOOD, 7), ErrorCode.BAD_CRC),
    "crc-header-seq": (_flip(GOOD, 11, 0x80), ErrorCode.BAD_CRC),
    "crc-header-time": (_flip(GOOD, 12), ErrorCode.BAD_CRC),
    "crc-header-flags": (_flip(GOOD, 5, Flags.PRIORITY), ErrorCode.BAD_CRC),
    "crc-payload": (_flip(GOOD, HEADER_SIZE + 3), ErrorCode.BAD_CRC),
    "crc-second-frame": (GOOD + _flip(GOOD, len(GOOD) - 1), ErrorCode.BAD_CRC),
    "length-over-max": (
        encode_frame(Frame(1, 1, 1, b"x" * 101))[:HEADER_SIZE],  # the header alone
        ErrorCode.OVERSIZE,
    ),
}


@pytest.mark.parametrize("split", SPLITTERS.values(), ids=SPLITTERS.keys())
@pytest.mark.parametrize(
    ("data", "code"), MALFORMED.values(), ids=MALFORMED.keys()
)  # fmt: skip
def test_malformed(data: bytes, code: ErrorCode, split: Callable[[bytes], list[bytes]]) -> None:
    decoder = FrameDecoder(max_payload=100)
    with pytest.raises(AircProtocolError) as info:
        feed_all(decoder, split(data))
    assert info.value.goaway is code
    assert decoder.buffered == 0  # nothing is kept once the stream is broken
    # The stream cannot be resynchronised: even a perfect frame is refused now.
    for more in (GOOD, b""):
        with pytest.raises(AircProtocolError) as again:
            decoder.feed(more)
        assert again.value.goaway is code


def test_error_names_its_code() -> None:
    with pytest.raises(AircProtocolError, match="BAD_MAGIC") as info:
        FrameDecoder().feed(b"XXXX")
    assert info.value.reason.startswith("expected magic")


def test_max_payload_is_inclusive() -> None:
    frame = Frame(1, 1, 1, b"x" * 100, Flags.EOM)
    assert FrameDecoder(max_payload=100).feed(encode_frame(frame)) == [frame]
    with pytest.raises(ValueError):
        FrameDecoder(max_payload=MAX_PAYLOAD + 1)
    with pytest.raises(ValueError):
        FrameDecoder(max_payload=-1)


# -- encoder misuse -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "frame",
    [
        Frame(-1, 0, 0),
        Frame(0x10000, 0, 0),
        Frame(0, -1, 0),
        Frame(0, 1 << 32, 0),
        Frame(0, 0, -1),
        Frame(0, 0, 1 << 32),
        Frame(0, 0, 0, b"x" * (MAX_PAYLOAD + 1)),
        *(Frame(0, 0, 0, b"", Flags(1 << bit)) for bit in range(3, 8)),
    ],
    ids=lambda frame: repr(frame)[:60],
)
def test_encode_rejects_out_of_range(frame: Frame) -> None:
    with pytest.raises(ValueError):
        encode_frame(frame)


def test_encode_accepts_the_extremes() -> None:
    frame = Frame(0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, b"x" * MAX_PAYLOAD, Flags(7))
    assert FrameDecoder().feed(encode_frame(frame)) == [frame]


@pytest.mark.parametrize("cut", [0, 5, 20, 31, 44])
def test_decode_returns_the_frames_before_a_problem_however_split(cut: int) -> None:
    good = [Frame(1, 1, 0, b"first", Flags.EOM), Frame(2, 1, 0, b"", Flags.EOM)]
    corrupt = bytearray(encode_frame(Frame(3, 1, 0, b"third", Flags.EOM)))
    corrupt[-1] ^= 0xFF
    data = b"".join(map(encode_frame, good)) + bytes(corrupt)
    decoder = FrameDecoder()
    first, failure = decoder.decode(data[:cut])
    assert failure is None
    rest, failure = decoder.decode(data[cut:])
    assert first + rest == good
    assert failure is not None and failure.goaway is ErrorCode.BAD_CRC
    # The decoder stays failed; feed raises what decode returns.
    assert decoder.decode(b"")[1] is not None
    with pytest.raises(AircProtocolError):
        decoder.feed(b"")
