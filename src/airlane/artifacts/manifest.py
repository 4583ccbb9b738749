"""The manifest of one artifact version: what its files are and how to check every byte.

An artifact version is a set of files (one safetensors file, or the shards of a plan, plus
anything else). Its manifest lists, per file, the content-defined chunks (offset, size) with
two checksums each:

- ``xxh3``: XXH3-128 of the chunk, the strong and fast hash that decides whether a chunk
  must be fetched (a delta reuses every chunk whose hash the receiver already holds) and
  whether a fetched chunk counts;
- ``adler32``: Adler-32 of each 1 KiB piece of the chunk, the seed's scheme, kept for
  receivers that only do Adler-32 and to point at the corrupt KiB (base64 of big-endian u32s).

Then a SHA-256 per file, and the artifact's SHA-256 (``sha256``: its identity; a delta is
pinned to it): the SHA-256 of the lines ``<file sha256>  <path>\n`` in manifest order, which
is what ``sha256sum <files> | sha256sum`` prints when run in the version's directory. It
commits to every byte (through the per-file hashes) while letting each file be hashed on its
own, in parallel or while it downloads. The tensors of the safetensors files (name,
dtype, shape, absolute byte range), free-form metadata (quantization scheme, shard plan), and
an optional Ed25519 signature over `Manifest.canonical_bytes` (every field but the signature,
as JSON with sorted keys).

Chunks never straddle a tensor: in a safetensors file, cut points are forced at the start of
the data section and of every tensor, so a changed tensor leaves its neighbours' chunks alone.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson
import xxhash

from airlane.artifacts.checksums import adler32_pieces, pack_adler, unpack_adler
from airlane.artifacts.chunker import ALGORITHM, ChunkParams, cut_points
from airlane.artifacts.errors import MalformedArtifact, VerificationError
from airlane.artifacts.tensorfile import Header, parse_header

__all__ = [
    "FORMAT",
    "Chunk",
    "FileEntry",
    "Manifest",
    "artifact_digest",
    "build_manifest",
    "check_relative_path",
    "verify_file",
]

FORMAT = "airlane.artifact/1"
"""The manifest format this module reads and writes."""

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_HEX32 = re.compile(r"[0-9a-f]{32}")
_READ_BLOCK = 8 * 1024 * 1024
_PER_FILE_METADATA = frozenset({"airlane.shard"})
"""Safetensors metadata keys that describe one file, not kept in the manifest's metadata."""
_SPAN_BYTES = 8 * 1024 * 1024
"""Smallest span chunked as one job (smaller tensors are grouped)."""


@dataclass(frozen=True, slots=True)
class Chunk:
    """One content-defined chunk of a file."""

    offset: int
    size: int
    xxh3: str
    """XXH3-128 of the chunk's bytes, hex."""
    adler32: str
    """Adler-32 of each 1 KiB piece, base64 of big-endian u32s (`checksums.pack_adler`)."""

    @property
    def end(self) -> int:
        """The offset just past the chunk."""
        return self.offset + self.size

    def matches(self, data: bytes | memoryview) -> bool:
        """Whether ``data`` is this chunk (size and XXH3; the Adler list is not needed)."""
        return len(data) == self.size and xxhash.xxh3_128_hexdigest(data) == self.xxh3

    def bad_pieces(self, data: bytes | memoryview) -> list[int]:
        """The 1 KiB pieces of ``data`` whose Adler-32 differs from the manifest's."""
        expected = unpack_adler(self.adler32)
        got = adler32_pieces(data)
        if len(got) != len(expected):
            return list(range(max(len(got), len(expected))))
        return [int(i) for i in np.flatnonzero(got != expected)]


@dataclass(frozen=True, slots=True)
class FileEntry:
    """One file of an artifact version: its size, SHA-256 and chunks (which tile it)."""

    path: str
    size: int
    sha256: str
    chunks: tuple[Chunk, ...]


