"""Deltas between two versions of an artifact: only the chunks the base lacks travel.

A new version shares most of its content-defined chunks with the one before it (see
`airlane.artifacts.chunker`), wherever they moved. `plan_delta` finds, for each chunk of the
target, a base file and offset holding the same bytes (same XXH3-128 and size); a delta file
carries the target's manifest and the bytes of every other chunk, once each, and
`apply_delta` rebuilds the target from the base plus the delta.

**The float-weights trick.** A fine-tune changes every value of a trained tensor a little, so
its chunks are all new, but its bytes are mostly the same as the base's: sign, exponent and
the top of the mantissa rarely move. When a new chunk lies inside a tensor that the base also
has (same name, dtype and shape), the delta may carry ``zstd(chunk XOR base bytes at the same
place in that tensor)`` instead of ``zstd(chunk)``; the XOR is mostly zero bits and
compresses far better. Each chunk gets whichever encoding is smaller.

**File format** (``.airdelta``; integers little endian)::

    magic    8 bytes   b"AIRDELTA"
    version  u8        1
    length   u32       bytes of the header as stored
    header   zstd(JSON) {"base":    {"name", "version", "sha256"},   the base it applies to
                        "target":  <the target's manifest JSON>,
                        "entries": [{"xxh3", "encoding", "length", "ref"?}, ...]}
    payloads           one per entry, in order, ``length`` bytes each; nothing follows

``encoding`` is ``"zstd"`` (the chunk, zstd-compressed) or ``"xor-zstd"`` (the chunk XOR the
``size`` base bytes at ``ref = {"file", "offset"}``, zstd-compressed). Every zstd frame states
its content size, which must be the chunk's.

**Trust.** A delta is pinned to its base by the base's artifact SHA-256 (the digest of its
files' SHA-256s, `manifest.artifact_digest`): `apply_delta` refuses any other base, checking
both the manifest it is given and the bytes on disk, with `DeltaBaseMismatch`. Every rebuilt
chunk is checked against the target manifest's XXH3, every file against its SHA-256 and
their digest against the target's SHA-256 (`VerificationError`); the files appear under their
names only when all of that holds. The target manifest's own signature, if any, is the
caller's to check (`signing.verify_bytes`).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
import tempfile
from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any, Final, TypeGuard

import numpy as np
import orjson
import zstandard

from airlane.artifacts.errors import (
    ArtifactError,
    DeltaBaseMismatch,
    MalformedArtifact,
    VerificationError,
)
from airlane.artifacts.manifest import (
    Chunk,
    FileEntry,
    Manifest,
    artifact_digest,
    check_relative_path,
)

__all__ = [
    "DEFAULT_ZSTD_LEVEL",
    "ENCODINGS",
    "FORMAT_VERSION",
    "MAGIC",
    "MAX_HEADER_BYTES",
    "DeltaEntry",
    "DeltaStats",
    "apply_delta",
    "plan_delta",
    "read_delta_header",
    "write_delta",
]

MAGIC: Final = b"AIRDELTA"
FORMAT_VERSION: Final = 1
MAX_HEADER_BYTES: Final = 256 * 1024 * 1024
"""The header holds the target manifest, about 100 bytes per chunk: 256 MiB is a manifest of
some 2.5 million chunks (160 TB at 64 KiB), far past any model, and still fits in memory."""
ENCODINGS: Final = ("zstd", "xor-zstd")
DEFAULT_ZSTD_LEVEL: Final = 3
"""zstd's own default: float weights barely compress past it, and higher levels cost time."""

_PREFIX: Final = struct.Struct("<8sBI")
_COPY_BUFFER: Final = 1024 * 1024
_HEX32_DIGITS: Final = frozenset("0123456789abcdef")


