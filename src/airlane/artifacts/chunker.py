"""Content-defined chunking: FastCDC cut points from a gear hash, computed with numpy.

Cutting a file where its *content* says so, rather than every N bytes, keeps chunks stable
when bytes are inserted or removed: only the chunks around the edit change, and everything
after it is cut at the same places as before, so a new model version shares most of its
chunks with the old one. The rules are FastCDC's (Xia et al., "FastCDC: a Fast and Efficient
Content-Defined Chunking Approach for Data Deduplication", USENIX ATC 2016):

* The gear hash of byte ``i`` is ``h_i = (h_{i-1} << 1) + GEAR[b_i] mod 2**64``. Each step
  shifts older bytes one bit further left, so a byte's influence leaves the word after 64
  steps: ``h_i = sum_{j<64} GEAR[b_{i-j}] << j``, a function of the 64 bytes ending at ``i``
  and of nothing else.
* A chunk starting at ``s`` never ends before ``s + min_size`` (the skip). It ends after byte
  ``i`` (at offset ``e = i + 1``) at the first ``e`` in ``[s + min_size, s + avg_size)`` where
  the top ``log2(avg) + 2`` bits of ``h_i`` are zero, else at the first ``e`` in
  ``[s + avg_size, s + max_size)`` where the top ``log2(avg) - 2`` bits are zero, else at
  ``s + max_size``: normalized chunking, level 2 (paper, section 3.3), which pulls chunk sizes
  towards ``avg_size``. The masks are the *top* bits because bit ``k`` of a gear hash depends
  on the last ``k + 1`` bytes only; the top bits see (nearly) the whole window.
* Forced boundaries (where a tensor starts in a safetensors file, so no chunk straddles two
  tensors) split the data into segments, each chunked on its own; a segment's last chunk may
  be shorter than ``min_size``.

The hash rule is position-free: the hash at ``i`` is that of the 64 bytes ending at ``i`` in
the whole stream, wherever chunks or segments start. Because ``min_size >= 64``, every
position a chunk may end at lies at least 64 bytes into its chunk, so that window never
reaches back past the chunk's start: the result is the same as restarting the hash at every
chunk, which is what a byte-at-a-time implementation does (the tests keep one).

Speed comes from computing the hash for every position at once. Doubling the window,
``H_2w(i) = H_w(i) + (H_w(i - w) << w)``, takes a table lookup of byte pairs (``H_2``) and
five shift-and-add passes to reach ``H_64``. That runs over blocks of `BLOCK_SIZE` bytes, each
reading 63 bytes back into the previous block so the hash matches the sequential definition;
a block's candidate positions (where the top bits are zero) are a few per chunk, and a Python
loop over *chunks* picks the cut points among them with ``np.searchsorted``. Memory stays
bounded by the block, whatever the input's size (a ``np.memmap`` works).

`ALGORITHM` names the gear table and these rules together: changing either changes every
chunk boundary, so it is recorded in manifests next to the sizes (`ChunkParams.to_json`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from airlane.artifacts.errors import ArtifactError, MalformedArtifact

__all__ = [
    "ALGORITHM",
    "BLOCK_SIZE",
    "DEFAULT_AVG_SIZE",
    "DEFAULT_MAX_SIZE",
    "DEFAULT_MIN_SIZE",
    "GEAR",
    "WINDOW",
    "ChunkParams",
    "chunk_spans",
    "cut_points",
]

ALGORITHM: Final = "fastcdc-gear64/1"
"""The identity of the gear table and the cut rules."""
WINDOW: Final = 64
"""Bytes a gear hash depends on (one per bit of the 64-bit word)."""
NORMALIZATION: Final = 2
"""FastCDC's normalization level: extra mask bits before ``avg_size``, fewer after."""

DEFAULT_MIN_SIZE: Final = 16 * 1024
DEFAULT_AVG_SIZE: Final = 64 * 1024
"""64 KiB chunks: a 1 GB model is ~16 000 chunks, a manifest of about a megabyte, while a
fine-tune that touches a few tensors still shares most chunks with its base."""
DEFAULT_MAX_SIZE: Final = 256 * 1024
_LARGEST_MAX_SIZE: Final = 1 << 30
"""No chunk over 1 GiB: a chunk is held in memory whole when it is hashed or sent."""

BLOCK_SIZE: Final = 128 * 1024
"""Bytes hashed per vectorised pass. Measured on 64 MiB: 128 KiB-512 KiB blocks are fastest,
since the two uint64 work arrays (8 bytes per input byte each) stay in cache; 4 MiB blocks
ran at a quarter of the speed."""