@dataclass(frozen=True, slots=True)
class Manifest:
    """An artifact version: files, chunks, checksums, tensors, metadata, signature."""

    name: str
    version: str
    files: tuple[FileEntry, ...]
    sha256: str
    """The artifact's SHA-256: `artifact_digest` of its files."""
    chunking: dict[str, Any] = field(default_factory=dict)
    tensors: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Tensor name -> ``{"file", "dtype", "shape", "offsets": [start, end]}`` (absolute)."""
    metadata: dict[str, str] = field(default_factory=dict)
    signature: dict[str, str] | None = None

    @property
    def size(self) -> int:
        """Bytes in all files."""
        return sum(entry.size for entry in self.files)

    @property
    def chunk_count(self) -> int:
        """Chunks in all files."""
        return sum(len(entry.chunks) for entry in self.files)

    def file(self, path: str) -> FileEntry:
        """The entry of ``path``; `MalformedArtifact` when there is none."""
        for entry in self.files:
            if entry.path == path:
                return entry
        raise MalformedArtifact(f"{self.name} {self.version} has no file {path!r}")

    def to_json(self) -> dict[str, Any]:
        """The manifest as JSON-ready data (what ``manifest.json`` holds)."""
        body: dict[str, Any] = {
            "format": FORMAT,
            "name": self.name,
            "version": self.version,
            "sha256": self.sha256,
            "size": self.size,
            "chunking": self.chunking,
            "files": [
                {
                    "path": entry.path,
                    "size": entry.size,
                    "sha256": entry.sha256,
                    "chunks": [[c.offset, c.size, c.xxh3, c.adler32] for c in entry.chunks],
                }
                for entry in self.files
            ],
            "tensors": self.tensors,
            "metadata": self.metadata,
        }
        if self.signature is not None:
            body["signature"] = self.signature
        return body

    def to_bytes(self) -> bytes:
        """``manifest.json``'s bytes (indented for people; chunk rows stay one per line)."""
        return orjson.dumps(self.to_json(), option=orjson.OPT_INDENT_2) + b"\n"

    def canonical_bytes(self) -> bytes:
        """What a signature covers: every field but the signature, sorted keys, compact."""
        body = self.to_json()
        body.pop("signature", None)
        return orjson.dumps(body, option=orjson.OPT_SORT_KEYS)

    def signed(self, signature: dict[str, str]) -> Manifest:
        """This manifest with ``signature`` attached."""
        return replace(self, signature=dict(signature))

    @classmethod
    def from_bytes(cls, data: bytes) -> Manifest:
        """Parse ``manifest.json``; `MalformedArtifact` says what is wrong."""
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise MalformedArtifact(f"manifest is not JSON: {exc}") from None
        return cls.from_json(obj)

    @classmethod
    def from_json(cls, obj: Any) -> Manifest:
        """Validate and build a manifest from parsed JSON."""
        return _parse_manifest(obj)


def artifact_digest(files: Iterable[tuple[str, str]]) -> str:
    """The artifact SHA-256 of ``(path, file sha256)`` pairs in manifest order: the SHA-256 of
    ``sha256sum``'s output for those files."""
    listing = hashlib.sha256()
    for path, digest in files:
        listing.update(f"{digest}  {path}\n".encode())
    return listing.hexdigest()


def check_relative_path(path: str) -> str:
    """``path`` if it is a safe relative POSIX path (no ``..``, not absolute, no empty
    parts); manifests come from the network, and their paths become file names."""
    if (
        not isinstance(path, str)
        or len(path) > 512
        or "\\" in path
        or "\x00" in path
        or any(part in ("", ".", "..") for part in path.split("/"))
    ):
        raise MalformedArtifact(f"file path {str(path)[:80]!r} is not a safe relative path")
    return path


def build_manifest(
    root: Path,
    files: Sequence[str],
    *,
    name: str,
    version: str,
    params: ChunkParams | None = None,
    metadata: Mapping[str, str] | None = None,
) -> Manifest:
    """Read ``files`` (relative to ``root``), chunk and hash them into a manifest.

    Safetensors files (by their ``.safetensors`` suffix) are chunked tensor-aware and their
    tensors listed; their ``__metadata__`` is merged into the manifest's metadata (but for
    keys that describe one file: a shard's ``airlane.shard``).
    """
    _check_name("name", name)
    _check_name("version", version)
    params = params or ChunkParams()
    entries: list[FileEntry] = []
    tensors: dict[str, dict[str, Any]] = {}
    merged_metadata: dict[str, str] = {}
    for relative in files:
        check_relative_path(relative)
        with _mapped(root / relative) as data:
            header = None
            boundaries: list[int] = []
            if relative.endswith(".safetensors"):
                header = parse_header(
                    bytes(data[: min(len(data), 8 + 100 * 1024 * 1024)]), len(data)
                )
                boundaries = _tensor_boundaries(header)
                # What describes one shard stays in that shard; what describes the artifact
                # (the quantization scheme, say) is the same in every file.
                merged_metadata.update(
                    (k, v) for k, v in header.metadata.items() if k not in _PER_FILE_METADATA
                )
                for info in header.tensors:
                    key = info.name if info.name not in tensors else f"{relative}:{info.name}"
                    start = header.data_offset + info.start
                    tensors[key] = {
                        "file": relative,
                        "dtype": info.dtype,
                        "shape": list(info.shape),
                        "offsets": [start, start + info.nbytes],
                    }
            entries.append(_file_entry(relative, data, params, boundaries))
    merged_metadata.update(metadata or {})
    return Manifest(
        name=name,
        version=version,
        files=tuple(entries),
        sha256=artifact_digest((entry.path, entry.sha256) for entry in entries),
        chunking={"algorithm": ALGORITHM, **params.to_json(), "adler_piece": 1024},
        tensors=tensors,
        metadata=merged_metadata,
    )