@dataclass(frozen=True, slots=True)
class DeltaStats:
    """What a delta saves. Byte counts are of the target version."""

    target_bytes: int
    """Bytes in the target's files."""
    reused_bytes: int
    """Bytes of target chunks the base already holds (each occurrence counted)."""
    new_bytes: int
    """Raw bytes of the distinct chunks the delta carries."""
    encoded_bytes: int
    """Bytes of the delta file (header included); `plan_delta` reports ``new_bytes`` here,
    since it encodes nothing."""
    chunks_total: int
    """Chunks in the target."""
    chunks_new: int
    """Distinct chunks the delta carries."""
    chunks_xor: int = 0
    """Of those, the ones carried as ``xor-zstd``."""


@dataclass(frozen=True, slots=True)
class DeltaEntry:
    """One chunk a delta carries, and where its payload lies in the delta file."""

    xxh3: str
    encoding: str
    length: int
    """Bytes of the payload."""
    offset: int
    """Where the payload starts in the delta file."""
    ref: tuple[str, int] | None = None
    """For ``xor-zstd``: the base file and offset the chunk was XORed with."""


BaseLocation = tuple[str, int, int]
"""A base file's path, an offset in it and a size."""


def plan_delta(base: Manifest, target: Manifest) -> tuple[dict[str, BaseLocation], DeltaStats]:
    """Which target chunks the base already holds (XXH3 -> base path, offset, size; from
    any file, at any offset), and the stats of a delta carrying the others raw."""
    held: dict[str, BaseLocation] = {}
    for entry in base.files:
        for chunk in entry.chunks:
            held.setdefault(chunk.xxh3, (entry.path, chunk.offset, chunk.size))
    reuse: dict[str, BaseLocation] = {}
    new: dict[str, int] = {}
    reused_bytes = 0
    for _, chunk in _target_chunks(target):
        location = held.get(chunk.xxh3)
        if location is not None and location[2] == chunk.size:
            reuse[chunk.xxh3] = location
            reused_bytes += chunk.size
        else:
            new.setdefault(chunk.xxh3, chunk.size)
    new_bytes = sum(new.values())
    stats = DeltaStats(
        target_bytes=target.size,
        reused_bytes=reused_bytes,
        new_bytes=new_bytes,
        encoded_bytes=new_bytes,
        chunks_total=target.chunk_count,
        chunks_new=len(new),
    )
    return reuse, stats


def write_delta(
    base: Manifest,
    base_root: Path,
    target: Manifest,
    target_root: Path,
    out: Path,
    *,
    xor: bool = True,
    level: int = DEFAULT_ZSTD_LEVEL,
) -> DeltaStats:
    """Write the delta from ``base`` to ``target`` (their files under the two roots) to
    ``out``, atomically. ``xor=False`` never uses the ``xor-zstd`` encoding.

    Reads one chunk at a time; the target's chunks, and the base bytes any ``xor-zstd``
    chunk refers to, are checked against their manifests (`VerificationError`), so a damaged
    source makes no delta rather than one that cannot be applied.
    """
    reuse, stats = plan_delta(base, target)
    xor_sources = _xor_sources(base, target) if xor else {}
    compressor = zstandard.ZstdCompressor(level=level)
    entries: list[dict[str, Any]] = []
    out.parent.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        payloads = stack.enter_context(tempfile.TemporaryFile(dir=out.parent))
        base_files = _VerifiedReader(base, base_root)
        stack.callback(base_files.close)
        for path, chunk, data in _new_chunks(target, target_root, reuse):
            ref = xor_sources.get((path, chunk.offset))
            record, payload = _encode(chunk, data, ref, base_files, compressor)
            payloads.write(payload)
            entries.append(record)
        plain = orjson.dumps({"base": _pin(base), "target": target.to_json(), "entries": entries})
        if len(plain) > MAX_HEADER_BYTES:
            raise ArtifactError(f"the delta's header would be {len(plain)} bytes, over the limit")
        # Compressed: the target manifest's Adler-32 lists are most of a small delta.
        header = compressor.compress(plain)
        payloads.seek(0)
        prefix = _PREFIX.pack(MAGIC, FORMAT_VERSION, len(header))
        size = _write_atomically(out, prefix + header, payloads)
    chunks_xor = sum(1 for record in entries if record["encoding"] == "xor-zstd")
    return replace(stats, encoded_bytes=size, chunks_xor=chunks_xor)


