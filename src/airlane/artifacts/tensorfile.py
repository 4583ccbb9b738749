"""Safetensors files: a bounds-checked header parser, zero-copy reads, atomic writes.

**Format.** A file is an 8-byte little-endian ``u64`` ``N``, then ``N`` bytes of UTF-8 JSON,
then the data section. The JSON object maps each tensor name to
``{"dtype": str, "shape": [int, ...], "data_offsets": [begin, end]}`` (offsets relative to
the data section, which starts at ``8 + N``) and may hold ``"__metadata__"``, a flat
``str -> str`` object. Tensors are stored row-major and little-endian.

**Why we parse headers ourselves but write with the library.** Planning chunks and shards
needs every tensor's byte range without loading any data, and a hostile or damaged file must be
refused with a message that says what is wrong, never an `IndexError` or a JSON traceback.
`parse_header` therefore checks everything the reference implementation checks (and a little
more: duplicate keys, unknown fields, lone surrogates), with one message per fault. Writing is
the opposite case: producing exactly the layout other readers expect (alignment-sorted
tensors, space-padded header) is what the ``safetensors`` library does well, so
`write_tensors` hands the arrays to it and only adds validation and an atomic rename.

**Validity**, as the reference implementation defines it (``safetensors/src/tensor.rs``,
``read_metadata`` and ``Metadata::validate``): ``N`` is at most `MAX_HEADER_BYTES`; every
tensor's byte length is ``numel * bits / 8`` (a whole number of bytes); sorted by offset, the
tensors tile the data section from 0 with no gap or overlap; and the data section ends
exactly at the end of the file.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import struct
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, BinaryIO, Final, Self

import numpy as np
import numpy.typing as npt
import safetensors.numpy

from airlane.artifacts.errors import ArtifactError, MalformedArtifact

__all__ = [
    "DTYPES",
    "DTYPE_BITS",
    "MAX_HEADER_BYTES",
    "NUMPY_DTYPES",
    "Header",
    "TensorFile",
    "TensorInfo",
    "parse_header",
    "read_header",
    "safetensors_dtype",
    "write_tensors",
]

DTYPE_BITS: Final[dict[str, int]] = {
    "BOOL": 8,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "F8_E4M3FNUZ": 8,
    "F8_E5M2FNUZ": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "C64": 64,
    "F64": 64,
    "I64": 64,
    "U64": 64,
}
"""Bits per element of every dtype safetensors 0.8 knows (its ``Dtype::bitsize``). F4 and F6
are packed sub-byte formats: a tensor of them must still fill a whole number of bytes."""

DTYPES: Final[dict[str, int]] = {
    name: bits // 8 for name, bits in DTYPE_BITS.items() if bits % 8 == 0
}
"""Bytes per element of every dtype that has a whole number of them."""

NUMPY_DTYPES: Final[dict[str, np.dtype[Any]]] = {
    "BOOL": np.dtype(np.bool_),
    "U8": np.dtype("u1"),
    "I8": np.dtype("i1"),
    "I16": np.dtype("<i2"),
    "U16": np.dtype("<u2"),
    "F16": np.dtype("<f2"),
    "I32": np.dtype("<i4"),
    "U32": np.dtype("<u4"),
    "F32": np.dtype("<f4"),
    "C64": np.dtype("<c8"),
    "F64": np.dtype("<f8"),
    "I64": np.dtype("<i8"),
    "U64": np.dtype("<u8"),
}
"""The numpy dtype of each safetensors dtype numpy has (explicitly little-endian, the file's
byte order). BF16, the F8 family, F4 and F6 have none: read them with `TensorFile.raw`."""

MAX_HEADER_BYTES: Final = 100_000_000
"""The largest header we read: the reference implementation's ``MAX_HEADER_SIZE``, so any
file it accepts we accept. Real headers are kilobytes to a few megabytes."""

_ENTRY_KEYS: Final = frozenset({"dtype", "shape", "data_offsets"})
_METADATA_KEY: Final = "__metadata__"


def safetensors_dtype(dtype: np.dtype[Any]) -> str:
    """The safetensors code of a numpy dtype (``float32`` -> ``"F32"``), in either byte order.

    Raises `ArtifactError` for a dtype safetensors cannot store (object, strings, float128...).
    """
    for code, candidate in NUMPY_DTYPES.items():
        if dtype.kind == candidate.kind and dtype.itemsize == candidate.itemsize:
            return code
    raise ArtifactError(f"safetensors cannot store numpy dtype {dtype}")


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """One tensor's entry in a header."""

    name: str
    dtype: str
    """The safetensors dtype code, a key of `DTYPE_BITS`."""
    shape: tuple[int, ...]
    start: int
    """Where its bytes begin, relative to the data section."""
    end: int
    """Where its bytes end (exclusive), relative to the data section."""

    @property
    def nbytes(self) -> int:
        """Its size in the file."""
        return self.end - self.start

    @property
    def numel(self) -> int:
        """The number of elements (1 for a 0-d tensor)."""
        count = 1
        for dim in self.shape:
            count *= dim
        return count