def verify_file(path: Path, entry: FileEntry) -> list[int]:
    """Indexes of ``entry``'s chunks that ``path`` does not hold (all of them past its end).

    `VerificationError` when the file's size differs from the manifest's.
    """
    with _mapped(path) as data:
        if len(data) != entry.size:
            raise VerificationError(
                f"{entry.path}: {len(data)} bytes on disk, the manifest says {entry.size}"
            )
        return [
            i
            for i, chunk in enumerate(entry.chunks)
            if not chunk.matches(data[chunk.offset : chunk.end])
        ]


def _tensor_boundaries(header: Header) -> list[int]:
    """Forced cut points: the data section's start and every tensor's start."""
    points = {header.data_offset}
    points.update(header.data_offset + info.start for info in header.tensors)
    return sorted(p for p in points if 0 < p < header.file_size)


def _file_entry(
    relative: str, data: memoryview, params: ChunkParams, boundaries: list[int]
) -> FileEntry:
    """Chunk and hash one file, in parallel where it can be split.

    Chunking restarts at every forced boundary (a tensor's start), so the spans between
    boundaries are chunked independently, on all cores (numpy, XXH3, zlib and hashlib release
    the GIL on large buffers), beside one thread doing the file's SHA-256. The result is the
    same as chunking the file in one go.
    """
    array = np.frombuffer(data, dtype=np.uint8) if len(data) else np.zeros(0, np.uint8)
    with ThreadPoolExecutor(os.cpu_count() or 1, thread_name_prefix="airlane-pack") as pool:
        sha = pool.submit(_sha256, data)
        jobs = [
            pool.submit(_chunk_span, data, array, start, end, inner, params)
            for start, end, inner in _spans(len(data), boundaries)
        ]
        chunks = [chunk for job in jobs for chunk in job.result()]
        digest = sha.result()
    return FileEntry(relative, len(data), digest, tuple(chunks))


def _spans(size: int, boundaries: list[int]) -> list[tuple[int, int, list[int]]]:
    """Contiguous spans of at least ``_SPAN_BYTES`` (one per run of small tensors) that each
    start at a forced boundary, with the boundaries inside each."""
    spans: list[tuple[int, int, list[int]]] = []
    start = 0
    inner: list[int] = []
    for point in [*boundaries, size]:
        if point - start >= _SPAN_BYTES or point == size:
            spans.append((start, point, [b - start for b in inner]))
            start, inner = point, []
        else:
            inner.append(point)
    return [span for span in spans if span[1] > span[0]] or [(0, size, [])]


def _chunk_span(
    data: memoryview,
    array: npt.NDArray[np.uint8],
    start: int,
    end: int,
    inner: list[int],
    params: ChunkParams,
) -> list[Chunk]:
    chunks = []
    offset = start
    for cut in cut_points(array[start:end], params, inner):
        piece = data[offset : start + cut]
        chunks.append(
            Chunk(
                offset,
                len(piece),
                xxhash.xxh3_128_hexdigest(piece),
                pack_adler(adler32_pieces(piece)),
            )
        )
        offset = start + cut
    return chunks


def _sha256(data: memoryview) -> str:
    own = hashlib.sha256()
    for start in range(0, len(data), _READ_BLOCK):
        own.update(data[start : start + _READ_BLOCK])
    return own.hexdigest()