def read_delta_header(path: Path) -> tuple[dict[str, str], Manifest, list[DeltaEntry]]:
    """The base pin (``name``, ``version``, ``sha256``), the target manifest and the entries
    of the delta at ``path``; `MalformedArtifact` for anything that is not a whole delta."""
    try:
        with path.open("rb") as fh:
            file_size = fh.seek(0, os.SEEK_END)
            fh.seek(0)
            return _parse_delta(fh, file_size)
    except OSError as exc:
        raise ArtifactError(f"cannot read delta {path}: {exc.strerror}") from None


def apply_delta(delta: Path, base: Manifest, base_root: Path, out_root: Path) -> Manifest:
    """Rebuild the delta's target version into ``out_root`` from ``base`` (its files under
    ``base_root``) and return the target's manifest.

    Refuses a base other than the delta's (`DeltaBaseMismatch`); checks every chunk and
    file it writes (`VerificationError`). The files, and ``manifest.json`` unless the
    target has a file of that name, appear under their names only once all are whole.
    """
    pin, target, entries = read_delta_header(delta)
    _check_base(pin, base, base_root)
    reuse, _ = plan_delta(base, target)
    carried = _index_entries(entries, target, reuse, base)
    out_root.mkdir(parents=True, exist_ok=True)
    decompressor = zstandard.ZstdDecompressor()
    digests: list[tuple[str, str]] = []
    written: list[tuple[Path, Path]] = []  # (temporary, final) names
    with ExitStack() as stack:
        stack.callback(_discard, written)
        payloads = stack.enter_context(delta.open("rb"))
        base_files = _BaseReader(base, base_root)
        stack.callback(base_files.close)
        for entry in target.files:
            final = out_root / entry.path
            final.parent.mkdir(parents=True, exist_ok=True)
            fd, temp = tempfile.mkstemp(dir=final.parent, prefix=f".{final.name}.", suffix=".tmp")
            written.append((Path(temp), final))
            with os.fdopen(fd, "wb") as out:
                own = hashlib.sha256()
                for chunk in entry.chunks:
                    data = _rebuild(chunk, carried, reuse, payloads, base_files, decompressor)
                    own.update(data)
                    out.write(data)
                out.flush()
                os.fsync(out.fileno())
            if own.hexdigest() != entry.sha256:
                raise VerificationError(f"{entry.path}: rebuilt file does not match its SHA-256")
            digests.append((entry.path, own.hexdigest()))
        if artifact_digest(digests) != target.sha256:
            raise VerificationError(
                f"{target.name} {target.version}: rebuilt files do not match its SHA-256"
            )
        for temp_path, final in written:
            os.replace(temp_path, final)
        written.clear()
    if all(entry.path != "manifest.json" for entry in target.files):
        _write_atomically(out_root / "manifest.json", target.to_bytes(), None)
    return target


# -- planning helpers ----------------------------------------------------------------------


def _target_chunks(manifest: Manifest) -> Iterator[tuple[FileEntry, Chunk]]:
    for entry in manifest.files:
        for chunk in entry.chunks:
            yield entry, chunk


def _pin(manifest: Manifest) -> dict[str, str]:
    return {"name": manifest.name, "version": manifest.version, "sha256": manifest.sha256}


def _xor_sources(base: Manifest, target: Manifest) -> dict[tuple[str, int], tuple[str, int]]:
    """For each target chunk inside a tensor the base has with the same name, dtype and
    shape: (target path, chunk offset) -> (base path, offset of the same bytes there)."""
    ranges: dict[str, list[tuple[int, int, str]]] = {}
    for name, info in target.tensors.items():
        theirs = base.tensors.get(name)
        if not _same_tensor(info, theirs):
            continue
        start, end = _offsets(info)
        ranges.setdefault(str(info["file"]), []).append((start, end, name))
    sources: dict[tuple[str, int], tuple[str, int]] = {}
    for path, spans in ranges.items():
        spans.sort()
        starts = [start for start, _, _ in spans]
        for chunk in _file_chunks(target, path):
            index = bisect_right(starts, chunk.offset) - 1
            if index < 0:
                continue
            start, end, name = spans[index]
            if chunk.end <= end:
                base_info = base.tensors[name]
                base_start, _ = _offsets(base_info)
                sources[(path, chunk.offset)] = (
                    str(base_info["file"]),
                    base_start + chunk.offset - start,
                )
    return sources