@dataclass(frozen=True, slots=True)
class Header:
    """A parsed and validated safetensors header."""

    tensors: tuple[TensorInfo, ...]
    """Every tensor, in file order (sorted by `TensorInfo.start`)."""
    metadata: dict[str, str]
    """The ``__metadata__`` object; empty if the file has none."""
    data_offset: int
    """Where the data section starts in the file: ``8 + N``."""
    file_size: int
    _index: dict[str, TensorInfo] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_index", {info.name: info for info in self.tensors})

    def tensor(self, name: str) -> TensorInfo:
        """The entry of tensor ``name``; `ArtifactError` if there is none."""
        try:
            return self._index[name]
        except KeyError:
            raise ArtifactError(f"no tensor named {name!r} in this file") from None

    def names(self) -> tuple[str, ...]:
        """Every tensor's name, in file order."""
        return tuple(info.name for info in self.tensors)

    def file_range(self, name: str) -> tuple[int, int]:
        """The absolute ``[begin, end)`` byte range of tensor ``name`` in the file."""
        info = self.tensor(name)
        return self.data_offset + info.start, self.data_offset + info.end


def parse_header(prefix: bytes, file_size: int) -> Header:
    """Parse and validate the header of a safetensors file of ``file_size`` bytes.

    ``prefix`` holds the file's first bytes: at least ``8 + N`` of them, unless the file is
    shorter. Raises `MalformedArtifact`, naming the fault, for anything the format forbids.
    """
    if file_size < 8 or len(prefix) < 8:
        raise MalformedArtifact(f"file is {file_size} bytes, shorter than the 8-byte length")
    length = int.from_bytes(prefix[:8], "little")
    if length == 0:
        raise MalformedArtifact("header length is 0")
    if length > MAX_HEADER_BYTES:
        raise MalformedArtifact(f"header length {length} exceeds {MAX_HEADER_BYTES} bytes")
    data_offset = 8 + length
    if data_offset > file_size:
        raise MalformedArtifact(
            f"header length {length} runs past the end of the {file_size}-byte file"
        )
    if len(prefix) < data_offset:
        raise MalformedArtifact(f"header is truncated: {len(prefix) - 8} of {length} bytes")
    raw = _decode_json(prefix[8:data_offset])
    metadata = _parse_metadata(raw.pop(_METADATA_KEY, {}))
    tensors = [_parse_entry(name, entry, file_size) for name, entry in raw.items()]
    tensors.sort(key=lambda info: (info.start, info.end, info.name))
    _check_tiling(tensors, file_size - data_offset)
    return Header(tuple(tensors), metadata, data_offset, file_size)


def read_header(path: str | os.PathLike[str]) -> Header:
    """Read and validate the header of the file at ``path``, without reading its data."""
    with open(path, "rb") as handle:
        file_size = os.fstat(handle.fileno()).st_size
        prefix = handle.read(8)
        if len(prefix) == 8:
            length = int.from_bytes(prefix, "little")
            # Read no more than the limit: parse_header refuses a longer length anyway.
            prefix += handle.read(min(length, MAX_HEADER_BYTES))
    return parse_header(prefix, file_size)