@contextmanager
def _mapped(path: Path) -> Iterator[memoryview]:
    """A read-only view of a whole file (mmap; an empty file is an empty view)."""
    with path.open("rb") as fh:
        size = fh.seek(0, 2)
        if size == 0:
            yield memoryview(b"")
            return
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            view = memoryview(mapped)
            try:
                yield view
            finally:
                view.release()


def _check_name(what: str, value: Any) -> str:
    if not isinstance(value, str) or not _NAME.fullmatch(value):
        raise MalformedArtifact(
            f"artifact {what} {str(value)[:80]!r} must be 1-128 of A-Z a-z 0-9 . _ - "
            "and start with a letter or digit"
        )
    return value


def _parse_manifest(obj: Any) -> Manifest:
    if not isinstance(obj, dict):
        raise MalformedArtifact("manifest must be a JSON object")
    if obj.get("format") != FORMAT:
        raise MalformedArtifact(f"manifest format {obj.get('format')!r} is not {FORMAT!r}")
    name = _check_name("name", obj.get("name"))
    version = _check_name("version", obj.get("version"))
    sha256 = obj.get("sha256")
    if not isinstance(sha256, str) or not _HEX64.fullmatch(sha256):
        raise MalformedArtifact("manifest sha256 must be 64 lowercase hex digits")
    raw_files = obj.get("files")
    if not isinstance(raw_files, list):
        raise MalformedArtifact("manifest 'files' must be a list")
    files = tuple(_parse_file(item) for item in raw_files)
    if len({entry.path for entry in files}) != len(files):
        raise MalformedArtifact("manifest lists a file twice")
    if artifact_digest((entry.path, entry.sha256) for entry in files) != sha256:
        raise MalformedArtifact("manifest sha256 is not the digest of its files' SHA-256s")
    chunking = obj.get("chunking", {})
    tensors = obj.get("tensors", {})
    metadata = obj.get("metadata", {})
    if not isinstance(chunking, dict) or not isinstance(tensors, dict):
        raise MalformedArtifact("manifest 'chunking' and 'tensors' must be objects")
    if not isinstance(metadata, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise MalformedArtifact("manifest 'metadata' must map strings to strings")
    signature = obj.get("signature")
    if signature is not None and not (
        isinstance(signature, dict) and all(isinstance(v, str) for v in signature.values())
    ):
        raise MalformedArtifact("manifest 'signature' must be an object of strings")
    return Manifest(name, version, files, sha256, chunking, tensors, metadata, signature)


def _parse_file(item: Any) -> FileEntry:
    if not isinstance(item, dict):
        raise MalformedArtifact("a manifest file entry must be an object")
    path = item.get("path")
    if not isinstance(path, str):
        raise MalformedArtifact("a manifest file entry needs a 'path'")
    check_relative_path(path)
    if path == "manifest.json":
        raise MalformedArtifact("'manifest.json' is the manifest's own name, not a file's")
    size, sha256, raw_chunks = item.get("size"), item.get("sha256"), item.get("chunks")
    if not _is_count(size):
        raise MalformedArtifact(f"{path}: 'size' must be a non-negative integer")
    if not isinstance(sha256, str) or not _HEX64.fullmatch(sha256):
        raise MalformedArtifact(f"{path}: 'sha256' must be 64 lowercase hex digits")
    if not isinstance(raw_chunks, list):
        raise MalformedArtifact(f"{path}: 'chunks' must be a list")
    chunks = []
    offset = 0
    for row in raw_chunks:
        if (
            not isinstance(row, list)
            or len(row) != 4
            or not _is_count(row[0])
            or not _is_count(row[1])
            or not isinstance(row[2], str)
            or not _HEX32.fullmatch(row[2])
            or not isinstance(row[3], str)
        ):
            raise MalformedArtifact(f"{path}: a chunk must be [offset, size, xxh3, adler32]")
        if row[0] != offset or row[1] == 0:
            raise MalformedArtifact(
                f"{path}: chunks must tile the file (gap or overlap at {offset})"
            )
        expected_pieces = -(-row[1] // 1024)
        if len(unpack_adler(row[3])) != expected_pieces:
            raise MalformedArtifact(f"{path}: chunk at {offset} has the wrong Adler-32 count")
        chunks.append(Chunk(row[0], row[1], row[2], row[3]))
        offset += row[1]
    if offset != size:
        raise MalformedArtifact(f"{path}: chunks cover {offset} bytes of {size}")
    return FileEntry(path, size, sha256, tuple(chunks))


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