def _same_tensor(ours: Mapping[str, Any], theirs: Mapping[str, Any] | None) -> bool:
    if not isinstance(theirs, Mapping):
        return False
    try:
        return (
            ours["dtype"] == theirs["dtype"]
            and list(ours["shape"]) == list(theirs["shape"])
            and _offsets(ours)[1] - _offsets(ours)[0] == _offsets(theirs)[1] - _offsets(theirs)[0]
            and isinstance(ours["file"], str)
            and isinstance(theirs["file"], str)
        )
    except (KeyError, TypeError, MalformedArtifact):
        return False


def _offsets(info: Mapping[str, Any]) -> tuple[int, int]:
    offsets = info.get("offsets")
    if (
        not isinstance(offsets, list | tuple)
        or len(offsets) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in offsets)
        or not 0 <= offsets[0] <= offsets[1]
    ):
        raise MalformedArtifact(f"tensor offsets {str(offsets)[:60]} are not [start, end]")
    return offsets[0], offsets[1]


def _file_chunks(manifest: Manifest, path: str) -> tuple[Chunk, ...]:
    for entry in manifest.files:
        if entry.path == path:
            return entry.chunks
    return ()


def _new_chunks(
    target: Manifest, root: Path, reuse: Mapping[str, BaseLocation]
) -> Iterator[tuple[str, Chunk, bytes]]:
    """Each chunk the delta must carry, once, read from ``root`` and checked: (path, chunk,
    bytes). Files with nothing new are not opened."""
    sent: set[str] = set()
    for entry in target.files:
        wanted = [c for c in entry.chunks if c.xxh3 not in reuse and c.xxh3 not in sent]
        if not wanted:
            continue
        with _open_source(root, entry.path) as source:
            for chunk in wanted:
                if chunk.xxh3 in sent:  # twice in this file
                    continue
                sent.add(chunk.xxh3)
                data = _read_exactly(source, chunk.offset, chunk.size, entry.path)
                if not chunk.matches(data):
                    raise VerificationError(
                        f"{root / entry.path}: the chunk at {chunk.offset} does not match "
                        f"{target.name} {target.version}'s manifest"
                    )
                yield entry.path, chunk, data


def _encode(
    chunk: Chunk,
    data: bytes,
    ref: tuple[str, int] | None,
    base_files: _VerifiedReader,
    compressor: zstandard.ZstdCompressor,
) -> tuple[dict[str, Any], bytes]:
    """The entry and payload of one chunk: the smaller of its two encodings."""
    record: dict[str, Any] = {"xxh3": chunk.xxh3, "encoding": "zstd"}
    payload = compressor.compress(data)
    if ref is not None:
        against = base_files.read(ref[0], ref[1], chunk.size)
        xored = compressor.compress(_xor(data, against))
        if len(xored) < len(payload):
            payload = xored
            record = {**record, "encoding": "xor-zstd", "ref": {"file": ref[0], "offset": ref[1]}}
    record["length"] = len(payload)
    return record, payload


def _xor(data: bytes, other: bytes) -> bytes:
    return np.bitwise_xor(np.frombuffer(data, np.uint8), np.frombuffer(other, np.uint8)).tobytes()


# -- reading deltas ------------------------------------------------------------------------


