"""Streaming compressors and bounded decompressors.

Invariants: each event's compressed bytes decode to that event at once (no waiting for a
block to fill); the whole stream decodes to the concatenated events under any chunking; no
decompress call returns more than ``max_output`` bytes, and corrupt input raises DecodeError.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airlane.wire.compression import (
    Compression,
    CompressionChoice,
    make_compressor,
    make_decompressor,
)
from airlane.wire.errors import DecodeError, WireError

from .chunking import PROPERTY, SPLITTERS, chunkings

METHODS = list(Compression)
COMPRESSED = [m for m in Compression if m is not Compression.NONE]

EVENTS: dict[str, list[bytes]] = {
    "tokens": [b'data: {"text":"%d"}\n\n' % i for i in range(50)],
    "one-large": [bytes(range(256)) * 512],
    "with-empty": [b"a", b"", b"b" * 1000],
    # Several maximum-size blocks in one event, compressible and not.
    "multi-block": [b"0123456789abcdef" * 20_000, random.Random(7).randbytes(140_000), b"z"],
}


def compress_stream(method: Compression, events: list[bytes]) -> tuple[list[bytes], bytes]:
    compressor = make_compressor(CompressionChoice(method))
    assert compressor.method is method
    return [compressor.compress(event) for event in events], compressor.finish()


def decompress_all(method: Compression, chunks: list[bytes], max_output: int = 1 << 20) -> bytes:
    decompressor = make_decompressor(method, max_output=max_output)
    assert decompressor.method is method
    return b"".join(decompressor.decompress(chunk) for chunk in chunks)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("events", EVENTS.values(), ids=EVENTS.keys())
def test_each_event_decodes_immediately(method: Compression, events: list[bytes]) -> None:
    compressor = make_compressor(CompressionChoice(method))
    decompressor = make_decompressor(method)
    for event in events:
        assert decompressor.decompress(compressor.compress(event)) == event
    assert decompressor.decompress(compressor.finish()) == b""


@pytest.mark.parametrize("split", SPLITTERS.values(), ids=SPLITTERS.keys())
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("events", EVENTS.values(), ids=EVENTS.keys())
def test_fixture(
    method: Compression, events: list[bytes], split: Callable[[bytes], list[bytes]]
) -> None:
    parts, end = compress_stream(method, events)
    assert decompress_all(method, split(b"".join(parts) + end)) == b"".join(events)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("events", EVENTS.values(), ids=EVENTS.keys())
def test_fixture_with_partial_next_event(method: Compression, events: list[bytes]) -> None:
    compressor = make_compressor(CompressionChoice(method))
    parts = [compressor.compress(event) for event in events]
    following = compressor.compress(b"the next event")
    output = decompress_all(method, [b"".join(parts) + following[: len(following) // 2]])
    # Everything sent so far, and at most a prefix of the event still arriving.
    assert output.startswith(b"".join(events))
    assert b"the next event".startswith(output[len(b"".join(events)) :])


@pytest.mark.parametrize("method", [Compression.ZSTD, Compression.LZ4])
def test_concatenated_frames(method: Compression) -> None:
    stream = b""
    for event in (b"one", b"two"):
        parts, end = compress_stream(method, [event])
        stream += b"".join(parts) + end
    for split in SPLITTERS.values():
        assert decompress_all(method, split(stream)) == b"onetwo"


@pytest.mark.parametrize("method", COMPRESSED)
def test_decompression_bomb_is_refused(method: Compression) -> None:
    parts, end = compress_stream(method, [b"\0" * (32 << 20)])
    bomb = b"".join(parts) + end
    assert len(bomb) < 200_000  # tiny input ...
    decompressor = make_decompressor(method, max_output=1 << 20)
    with pytest.raises(DecodeError, match="beyond the limit of 1048576 bytes") as info:
        decompressor.decompress(bomb)  # ... that must not become 32 MiB
    assert isinstance(info.value, WireError)


@pytest.mark.parametrize("method", COMPRESSED)
def test_output_exactly_at_limit_is_fine(method: Compression) -> None:
    parts, end = compress_stream(method, [b"x" * 1000])
    assert decompress_all(method, [b"".join(parts) + end], max_output=1000) == b"x" * 1000


@pytest.mark.parametrize("method", COMPRESSED)
@pytest.mark.parametrize("garbage", [b"\xff" * 32, b"definitely not compressed data"])
def test_corrupt_data(method: Compression, garbage: bytes) -> None:
    with pytest.raises(DecodeError):
        make_decompressor(method).decompress(garbage)


def test_brotli_rejects_data_after_end() -> None:
    parts, end = compress_stream(Compression.BROTLI, [b"x"])
    decompressor = make_decompressor(Compression.BROTLI)
    decompressor.decompress(b"".join(parts) + end)
    with pytest.raises(DecodeError):
        decompressor.decompress(b"more")


@pytest.mark.parametrize("method", COMPRESSED)
def test_compress_after_finish_is_misuse(method: Compression) -> None:
    compressor = make_compressor(CompressionChoice(method))
    compressor.finish()
    with pytest.raises(ValueError, match="already finished"):
        compressor.compress(b"x")
    with pytest.raises(ValueError):
        compressor.finish()


def test_identity_passes_through() -> None:
    compressor = make_compressor(CompressionChoice(Compression.NONE))
    assert compressor.compress(b"abc") == b"abc"
    assert compressor.finish() == b""
    assert make_decompressor(Compression.NONE).decompress(b"abc") == b"abc"


def test_explicit_levels() -> None:
    for method, level in [(Compression.BROTLI, 11), (Compression.ZSTD, -3), (Compression.LZ4, 9)]:
        compressor = make_compressor(CompressionChoice(method, level))
        data = compressor.compress(b"level " * 100) + compressor.finish()
        assert decompress_all(method, [data]) == b"level " * 100


def test_negative_max_output_is_misuse() -> None:
    with pytest.raises(ValueError):
        make_decompressor(Compression.ZSTD, max_output=-1)


@PROPERTY
@given(st.data(), st.sampled_from(METHODS), st.lists(st.binary(max_size=500), max_size=8))
def test_round_trip(data: st.DataObject, method: Compression, events: list[bytes]) -> None:
    """Invariant: each event decodes immediately, and the stream under any chunking."""
    compressor = make_compressor(CompressionChoice(method))
    live = make_decompressor(method)
    parts = []
    for event in events:
        parts.append(compressor.compress(event))
        assert live.decompress(parts[-1]) == event
    stream = b"".join(parts) + compressor.finish()
    assert decompress_all(method, data.draw(chunkings(stream))) == b"".join(events)