def _decode_json(blob: bytes) -> dict[str, Any]:
    try:
        text = blob.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedArtifact(f"header is not UTF-8 (byte {exc.start})") from None
    try:
        value = json.loads(text, object_pairs_hook=_refuse_duplicates)
    except _DuplicateKey as exc:
        raise MalformedArtifact(f"header has duplicate key {exc.args[0]!r}") from None
    except RecursionError:
        raise MalformedArtifact("header JSON is nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, and int() refusing a 5 000-digit number
        raise MalformedArtifact(f"header is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise MalformedArtifact(f"header is a JSON {type(value).__name__}, not an object")
    return value


class _DuplicateKey(Exception):
    """Raised inside `json.loads` when an object repeats a key."""


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # Python keeps the last of repeated keys while other parsers keep the first, so two readers
    # could see different tensors in the same file: refuse the ambiguity outright.
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey(key)
        result[key] = value
    return result


def _parse_metadata(raw: object) -> dict[str, str]:
    if not isinstance(raw, dict):
        raise MalformedArtifact("__metadata__ is not a JSON object")
    for key, value in raw.items():
        if not isinstance(value, str):
            raise MalformedArtifact(f"__metadata__[{key!r}] is not a string")
        _check_text(key, "__metadata__ key")
        _check_text(value, f"__metadata__[{key!r}]")
    return raw


def _check_text(text: str, what: str) -> None:
    # JSON "\ud800" escapes decode to lone surrogates, which no UTF-8 writer can emit.
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise MalformedArtifact(f"{what} holds a lone surrogate") from None


def _is_count(value: object) -> bool:
    """A non-negative JSON integer (``bool`` is an `int` subclass, and is not one)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _parse_entry(name: str, entry: object, file_size: int) -> TensorInfo:
    if not name:
        raise MalformedArtifact("a tensor has an empty name")
    _check_text(name, "a tensor name")
    if not isinstance(entry, dict):
        raise MalformedArtifact(f"entry of tensor {name!r} is not an object")
    if entry.keys() != _ENTRY_KEYS:
        missing = sorted(_ENTRY_KEYS - entry.keys())
        extra = sorted(entry.keys() - _ENTRY_KEYS)
        raise MalformedArtifact(f"tensor {name!r}: missing keys {missing}, extra keys {extra}")
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
        raise MalformedArtifact(f"tensor {name!r} has unknown dtype {dtype!r}")
    if not isinstance(shape, list) or not all(_is_count(dim) for dim in shape):
        raise MalformedArtifact(f"tensor {name!r}: shape is not a list of non-negative ints")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(map(_is_count, offsets))):
        raise MalformedArtifact(f"tensor {name!r}: data_offsets is not two non-negative ints")
    begin, end = offsets
    if begin > end:
        raise MalformedArtifact(f"tensor {name!r}: data_offsets begin {begin} > end {end}")
    expected = _byte_length(name, dtype, shape, file_size)
    if end - begin != expected:
        raise MalformedArtifact(
            f"tensor {name!r}: data_offsets span {end - begin} bytes, "
            f"but {dtype} {shape} needs {expected}"
        )
    return TensorInfo(name, dtype, tuple(shape), begin, end)


def _byte_length(name: str, dtype: str, shape: list[int], file_size: int) -> int:
    # Python ints do not overflow, but a hostile header could ask us to multiply millions of
    # huge dimensions; stop as soon as the product can no longer fit in the file.
    if 0 in shape:
        return 0
    bits = DTYPE_BITS[dtype]
    limit = 8 * file_size
    total = bits
    for dim in shape:
        total *= dim
        if total > limit:
            raise MalformedArtifact(f"tensor {name!r}: shape {shape} is larger than the file")
    if total % 8:
        raise MalformedArtifact(f"tensor {name!r}: {dtype} {shape} is not a whole number of bytes")
    return total // 8


def _check_tiling(tensors: list[TensorInfo], data_size: int) -> None:
    position = 0
    for info in tensors:
        if info.start > position:
            raise MalformedArtifact(f"gap of {info.start - position} bytes before {info.name!r}")
        if info.start < position:
            raise MalformedArtifact(f"tensor {info.name!r} overlaps the tensor before it")
        position = info.end
    if position != data_size:
        raise MalformedArtifact(
            f"tensors cover {position} bytes but the data section is {data_size} bytes"
        )


class TensorFile:
    """A safetensors file opened read-only and memory-mapped.

    `raw` and `array` return zero-copy views of the mapping: they are valid while the file is
    open, and `close` leaves the mapping to the garbage collector while any of them is alive
    (an ``mmap`` cannot be closed under exported buffers). Use it as a context manager.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        with open(self.path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size < 8:  # also spares mmap an empty file, which it refuses
                raise MalformedArtifact(f"file is {size} bytes, shorter than the 8-byte length")
            self._map: mmap.mmap | None = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        # Parse from the mapping itself, so the header and the bytes we serve cannot disagree
        # even if the file changed between fstat and mmap.
        length = min(int.from_bytes(self._map[:8], "little"), MAX_HEADER_BYTES)
        try:
            self.header = parse_header(self._map[: 8 + length], len(self._map))
        except MalformedArtifact:
            self.close()
            raise

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Release the mapping (now, or when the last view of it is garbage-collected)."""
        mapping, self._map = self._map, None
        if mapping is not None:
            # With views still exported mmap refuses to close; it closes when they are collected.
            with contextlib.suppress(BufferError):
                mapping.close()

    def raw(self, name: str) -> memoryview:
        """The bytes of tensor ``name``: a read-only, zero-copy view."""
        begin, end = self.header.file_range(name)
        return memoryview(self._mapping())[begin:end]

    def array(self, name: str) -> npt.NDArray[Any]:
        """Tensor ``name`` as a read-only, zero-copy numpy array of its dtype and shape."""
        info = self.header.tensor(name)
        dtype = NUMPY_DTYPES.get(info.dtype)
        if dtype is None:
            raise ArtifactError(
                f"tensor {name!r} is {info.dtype}, which numpy has no dtype for; use .raw()"
            )
        offset = self.header.data_offset + info.start
        flat = np.frombuffer(self._mapping(), dtype=dtype, count=info.numel, offset=offset)
        return flat.reshape(info.shape)

    def arrays(self) -> dict[str, npt.NDArray[Any]]:
        """Every tensor by name, as `array` views (valid while the file is open)."""
        return {name: self.array(name) for name in self.header.names()}

    def _mapping(self) -> mmap.mmap:
        if self._map is None:
            raise ArtifactError(f"{self.path} is closed")
        return self._map


def write_tensors(
    path: str | os.PathLike[str],
    tensors: Mapping[str, npt.NDArray[Any]],
    metadata: Mapping[str, str] | None = None,
) -> Header:
    """Write ``tensors`` to ``path`` as safetensors, atomically; return the written header.

    The file appears whole or not at all: it is written to a temporary file in the same
    directory, flushed to disk, then renamed over ``path``.
    """
    arrays = {name: _storable(name, array) for name, array in tensors.items()}
    text = dict(metadata or {})
    for key, value in text.items():
        if not (isinstance(key, str) and isinstance(value, str)):
            raise ArtifactError(f"metadata must map str to str; got {key!r}: {value!r}")
    target = Path(path)
    fd, temp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    os.close(fd)
    try:
        safetensors.numpy.save_file(arrays, temp_name, metadata=text or None)
        with open(temp_name, "r+b") as written:
            _canonical_header(written)
            os.fsync(written.fileno())
        os.replace(temp_name, target)
    except BaseException:
        Path(temp_name).unlink(missing_ok=True)
        raise
    return read_header(target)


def _canonical_header(file: BinaryIO) -> None:
    """Rewrite a just-written file's header with its keys sorted, in place: the library
    writes them in hash-map order, which changes from process to process, and the same
    weights must give the same bytes (chunks that did not change must not travel again).
    Same content, same compact separators: the same length, so no offset moves."""
    (size,) = struct.unpack("<Q", file.read(8))
    raw = file.read(size)
    header = json.loads(raw)
    text = json.dumps(header, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    canonical = text.encode()
    if len(canonical) > size:  # cannot happen for what the library writes; keep its bytes
        return
    file.seek(8)
    file.write(canonical + b" " * (size - len(canonical)))


def _storable(name: object, array: object) -> npt.NDArray[Any]:
    if not isinstance(name, str) or not name:
        raise ArtifactError(f"tensor names must be non-empty strings, not {name!r}")
    if isinstance(array, np.generic):  # a numpy scalar, such as arr.sum() returns
        array = np.asarray(array)
    if not isinstance(array, np.ndarray):
        raise ArtifactError(f"tensor {name!r} is a {type(array).__name__}, not a numpy array")
    safetensors_dtype(array.dtype)  # refuse what the library cannot store, with our message
    # The library writes the raw buffer behind the array's data pointer, so a transposed or
    # strided view would be written scrambled: copy those into C order first.
    # (np.ascontiguousarray would also turn 0-d arrays into 1-d ones.)
    return array if array.flags.c_contiguous else array.copy(order="C")
