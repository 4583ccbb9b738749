"""Checksums of artifact bytes: an xxh3-128 digest per chunk and an Adler-32 per KiB piece.

A chunk's xxh3-128 digest names it (two files holding the same bytes share the chunk), and a
run of Adler-32 checksums, one per 1 KiB piece, says *where* inside a damaged chunk the damage
is, so a repair can fetch kilobytes instead of the whole chunk. Neither is a security
measure: the manifest's SHA-256 sums and its Ed25519 signature are (`airlane.artifacts.signing`).

Adler-32 lists travel in manifests as text: `pack_adler` writes them as base64 of big-endian
32-bit words, the byte order zlib itself uses when it appends an Adler-32 to a stream
(RFC 1950, section 2.2), and `unpack_adler` reads them back.
"""

from __future__ import annotations

import base64
import binascii
import zlib
from typing import Final

import numpy as np
import numpy.typing as npt
import xxhash

from airlane.artifacts.errors import MalformedArtifact

__all__ = [
    "ADLER_PIECE",
    "adler32_pieces",
    "pack_adler",
    "unpack_adler",
    "xxh3_hex",
]

ADLER_PIECE: Final = 1024
"""Bytes per Adler-32 piece: small enough to localise damage, large enough that the list
costs under 0.4 % of the chunk it describes (4 bytes per KiB)."""

Buffer = bytes | bytearray | memoryview | npt.NDArray[np.uint8]
"""What the checksum functions read: any contiguous run of bytes."""

_ADLER_DTYPE: Final = np.dtype(">u4")


def _as_view(data: Buffer) -> memoryview:
    """A flat byte view of ``data`` without copying it."""
    if isinstance(data, np.ndarray):
        flat: npt.NDArray[np.uint8] = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        return memoryview(flat.data)
    return memoryview(data).cast("B")


def adler32_pieces(data: Buffer, piece: int = ADLER_PIECE) -> npt.NDArray[np.uint32]:
    """The zlib Adler-32 of each consecutive ``piece``-byte piece of ``data`` (the last may be
    shorter); an empty array for empty data.

    This calls `zlib.adler32` once per piece. A numpy version (the sums A = 1 + sum b and
    B = L + sum (L - i) * b_i as one float32 matrix product, weights split in two so every
    partial sum stays exact below 2**24) was measured against it on 64 MiB of random bytes:
    the loop ran at 1150 MB/s, the best matrix product at 920 MB/s (int64 ``@``: 73 MB/s), so
    the loop stays: zlib's C code is fast enough that one call per KiB is cheap.
    """
    if piece <= 0:
        raise ValueError(f"piece must be positive, got {piece}")
    view = _as_view(data)
    adler = zlib.adler32
    sums = [adler(view[start : start + piece]) for start in range(0, len(view), piece)]
    return np.array(sums, dtype=np.uint32)


def xxh3_hex(data: Buffer) -> str:
    """The xxh3-128 digest of ``data`` as 32 lowercase hex digits."""
    return xxhash.xxh3_128_hexdigest(_as_view(data))


def pack_adler(sums: npt.NDArray[np.uint32]) -> str:
    """Adler-32 sums as base64 text of big-endian 32-bit words (the manifest's form)."""
    return base64.b64encode(np.asarray(sums, dtype=_ADLER_DTYPE).tobytes()).decode("ascii")


def unpack_adler(text: str) -> npt.NDArray[np.uint32]:
    """Read `pack_adler`'s text back; raises `MalformedArtifact` if it is not that form."""
    if not isinstance(text, str):
        raise MalformedArtifact(f"adler32 list must be a base64 string, got {type(text).__name__}")
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error):
        raise MalformedArtifact(f"adler32 list is not valid base64: {text[:40]!r}") from None
    if len(raw) % 4:
        raise MalformedArtifact(f"adler32 list holds {len(raw)} bytes, not a multiple of 4")
    return np.frombuffer(raw, dtype=_ADLER_DTYPE).astype(np.uint32)