def _decode_header(stored: bytes) -> Any:
    """The header's JSON, decompressed within `MAX_HEADER_BYTES` (the frame must say its size,
    so a crafted frame cannot make us allocate more)."""
    try:
        declared = zstandard.frame_content_size(stored)
    except zstandard.ZstdError as exc:
        raise MalformedArtifact(f"delta header is not a zstd frame: {exc}") from None
    if declared < 0 or declared > MAX_HEADER_BYTES:
        raise MalformedArtifact("delta header does not state a size within the limit")
    try:
        plain = zstandard.ZstdDecompressor().decompress(stored, max_output_size=declared)
        return orjson.loads(plain)
    except zstandard.ZstdError as exc:
        raise MalformedArtifact(f"delta header does not decompress: {exc}") from None
    except orjson.JSONDecodeError as exc:
        raise MalformedArtifact(f"delta header is not JSON: {exc}") from None


def _parse_delta(
    fh: IO[bytes], file_size: int
) -> tuple[dict[str, str], Manifest, list[DeltaEntry]]:
    prefix = fh.read(_PREFIX.size)
    if len(prefix) < _PREFIX.size:
        raise MalformedArtifact(
            f"a delta starts with {_PREFIX.size} bytes; this one has {len(prefix)}"
        )
    magic, version, length = _PREFIX.unpack(prefix)
    if magic != MAGIC:
        raise MalformedArtifact("not a delta file (no AIRDELTA magic)")
    if version != FORMAT_VERSION:
        raise MalformedArtifact(f"delta format version {version} is not {FORMAT_VERSION}")
    if length > MAX_HEADER_BYTES or _PREFIX.size + length > file_size:
        raise MalformedArtifact(
            f"delta header claims {length} bytes; {file_size - _PREFIX.size} follow the prefix"
        )
    header = _decode_header(fh.read(length))
    if not isinstance(header, dict):
        raise MalformedArtifact("delta header must be a JSON object")
    pin = _parse_pin(header.get("base"))
    target = Manifest.from_json(header.get("target"))
    raw_entries = header.get("entries")
    if not isinstance(raw_entries, list):
        raise MalformedArtifact("delta 'entries' must be a list")
    entries = []
    offset = _PREFIX.size + length
    for raw in raw_entries:
        entry = _parse_entry(raw, offset)
        entries.append(entry)
        offset += entry.length
    if offset != file_size:
        raise MalformedArtifact(
            f"delta payloads end at {offset} but the file has {file_size} bytes "
            f"({'truncated' if offset > file_size else 'trailing bytes'})"
        )
    return pin, target, entries


def _parse_pin(raw: object) -> dict[str, str]:
    if not isinstance(raw, dict) or not all(
        isinstance(raw.get(key), str) for key in ("name", "version", "sha256")
    ):
        raise MalformedArtifact("delta 'base' must hold name, version and sha256 strings")
    return {key: raw[key] for key in ("name", "version", "sha256")}


def _parse_entry(raw: object, offset: int) -> DeltaEntry:
    if not isinstance(raw, dict):
        raise MalformedArtifact("a delta entry must be an object")
    xxh3, encoding, length = raw.get("xxh3"), raw.get("encoding"), raw.get("length")
    if not isinstance(xxh3, str) or len(xxh3) != 32 or not set(xxh3) <= _HEX32_DIGITS:
        raise MalformedArtifact(f"delta entry xxh3 {str(xxh3)[:40]!r} is not 32 hex digits")
    if encoding not in ENCODINGS:
        raise MalformedArtifact(
            f"delta entry encoding {str(encoding)[:40]!r} is not one of {ENCODINGS}"
        )
    if not _is_count(length):
        raise MalformedArtifact(f"delta entry {xxh3}: length must be a non-negative integer")
    ref = None
    if encoding == "xor-zstd":
        raw_ref = raw.get("ref")
        if (
            not isinstance(raw_ref, dict)
            or not isinstance(raw_ref.get("file"), str)
            or not _is_count(raw_ref.get("offset"))
        ):
            raise MalformedArtifact(f"delta entry {xxh3}: xor-zstd needs ref {{file, offset}}")
        ref = (check_relative_path(raw_ref["file"]), raw_ref["offset"])
    return DeltaEntry(xxh3, str(encoding), length, offset, ref)


def _is_count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


# -- applying ------------------------------------------------------------------------------


