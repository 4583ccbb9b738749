"""airlane.artifacts.checksums: per-KiB Adler-32 lists and xxh3 digests.

Invariant: `adler32_pieces` equals zlib.adler32 of each piece, for every length (empty too),
and `unpack_adler(pack_adler(x)) == x`; anything else given to `unpack_adler` is refused
with `MalformedArtifact`.
"""

from __future__ import annotations

import base64
import zlib

import numpy as np
import pytest
import xxhash
from hypothesis import given
from hypothesis import strategies as st

from airlane.artifacts.checksums import (
    ADLER_PIECE,
    adler32_pieces,
    pack_adler,
    unpack_adler,
    xxh3_hex,
)
from airlane.artifacts.errors import MalformedArtifact


def pieces_of(data: bytes, piece: int) -> list[int]:
    return [zlib.adler32(data[i : i + piece]) for i in range(0, len(data), piece)]


@given(st.binary(max_size=5000), st.sampled_from([1, 7, 64, 1000, ADLER_PIECE]))
def test_adler_pieces_match_zlib(data: bytes, piece: int) -> None:
    sums = adler32_pieces(data, piece)
    assert sums.dtype == np.uint32
    assert sums.tolist() == pieces_of(data, piece)


def test_adler_of_nothing_is_empty() -> None:
    assert adler32_pieces(b"").shape == (0,)


def test_adler_reads_arrays_and_memoryviews() -> None:
    data = bytes(range(256)) * 9
    expected = pieces_of(data, ADLER_PIECE)
    assert adler32_pieces(np.frombuffer(data, dtype=np.uint8)).tolist() == expected
    assert adler32_pieces(memoryview(data)).tolist() == expected
    # A non-byte array is read as its bytes, not cast element by element.
    floats = np.arange(600, dtype=np.float32)
    assert adler32_pieces(floats).tolist() == pieces_of(floats.tobytes(), ADLER_PIECE)


def test_worst_case_bytes_do_not_overflow() -> None:
    data = b"\xff" * (ADLER_PIECE * 3 + 5)
    assert adler32_pieces(data).tolist() == pieces_of(data, ADLER_PIECE)


def test_piece_must_be_positive() -> None:
    with pytest.raises(ValueError):
        adler32_pieces(b"abc", 0)


def test_xxh3_hex() -> None:
    data = b"airlane" * 100
    assert xxh3_hex(data) == xxhash.xxh3_128_hexdigest(data)
    assert xxh3_hex(np.frombuffer(data, dtype=np.uint8)) == xxh3_hex(data)
    assert len(xxh3_hex(b"")) == 32


@given(st.lists(st.integers(0, 2**32 - 1), max_size=200))
def test_pack_round_trip(values: list[int]) -> None:
    sums = np.array(values, dtype=np.uint32)
    text = pack_adler(sums)
    assert isinstance(text, str)
    assert unpack_adler(text).tolist() == values


def test_pack_is_big_endian_base64() -> None:
    assert base64.b64decode(pack_adler(np.array([1, 0x01020304], dtype=np.uint32))) == (
        b"\x00\x00\x00\x01\x01\x02\x03\x04"
    )


@pytest.mark.parametrize("text", ["not base64!", "AAAAAAA=", "AAA", "é", "AAAA\n"])
def test_unpack_refuses_malformed_text(text: str) -> None:
    with pytest.raises(MalformedArtifact):
        unpack_adler(text)


def test_unpack_refuses_non_text() -> None:
    with pytest.raises(MalformedArtifact):
        unpack_adler(b"AAAA")  # type: ignore[arg-type]
