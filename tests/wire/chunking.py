"""Ways to cut a byte stream into chunks, shared by the decoder tests.

Every decoder must give the same result however its input is split (STYLE.md section 7):
whole, one byte at a time, or at arbitrary points chosen by hypothesis.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from hypothesis import settings
from hypothesis import strategies as st

# Property tests stay modest so that the whole wire suite runs in seconds.
PROPERTY = settings(max_examples=200, deadline=None)


def whole(data: bytes) -> list[bytes]:
    """The stream as one chunk."""
    return [data]


def bytewise(data: bytes) -> list[bytes]:
    """The stream one byte at a time."""
    return [data[i : i + 1] for i in range(len(data))]


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    """The stream cut at the given offsets (any order, duplicates give empty chunks)."""
    bounds = [0, *sorted(cuts), len(data)]
    return [data[start:end] for start, end in itertools.pairwise(bounds)]


SPLITTERS: dict[str, Callable[[bytes], list[bytes]]] = {
    "whole": whole,
    "bytewise": bytewise,
    "halves": lambda data: split_at(data, [len(data) // 2]),
}


def chunkings(data: bytes) -> st.SearchStrategy[list[bytes]]:
    """Strategy: ``data`` cut at up to 20 arbitrary points."""
    return st.lists(st.integers(0, len(data)), max_size=20).map(lambda cuts: split_at(data, cuts))
