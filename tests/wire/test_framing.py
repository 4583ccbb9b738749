"""Length-prefixed framing.

Invariant: the payloads a FrameDecoder returns are exactly the payloads encoded, in order,
however the byte stream is chunked, and ``pending`` counts the bytes of the unfinished frame.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airlane.wire.errors import FrameTooLarge, WireError
from airlane.wire.framing import DEFAULT_MAX_FRAME, FrameDecoder, encode_frame

from .chunking import PROPERTY, SPLITTERS, chunkings

FIXTURES: dict[str, list[bytes]] = {
    "one": [b"hello"],
    "empty-payload": [b""],
    "several": [b"a", b"", b"bc" * 100, b"\x00\x00\x00\x04"],
    "binary-64k": [bytes(range(256)) * 256],
}


def test_encode_frame() -> None:
    assert encode_frame(b"") == b"\x00\x00\x00\x00"
    assert encode_frame(b"abc") == b"\x00\x00\x00\x03abc"
    assert encode_frame(b"x" * 258)[:4] == b"\x00\x00\x01\x02"


def feed_all(decoder: FrameDecoder, chunks: list[bytes]) -> list[bytes]:
    return [frame for chunk in chunks for frame in decoder.feed(chunk)]


@pytest.mark.parametrize("split", SPLITTERS.values(), ids=SPLITTERS.keys())
@pytest.mark.parametrize("payloads", FIXTURES.values(), ids=FIXTURES.keys())
def test_fixture(payloads: list[bytes], split: Callable[[bytes], list[bytes]]) -> None:
    decoder = FrameDecoder()
    assert feed_all(decoder, split(b"".join(map(encode_frame, payloads)))) == payloads
    assert decoder.pending == 0


@pytest.mark.parametrize("payloads", FIXTURES.values(), ids=FIXTURES.keys())
@pytest.mark.parametrize("cut", [1, 3, 4, 6])
def test_fixture_with_partial_next_frame(payloads: list[bytes], cut: int) -> None:
    decoder = FrameDecoder()
    trailing = encode_frame(b"next!")[:cut]
    assert decoder.feed(b"".join(map(encode_frame, payloads)) + trailing) == payloads
    assert decoder.pending == cut
    assert decoder.feed(encode_frame(b"next!")[cut:]) == [b"next!"]
    assert decoder.pending == 0


def test_too_large_raises_on_the_header_alone() -> None:
    decoder = FrameDecoder(max_frame=10)
    assert decoder.feed(encode_frame(b"x" * 10)) == [b"x" * 10]  # the limit itself is fine
    with pytest.raises(FrameTooLarge, match="frame of 11 bytes exceeds the limit of 10") as info:
        decoder.feed(b"\x00\x00\x00\x0b")
    assert (info.value.size, info.value.limit) == (11, 10)
    assert isinstance(info.value, WireError)
    assert decoder.pending == 0  # nothing kept
    with pytest.raises(FrameTooLarge):  # the stream cannot be resynchronised
        decoder.feed(encode_frame(b"ok"))


def test_huge_announced_length_is_not_buffered() -> None:
    decoder = FrameDecoder()
    with pytest.raises(FrameTooLarge, match=str(DEFAULT_MAX_FRAME)):
        decoder.feed(b"\xff\xff\xff\xff" + b"x" * 100)


def test_large_frame_in_small_chunks() -> None:
    payload = bytes(range(256)) * 4096  # 1 MiB
    stream = encode_frame(payload) + encode_frame(b"tail")
    decoder = FrameDecoder()
    frames = feed_all(decoder, [stream[i : i + 1000] for i in range(0, len(stream), 1000)])
    assert frames == [payload, b"tail"]
    assert decoder.pending == 0


def test_invalid_max_frame() -> None:
    with pytest.raises(ValueError):
        FrameDecoder(max_frame=-1)
    assert FrameDecoder(max_frame=0).feed(encode_frame(b"")) == [b""]


@PROPERTY
@given(st.data(), st.lists(st.binary(max_size=300), max_size=10))
def test_round_trip(data: st.DataObject, payloads: list[bytes]) -> None:
    """Invariant: decode(encode(payloads)) == payloads under any chunking."""
    decoder = FrameDecoder()
    stream = b"".join(map(encode_frame, payloads))
    assert feed_all(decoder, data.draw(chunkings(stream))) == payloads
    assert decoder.pending == 0
