"""UTF-8 boundaries.

Invariants: a cut never splits a character and is the largest such index; chunks rejoin to
the input; the reassembler returns exactly the text, however the bytes are chunked.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airlane.wire.errors import DecodeError, WireError
from airlane.wire.utf8 import Utf8Reassembler, chunk_utf8, utf8_safe_cut

from .chunking import PROPERTY, SPLITTERS, chunkings

# 1, 2, 3 and 4-byte characters.
MIXED = "a\u00e9\u4e16\U0001f600".encode()  # 61 | c3 a9 | e4 b8 96 | f0 9f 98 80


@pytest.mark.parametrize(
    ("limit", "cut"),
    [(0, 0), (1, 1), (2, 1), (3, 3), (4, 3), (5, 3), (6, 6), (7, 6), (8, 6), (9, 6), (10, 10)],
)
def test_safe_cut_each_position(limit: int, cut: int) -> None:
    assert utf8_safe_cut(MIXED, limit) == cut


def test_safe_cut_beyond_end_and_negative() -> None:
    assert utf8_safe_cut(MIXED, 100) == len(MIXED)
    assert utf8_safe_cut(b"", 5) == 0
    with pytest.raises(ValueError):
        utf8_safe_cut(MIXED, -1)


def test_safe_cut_counts_bytes_not_code_points() -> None:
    # The seed's mistake: 4 code points are 10 bytes here, so a cut at 4 must not be 4 chars.
    text = "\u00e9\u00e9\u00e9\u00e9\u00e9"
    data = text.encode()
    assert utf8_safe_cut(data, 4) == 4
    assert utf8_safe_cut(data, 5) == 4
    assert data[: utf8_safe_cut(data, 5)].decode() == "\u00e9\u00e9"


def test_safe_cut_invalid_input_returns_limit() -> None:
    assert utf8_safe_cut(b"\x80\x80\x80\x80\x80", 3) == 3  # only continuation bytes
    assert utf8_safe_cut(b"ab\x80\x80", 3) == 3  # stray continuation after ASCII
    assert utf8_safe_cut(b"\xc3\xa9\xa9x", 2) == 2  # a boundary already
    assert utf8_safe_cut(b"\xc3\xa9\xa9x", 3) == 3  # extra continuation byte


def test_chunk_utf8() -> None:
    assert list(chunk_utf8(MIXED, 4)) == [b"a\xc3\xa9", b"\xe4\xb8\x96", b"\xf0\x9f\x98\x80"]
    assert list(chunk_utf8(b"", 4)) == []
    assert list(chunk_utf8(b"abcdefghij", 4)) == [b"abcd", b"efgh", b"ij"]
    with pytest.raises(ValueError):
        list(chunk_utf8(MIXED, 3))


@PROPERTY
@given(st.text(), st.integers(0, 64))
def test_safe_cut_is_largest_boundary(text: str, limit: int) -> None:
    """Invariant: the cut decodes, is <= limit, and no larger index <= limit decodes."""
    data = text.encode()
    cut = utf8_safe_cut(data, limit)
    assert cut <= min(limit, len(data))
    data[:cut].decode()
    for larger in range(cut + 1, min(limit, len(data)) + 1):
        with pytest.raises(UnicodeDecodeError):
            data[:larger].decode()


@PROPERTY
@given(st.text(), st.integers(4, 20))
def test_chunks_decode_and_rejoin(text: str, size: int) -> None:
    """Invariant: every chunk fits, decodes alone, and the chunks rejoin to the text."""
    chunks = list(chunk_utf8(text.encode(), size))
    assert all(0 < len(chunk) <= size for chunk in chunks)
    assert "".join(chunk.decode() for chunk in chunks) == text


# -- reassembler ---------------------------------------------------------------------------

TEXTS = {"ascii": "hello", "mixed": MIXED.decode(), "empty": "", "emoji": "\U0001f600" * 3}


@pytest.mark.parametrize("split", SPLITTERS.values(), ids=SPLITTERS.keys())
@pytest.mark.parametrize("text", TEXTS.values(), ids=TEXTS.keys())
def test_reassembler_fixture(text: str, split: Callable[[bytes], list[bytes]]) -> None:
    reassembler = Utf8Reassembler()
    pieces = [reassembler.feed(chunk) for chunk in split(text.encode())]
    assert "".join(pieces) + reassembler.flush() == text


@pytest.mark.parametrize("text", TEXTS.values(), ids=TEXTS.keys())
def test_reassembler_holds_back_partial_character(text: str) -> None:
    reassembler = Utf8Reassembler()
    assert reassembler.feed(text.encode() + b"\xf0\x9f") == text
    assert reassembler.pending == 2
    assert reassembler.feed(b"\x98\x80") == "\U0001f600"
    assert reassembler.pending == 0


def test_reassembler_rejects_invalid_utf8() -> None:
    reassembler = Utf8Reassembler()
    with pytest.raises(DecodeError, match="invalid UTF-8") as info:
        reassembler.feed(b"ok\xff")
    assert isinstance(info.value, WireError)
    assert reassembler.feed(b"fine") == "fine"  # reset after the error


def test_reassembler_flush_rejects_truncated_character() -> None:
    reassembler = Utf8Reassembler()
    assert reassembler.feed(b"a\xe4\xb8") == "a"
    with pytest.raises(DecodeError):
        reassembler.flush()
    assert reassembler.pending == 0


@PROPERTY
@given(st.data(), st.text())
def test_reassembler_round_trip(data: st.DataObject, text: str) -> None:
    """Invariant: the concatenated output equals the text under any chunking."""
    reassembler = Utf8Reassembler()
    chunks = data.draw(chunkings(text.encode()))
    assert "".join(reassembler.feed(chunk) for chunk in chunks) + reassembler.flush() == text