def _check_base(pin: Mapping[str, str], base: Manifest, base_root: Path) -> None:
    """Refuse a base other than the one the delta was made against: by manifest, then by
    the bytes on disk (each file's size and SHA-256, and the artifact digest of those)."""
    wanted = f"this delta applies to {pin['name']} {pin['version']} sha256 {pin['sha256']}"
    if base.sha256 != pin["sha256"]:
        raise DeltaBaseMismatch(
            f"{wanted}; the base here is {base.name} {base.version} sha256 {base.sha256}"
        )
    digests = []
    for entry in base.files:
        try:
            size, digest = _hash_file(base_root / entry.path)
        except OSError as exc:
            raise DeltaBaseMismatch(
                f"{wanted}; the base here lacks {entry.path}: {exc.strerror}"
            ) from None
        if size != entry.size or digest != entry.sha256:
            raise DeltaBaseMismatch(
                f"{wanted}; the base here has {entry.path} with {size} bytes, sha256 {digest} "
                f"(modified since: its manifest says {entry.size} bytes, sha256 {entry.sha256})"
            )
        digests.append((entry.path, digest))
    if artifact_digest(digests) != pin["sha256"]:
        raise DeltaBaseMismatch(f"{wanted}; the base's files here digest to another sha256")


def _hash_file(path: Path) -> tuple[int, str]:
    """The size and SHA-256 of the file at ``path``, read a block at a time."""
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as fh:
        while block := fh.read(_COPY_BUFFER):
            digest.update(block)
            size += len(block)
    return size, digest.hexdigest()


def _index_entries(
    entries: list[DeltaEntry], target: Manifest, reuse: Mapping[str, BaseLocation], base: Manifest
) -> dict[str, DeltaEntry]:
    """The entries by XXH3, once each checked against the target and the base: each carries
    a target chunk, and every target chunk is carried or held by the base."""
    sizes = {chunk.xxh3: chunk.size for _, chunk in _target_chunks(target)}
    base_sizes = {entry.path: entry.size for entry in base.files}
    carried: dict[str, DeltaEntry] = {}
    for entry in entries:
        if entry.xxh3 in carried:
            raise MalformedArtifact(f"delta carries chunk {entry.xxh3} twice")
        size = sizes.get(entry.xxh3)
        if size is None:
            raise MalformedArtifact(f"delta carries chunk {entry.xxh3}, which the target lacks")
        if entry.length > _zstd_bound(size):
            raise MalformedArtifact(
                f"delta chunk {entry.xxh3}: a {entry.length}-byte payload for {size} bytes"
            )
        if entry.ref is not None:
            file_size = base_sizes.get(entry.ref[0])
            if file_size is None or entry.ref[1] + size > file_size:
                raise MalformedArtifact(f"delta chunk {entry.xxh3} refers past the base's files")
        carried[entry.xxh3] = entry
    missing = [xxh3 for xxh3 in sizes if xxh3 not in carried and xxh3 not in reuse]
    if missing:
        raise MalformedArtifact(
            f"delta lacks {len(missing)} chunk(s) the base does not hold, such as {missing[0]}"
        )
    return carried


def _zstd_bound(size: int) -> int:
    """The largest zstd frame ``size`` bytes can become (``ZSTD_COMPRESSBOUND``, rounded
    up generously): a longer payload is not an honest one."""
    return size + size // 128 + 1024


def _rebuild(
    chunk: Chunk,
    carried: Mapping[str, DeltaEntry],
    reuse: Mapping[str, BaseLocation],
    payloads: IO[bytes],
    base_files: _BaseReader,
    decompressor: zstandard.ZstdDecompressor,
) -> bytes:
    """One target chunk's bytes, from the delta or the base, checked against its XXH3."""
    entry = carried.get(chunk.xxh3)
    if entry is None:
        path, offset, size = reuse[chunk.xxh3]
        data = base_files.read(path, offset, size)
    else:
        payloads.seek(entry.offset)
        data = _decompress(payloads.read(entry.length), chunk, decompressor)
        if entry.ref is not None:
            data = _xor(data, base_files.read(entry.ref[0], entry.ref[1], chunk.size))
    if not chunk.matches(data):
        raise VerificationError(f"rebuilt chunk {chunk.xxh3} does not match its XXH3")
    return data