def _gear_table() -> npt.NDArray[np.uint64]:
    """256 pseudo-random words: the first 8 bytes (little endian) of SHA-256 of a label."""
    labels = (f"airlane {ALGORITHM} gear {k}".encode() for k in range(256))
    words = [int.from_bytes(hashlib.sha256(label).digest()[:8], "little") for label in labels]
    return np.array(words, dtype=np.uint64)


GEAR: Final = _gear_table()
"""The gear table (read-only); part of `ALGORITHM`."""
GEAR.setflags(write=False)

# H_2 for a byte pair read as a little-endian u16 ``prev | cur << 8``:
# GEAR[cur] + (GEAR[prev] << 1). One lookup replaces the first doubling pass.
_pairs = np.arange(1 << 16)
_GEAR_PAIRS: Final = GEAR[_pairs >> 8] + (GEAR[_pairs & 0xFF] << np.uint64(1))
del _pairs


@dataclass(frozen=True, slots=True)
class ChunkParams:
    """Chunk size limits. Chunk boundaries depend on all three, and on `ALGORITHM`."""

    min_size: int = DEFAULT_MIN_SIZE
    """No chunk is shorter, except the last of a segment. At least `WINDOW` bytes."""
    avg_size: int = DEFAULT_AVG_SIZE
    """The size chunks gather around; a power of two between the other two."""
    max_size: int = DEFAULT_MAX_SIZE
    """No chunk is longer: one is cut here if the content offers no boundary."""

    def __post_init__(self) -> None:
        for name in ("min_size", "avg_size", "max_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ArtifactError(f"chunk {name} must be an integer, got {value!r}")
        if not WINDOW <= self.min_size < self.avg_size < self.max_size <= _LARGEST_MAX_SIZE:
            raise ArtifactError(
                f"chunk sizes must satisfy {WINDOW} <= min < avg < max <= 2**30, got "
                f"min={self.min_size} avg={self.avg_size} max={self.max_size}"
            )
        if self.avg_size & (self.avg_size - 1):
            raise ArtifactError(f"chunk avg_size must be a power of two, got {self.avg_size}")

    @property
    def small_threshold(self) -> int:
        """A hash below this has its top ``log2(avg) + 2`` bits zero (cuts before avg)."""
        return 1 << (64 - (self.avg_size.bit_length() - 1 + NORMALIZATION))

    @property
    def large_threshold(self) -> int:
        """A hash below this has its top ``log2(avg) - 2`` bits zero (cuts after avg)."""
        return 1 << (64 - (self.avg_size.bit_length() - 1 - NORMALIZATION))

    def to_json(self) -> dict[str, Any]:
        """The form manifests record: the algorithm's name and the three sizes."""
        return {
            "algorithm": ALGORITHM,
            "min_size": self.min_size,
            "avg_size": self.avg_size,
            "max_size": self.max_size,
        }

    @classmethod
    def from_json(cls, obj: object) -> ChunkParams:
        """Read `to_json`'s form; raises `MalformedArtifact` if it is not one of ours."""
        if not isinstance(obj, Mapping):
            raise MalformedArtifact(f"chunking must be an object, got {type(obj).__name__}")
        if obj.get("algorithm") != ALGORITHM:
            raise MalformedArtifact(
                f"chunking algorithm {str(obj.get('algorithm'))[:80]!r} is not {ALGORITHM!r}"
            )
        try:
            return cls(obj["min_size"], obj["avg_size"], obj["max_size"])
        except KeyError as exc:
            raise MalformedArtifact(f"chunking is missing {exc.args[0]!r}") from None
        except ArtifactError as exc:
            raise MalformedArtifact(str(exc)) from None


Data = bytes | bytearray | memoryview | npt.NDArray[np.uint8]
"""What can be chunked: bytes, or a 1-D uint8 array (a ``np.memmap`` of a file works)."""


def cut_points(
    data: Data, params: ChunkParams = ChunkParams(), boundaries: Iterable[int] = ()
) -> list[int]:
    """The end offsets of ``data``'s chunks: strictly increasing, the last ``len(data)``
    (none for empty data). Every offset in ``boundaries`` is one of them."""
    array = _as_array(data)
    size = len(array)
    if size == 0:
        _segment_ends(0, boundaries)  # still refuse out-of-range boundaries
        return []
    segment_ends = iter(_segment_ends(size, boundaries))
    segment_end = next(segment_ends)
    small = large = np.empty(0, dtype=np.intp)
    cuts: list[int] = []
    start = 0
    for known, new_small, new_large in _candidate_blocks(array, params):
        small = np.concatenate((small, new_small))
        large = np.concatenate((large, new_large))
        # A cut is decided once every candidate it could land on has been hashed.
        while start < size and min(start + params.max_size, segment_end) <= known:
            start = _next_cut(start, segment_end, small, large, params)
            cuts.append(start)
            if start == segment_end and start < size:
                segment_end = next(segment_ends)
        # Candidates behind the current chunk's start can no longer matter.
        small = small[np.searchsorted(small, start, side="right") :]
        large = large[np.searchsorted(large, start, side="right") :]
    return cuts


def chunk_spans(
    data: Data, params: ChunkParams = ChunkParams(), boundaries: Iterable[int] = ()
) -> list[tuple[int, int]]:
    """``(offset, size)`` of each chunk of ``data``, in order (see `cut_points`)."""
    spans = []
    start = 0
    for end in cut_points(data, params, boundaries):
        spans.append((start, end - start))
        start = end
    return spans


def _as_array(data: Data) -> npt.NDArray[np.uint8]:
    """``data`` as a flat uint8 array, without copying it."""
    if isinstance(data, np.ndarray):
        if data.dtype != np.uint8 or data.ndim != 1:
            raise ArtifactError(f"chunking needs a 1-D uint8 array, got {data.ndim}-D {data.dtype}")
        return data
    return np.frombuffer(memoryview(data).cast("B"), dtype=np.uint8)


def _segment_ends(size: int, boundaries: Iterable[int]) -> list[int]:
    """The sorted ends of the segments forced boundaries split ``size`` bytes into."""
    ends = {size}
    for offset in boundaries:
        if not isinstance(offset, int | np.integer) or isinstance(offset, bool):
            raise ArtifactError(f"a chunk boundary must be an integer, got {offset!r}")
        if not 0 <= offset <= size:
            raise ArtifactError(f"chunk boundary {offset} is outside 0..{size}")
        if offset:
            ends.add(int(offset))
    return sorted(ends)


def _next_cut(
    start: int,
    segment_end: int,
    small: npt.NDArray[np.intp],
    large: npt.NDArray[np.intp],
    params: ChunkParams,
) -> int:
    """Where the chunk starting at ``start`` ends (FastCDC with normalization)."""
    lowest = start + params.min_size
    if lowest >= segment_end:
        return segment_end
    normal = min(start + params.avg_size, segment_end)
    index = int(np.searchsorted(small, lowest))
    if index < len(small) and small[index] < normal:
        return int(small[index])
    highest = min(start + params.max_size, segment_end)
    index = int(np.searchsorted(large, start + params.avg_size))
    if index < len(large) and large[index] < highest:
        return int(large[index])
    return highest


def _candidate_blocks(
    array: npt.NDArray[np.uint8], params: ChunkParams
) -> Iterator[tuple[int, npt.NDArray[np.intp], npt.NDArray[np.intp]]]:
    """Per block: the offset hashed up to, then the chunk end offsets ``e`` in the block
    whose hash (of the byte before ``e``) passes the small mask, and those passing the
    large one. The small candidates are a subset of the large ones."""
    small_threshold = np.uint64(params.small_threshold)
    large_threshold = np.uint64(params.large_threshold)
    overlap = WINDOW - 1
    hashes = np.empty(BLOCK_SIZE + overlap, dtype=np.uint64)
    shifted = np.empty_like(hashes)
    for block_start in range(0, len(array), BLOCK_SIZE):
        first = max(block_start - overlap, 0)
        window = np.ascontiguousarray(array[first : block_start + BLOCK_SIZE])
        block_hashes = _gear_hashes(window, hashes[: len(window)], shifted)
        skip = block_start - first
        found = np.flatnonzero(block_hashes[skip:] < large_threshold)
        small = found[block_hashes[skip:][found] < small_threshold]
        # Candidate index k in the block is byte block_start + k; the chunk ends after it.
        yield block_start + len(window) - skip, small + block_start + 1, found + block_start + 1


def _gear_hashes(
    window: npt.NDArray[np.uint8], out: npt.NDArray[np.uint64], scratch: npt.NDArray[np.uint64]
) -> npt.NDArray[np.uint64]:
    """The gear hash of each byte of ``window`` into ``out``, exact from index 63 on (the
    first 63 see fewer than 64 bytes, as if zero words preceded the window)."""
    size = len(window)
    out[0] = GEAR[window[0]]
    if size > 1:
        # Overlapping little-endian u16 reads: element k is window[k] | window[k + 1] << 8.
        pairs = np.ndarray((size - 1,), dtype="<u2", buffer=window, strides=(1,))
        np.take(_GEAR_PAIRS, pairs, out=out[1:], mode="clip")
    width = 2
    while width < WINDOW:
        if width < size:
            np.left_shift(out[: size - width], np.uint64(width), out=scratch[: size - width])
            np.add(out[width:], scratch[: size - width], out=out[width:])
        width *= 2
    return out