def _decompress(payload: bytes, chunk: Chunk, decompressor: zstandard.ZstdDecompressor) -> bytes:
    """A zstd payload of exactly ``chunk.size`` bytes; never more is allocated."""
    try:
        declared = zstandard.frame_content_size(payload)
        if declared != chunk.size:
            raise VerificationError(
                f"chunk {chunk.xxh3}: payload declares {declared} bytes, the chunk has {chunk.size}"
            )
        return decompressor.decompress(payload, max_output_size=chunk.size)
    except zstandard.ZstdError as exc:
        raise VerificationError(
            f"chunk {chunk.xxh3}: payload does not decompress ({exc})"
        ) from None


def _discard(finished: list[tuple[Path, Path]]) -> None:
    for temp, _ in finished:
        temp.unlink(missing_ok=True)


# -- file access ---------------------------------------------------------------------------


class _BaseReader:
    """Random reads from a version's files, one open handle per file."""

    def __init__(self, manifest: Manifest, root: Path) -> None:
        self.manifest = manifest
        self.root = root
        self._handles: dict[str, IO[bytes]] = {}

    def read(self, path: str, offset: int, size: int) -> bytes:
        handle = self._handles.get(path)
        if handle is None:
            handle = self._handles[path] = _open(self.root, path)
        return _read_exactly(handle, offset, size, path)

    def close(self) -> None:
        for handle in self._handles.values():
            handle.close()
        self._handles.clear()


class _VerifiedReader(_BaseReader):
    """A `_BaseReader` that checks every chunk it reads from against the manifest, once."""

    def __init__(self, manifest: Manifest, root: Path) -> None:
        super().__init__(manifest, root)
        self._files = {entry.path: entry for entry in manifest.files}
        self._starts = {e.path: [chunk.offset for chunk in e.chunks] for e in manifest.files}
        self._checked: set[tuple[str, int]] = set()

    def read(self, path: str, offset: int, size: int) -> bytes:
        entry = self._files[path]
        starts = self._starts[path]
        first = max(bisect_right(starts, offset) - 1, 0)
        last = bisect_left(starts, offset + size)
        for chunk in entry.chunks[first:last]:
            if (path, chunk.offset) not in self._checked:
                if not chunk.matches(super().read(path, chunk.offset, chunk.size)):
                    raise VerificationError(
                        f"{self.root / path}: the chunk at {chunk.offset} does not match "
                        f"{self.manifest.name} {self.manifest.version}'s manifest"
                    )
                self._checked.add((path, chunk.offset))
        return super().read(path, offset, size)


def _open(root: Path, path: str) -> IO[bytes]:
    try:
        return (root / path).open("rb")
    except OSError as exc:
        raise ArtifactError(f"cannot read {root / path}: {exc.strerror}") from None


@contextmanager
def _open_source(root: Path, path: str) -> Iterator[IO[bytes]]:
    handle = _open(root, path)
    try:
        yield handle
    finally:
        handle.close()


def _read_exactly(handle: IO[bytes], offset: int, size: int, path: str) -> bytes:
    handle.seek(offset)
    data = handle.read(size)
    if len(data) != size:
        raise VerificationError(f"{path} ends before {offset + size} (its manifest says more)")
    return data


def _write_atomically(path: Path, head: bytes, rest: IO[bytes] | None) -> int:
    """Write ``head`` then ``rest`` to ``path`` via a temporary file and a rename; the size."""
    fd, temp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(head)
            if rest is not None:
                shutil.copyfileobj(rest, out, _COPY_BUFFER)
            size = out.tell()
            out.flush()
            os.fsync(out.fileno())
        os.replace(temp_name, path)
    except BaseException:
        Path(temp_name).unlink(missing_ok=True)
        raise
    return size
