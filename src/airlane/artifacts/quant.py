"""Symmetric INT8 weight quantization, and the metadata that undoes it.

**Scheme.** A group of values ``x`` gets one scale ``s = max|x| / 127`` and is stored as
``q = clip(round(x / s), -127, 127)`` in int8; ``q * s`` restores it to within ``s / 2``.
Symmetric (no zero point) because trained weights are centred on zero, and -128 is left unused
so that ``q`` and ``-q`` are both representable. An all-zero group gets ``s = 1`` (its ``q`` is
0 whatever ``s`` is), so nothing ever divides by zero.

**Groups.** ``per_channel``: one scale per index of axis 0, shape ``(rows,)`` — the classic
per-output-channel scheme. ``block``: the tensor is read as ``rows = prod(shape[:-1])`` by
``cols = shape[-1]``, each row is cut into blocks of `QuantConfig.block_size` consecutive
values (the last one may be shorter), and scales have shape ``(rows, ceil(cols / block))``.
Smaller groups track local magnitude better, so an outlier costs precision in 32 or 64 values
instead of a whole row: block 32 beats block 64 beats per-channel, for 1/16 or 1/32 byte of
scale per weight.

**What is quantized.** Floating-point tensors of two or more dimensions, unless their name
matches a `QuantConfig.keep_fp16` pattern: norms, embeddings and biases are small and sensitive,
and are kept in FP16 instead. Vectors and scalars are always kept in FP16; integer and bool
tensors are copied unchanged.

**Files.** `quantize` returns the tensors to write (int8 weights, float32 scales named
``<name>.scale``, FP16 tensors, unchanged tensors) and one metadata entry, ``airlane.quant``,
that `dequantize` needs and checks. Scales are rounded *up* to float32, so ``|x / s| <= 127``
holds exactly and the ``s / 2`` bound is never broken by clipping.
"""

from __future__ import annotations

import fnmatch
import json
import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

import numpy as np
import numpy.typing as npt

from airlane.artifacts.errors import ArtifactError, MalformedArtifact
from airlane.artifacts.tensorfile import NUMPY_DTYPES, safetensors_dtype

__all__ = [
    "DEFAULT_KEEP_FP16",
    "METADATA_KEY",
    "REPORT_COLUMNS",
    "QuantConfig",
    "Quantized",
    "TensorReport",
    "dequantize",
    "format_report",
    "quantize",
    "sqnr_db",
]

METADATA_KEY: Final = "airlane.quant"
"""The safetensors metadata key holding the quantization record."""
DEFAULT_KEEP_FP16: Final = ("*norm*", "*embed*", "*ln_*", "*.bias", "*wte*", "*wpe*")
"""Norms, embeddings (``wte``/``wpe`` are GPT-2's) and biases: few bytes, much sensitivity."""
REPORT_COLUMNS: Final = ("tensor", "action", "shape", "bytes before", "bytes after", "SQNR dB")
"""The header row for `format_report`'s rows."""

_QMAX: Final = 127
_FORMAT: Final = 1
_FLOAT_CODES: Final = frozenset({"F16", "F32", "F64"})

Scheme = Literal["per_channel", "block"]
Action = Literal["int8", "fp16", "unchanged"]


@dataclass(frozen=True, slots=True)
class QuantConfig:
    """How `quantize` treats a checkpoint."""

    scheme: Scheme = "per_channel"
    """``per_channel`` (one scale per row) or ``block`` (one per `block_size` values)."""
    block_size: int = 64
    """Values per block under the ``block`` scheme: 32 or 64."""
    keep_fp16: tuple[str, ...] = DEFAULT_KEEP_FP16
    """`fnmatch` patterns of float tensor names to keep in FP16 instead of INT8."""

    def __post_init__(self) -> None:
        if self.scheme not in ("per_channel", "block"):
            raise ArtifactError(f"unknown quantization scheme {self.scheme!r}")
        if self.block_size not in (32, 64):
            raise ArtifactError(f"block_size must be 32 or 64, not {self.block_size!r}")

    def action(self, name: str, array: npt.NDArray[Any]) -> Action:
        """What `quantize` does with tensor ``name``."""
        if array.dtype.kind != "f":
            return "unchanged"
        if array.ndim < 2 or any(fnmatch.fnmatchcase(name, p) for p in self.keep_fp16):
            return "fp16"
        return "int8"


@dataclass(frozen=True, slots=True)
class TensorReport:
    """What happened to one tensor, and what it cost."""

    name: str
    action: Action
    shape: tuple[int, ...]
    bytes_before: int
    bytes_after: int
    """Its stored size afterwards, scales included."""
    sqnr_db: float
    """Signal-to-quantization-noise ratio of the restored tensor; ``math.inf`` if exact."""


@dataclass(frozen=True, slots=True)
class Quantized:
    """The result of `quantize`: ready for `airlane.artifacts.tensorfile.write_tensors`."""

    tensors: dict[str, npt.NDArray[Any]]
    """What to store. Unchanged tensors are the input arrays themselves, not copies: write
    them before closing a `TensorFile` they are views of."""
    metadata: dict[str, str]
    """The ``airlane.quant`` entry to add to the file's metadata."""
    report: tuple[TensorReport, ...]


def sqnr_db(original: npt.NDArray[Any], reconstructed: npt.NDArray[Any]) -> float:
    """``10 log10(sum x^2 / sum (x - y)^2)`` in float64; ``math.inf`` when there is no error."""
    x = np.asarray(original, dtype=np.float64)
    y = np.asarray(reconstructed, dtype=np.float64)
    noise = float(np.sum(np.square(x - y)))
    if noise == 0.0:
        return math.inf
    signal = float(np.sum(np.square(x)))
    return -math.inf if signal == 0.0 else 10.0 * math.log10(signal / noise)


def quantize(tensors: Mapping[str, npt.NDArray[Any]], config: QuantConfig) -> Quantized:
    """Quantize a checkpoint's float matrices to INT8 (module docstring).

    Raises `ArtifactError` for a non-finite value, an FP16-kept tensor beyond FP16's range,
    or an input tensor named like the scale of another.
    """
    actions = {name: config.action(name, array) for name, array in tensors.items()}
    for name, action in actions.items():
        if action == "int8" and _scale_name(name) in tensors:
            raise ArtifactError(f"tensor {_scale_name(name)!r} would collide with {name}'s scale")
    out: dict[str, npt.NDArray[Any]] = {}
    record: dict[str, Any] = {}
    fp16: dict[str, str] = {}
    report = []
    restored: npt.NDArray[Any]
    for name, array in tensors.items():
        action = actions[name]
        if action == "int8":
            restored, record[name] = _quantize_one(name, array, config, out)
            after = out[name].nbytes + out[_scale_name(name)].nbytes
        elif action == "fp16":
            out[name] = restored = _to_fp16(name, array)
            fp16[name] = safetensors_dtype(array.dtype)
            after = restored.nbytes
        else:
            out[name] = restored = array
            after = array.nbytes
        quality = math.inf if action == "unchanged" else sqnr_db(array, restored)
        report.append(TensorReport(name, action, array.shape, array.nbytes, after, quality))
    unchanged = [name for name, action in actions.items() if action == "unchanged"]
    summary = {
        "format": _FORMAT,
        "scheme": config.scheme,
        "block_size": config.block_size if config.scheme == "block" else None,
        "tensors": record,
        "fp16": fp16,
        "unchanged": unchanged,
    }
    metadata = {METADATA_KEY: json.dumps(summary, separators=(",", ":"), sort_keys=True)}
    return Quantized(out, metadata, tuple(report))


def _scale_name(name: str) -> str:
    return f"{name}.scale"


def _check_finite(name: str, array: npt.NDArray[Any]) -> None:
    if not np.all(np.isfinite(array)):
        raise ArtifactError(f"tensor {name!r} holds NaN or infinite values")


def _to_fp16(name: str, array: npt.NDArray[Any]) -> npt.NDArray[np.float16]:
    _check_finite(name, array)
    with np.errstate(over="ignore"):  # checked just below, with a better message
        half = array.astype(np.float16)
    if not np.all(np.isfinite(half)):  # beyond +-65504: FP16 would silently turn it into inf
        raise ArtifactError(f"tensor {name!r} exceeds the FP16 range; do not keep it in FP16")
    return half


def _quantize_one(
    name: str, array: npt.NDArray[Any], config: QuantConfig, out: dict[str, npt.NDArray[Any]]
) -> tuple[npt.NDArray[np.float32], dict[str, Any]]:
    """Store ``name``'s int8 values and scales in ``out``; return the restored tensor (what
    `dequantize` will produce, for the report) and its metadata record."""
    _check_finite(name, array)
    block = config.block_size if config.scheme == "block" else None
    rows, cols = _matrix_shape(array.shape, block)
    # Per-channel is the block scheme with one block as wide as the row.
    width, count = (cols, 1) if block is None else (block, -(-cols // block))
    matrix = array.reshape(rows, cols).astype(np.float64)
    # Zero padding completes the last block without changing any block's max.
    padded = np.pad(matrix, ((0, 0), (0, width * count - cols)))
    groups = padded.reshape(rows, count, width)
    scales = _scales(name, np.abs(groups).max(axis=2, initial=0.0))
    q = np.rint(groups / scales[..., np.newaxis].astype(np.float64))
    q8 = np.clip(q, -_QMAX, _QMAX).astype(np.int8).reshape(rows, width * count)[:, :cols]
    out[name] = q8.reshape(array.shape)
    out[_scale_name(name)] = scales.reshape(rows) if block is None else scales
    entry = {
        "scheme": config.scheme,
        "block_size": block,
        "dtype": safetensors_dtype(array.dtype),
        "scale": _scale_name(name),
    }
    return _restore(q8, out[_scale_name(name)], block).reshape(array.shape), entry


def _matrix_shape(shape: tuple[int, ...], block: int | None) -> tuple[int, int]:
    """``per_channel`` reads a tensor as axis 0 by the rest, ``block`` as the rest by the
    last axis."""
    if block is None:
        return shape[0], math.prod(shape[1:])
    return math.prod(shape[:-1]), shape[-1]


def _scales(name: str, amax: npt.NDArray[np.float64]) -> npt.NDArray[np.float32]:
    exact = amax / _QMAX
    with np.errstate(over="ignore"):  # checked below, with a better message
        scales = exact.astype(np.float32)
    # Round up where float32 rounded down, so |x / s| <= 127 and no value is clipped.
    low = scales.astype(np.float64) < exact
    scales[low] = np.nextafter(scales[low], np.float32(np.inf))
    if not np.all(np.isfinite(scales)):
        raise ArtifactError(f"tensor {name!r} has values too large for float32 scales")
    scales[amax == 0] = 1.0
    return scales


def _restore(
    q: npt.NDArray[np.int8], scales: npt.NDArray[np.float32], block: int | None
) -> npt.NDArray[np.float32]:
    """``q * s`` for an int8 matrix ``(rows, cols)``: each scale repeated over its group."""
    per_value = scales.reshape(-1, 1) if block is None else np.repeat(scales, block, axis=1)
    return q.astype(np.float32) * per_value[:, : q.shape[1]]


def dequantize(
    tensors: Mapping[str, npt.NDArray[Any]], metadata: Mapping[str, str]
) -> dict[str, npt.NDArray[Any]]:
    """Undo `quantize`: INT8 tensors come back as float32, FP16-kept ones in their original
    dtype, the rest unchanged; scale tensors are dropped.

    Raises `MalformedArtifact` if the ``airlane.quant`` metadata is missing or malformed, or
    does not match the tensors (a tensor or scale missing, a wrong dtype or shape).
    """
    record = _load_record(metadata)
    described = set(record["tensors"]) | set(record["fp16"]) | set(record["unchanged"])
    scales = {entry["scale"] for entry in record["tensors"].values()}
    for name in tensors:
        if name not in described and name not in scales:
            raise MalformedArtifact(f"tensor {name!r} is not described by {METADATA_KEY}")
    restored: dict[str, npt.NDArray[Any]] = {}
    for name, entry in record["tensors"].items():
        restored[name] = _dequantize_one(name, entry, tensors)
    for name, code in record["fp16"].items():
        half = _require(tensors, name, "float16 tensor")
        if half.dtype != np.float16:
            raise MalformedArtifact(f"FP16-kept tensor {name!r} is {half.dtype}")
        restored[name] = half.astype(NUMPY_DTYPES[code])
    for name in record["unchanged"]:
        restored[name] = _require(tensors, name, "unchanged tensor")
    return restored


def _require(tensors: Mapping[str, npt.NDArray[Any]], name: str, what: str) -> Any:
    if name not in tensors:
        raise MalformedArtifact(f"{METADATA_KEY} names {what} {name!r}, which is missing")
    return tensors[name]


def _dequantize_one(
    name: str, entry: Mapping[str, Any], tensors: Mapping[str, npt.NDArray[Any]]
) -> npt.NDArray[np.float32]:
    q = _require(tensors, name, "int8 tensor")
    scales = _require(tensors, entry["scale"], "scale tensor")
    if q.dtype != np.int8 or q.ndim < 2:
        raise MalformedArtifact(f"int8 tensor {name!r} is {q.dtype} of {q.ndim} dims")
    block = entry["block_size"]
    rows, cols = _matrix_shape(q.shape, block)
    groups = (rows,) if block is None else (rows, -(-cols // block))
    if scales.dtype != np.float32 or scales.shape != groups:
        raise MalformedArtifact(
            f"scale of {name!r} is {scales.dtype} {scales.shape}; expected float32 {groups}"
        )
    return _restore(q.reshape(rows, cols), scales, block).reshape(q.shape)


def _load_record(metadata: Mapping[str, str]) -> dict[str, Any]:
    """Parse and check the ``airlane.quant`` record, so later lookups cannot fail."""
    if METADATA_KEY not in metadata:
        raise MalformedArtifact(f"metadata has no {METADATA_KEY} entry")
    try:
        record = json.loads(metadata[METADATA_KEY])
    except (ValueError, RecursionError, TypeError):
        raise MalformedArtifact(f"{METADATA_KEY} is not valid JSON") from None
    if not isinstance(record, dict) or record.get("format") != _FORMAT:
        raise MalformedArtifact(f"{METADATA_KEY} is not a format-{_FORMAT} object")
    tensors, fp16, unchanged = record.get("tensors"), record.get("fp16"), record.get("unchanged")
    if not isinstance(tensors, dict) or not all(_valid_entry(e) for e in tensors.values()):
        raise MalformedArtifact(f"{METADATA_KEY} 'tensors' is malformed")
    if not isinstance(fp16, dict) or not all(code in _FLOAT_CODES for code in fp16.values()):
        raise MalformedArtifact(f"{METADATA_KEY} 'fp16' is malformed")
    if not isinstance(unchanged, list) or not all(isinstance(n, str) for n in unchanged):
        raise MalformedArtifact(f"{METADATA_KEY} 'unchanged' is malformed")
    return record


def _valid_entry(entry: object) -> bool:
    if not isinstance(entry, dict):
        return False
    scheme, block = entry.get("scheme"), entry.get("block_size")
    # type() rather than isinstance: JSON 32.0 and true must not pass for a block size.
    grouping_ok = (scheme == "per_channel" and block is None) or (
        scheme == "block" and type(block) is int and block in (32, 64)
    )
    return (
        grouping_ok and isinstance(entry.get("scale"), str) and entry.get("dtype") in _FLOAT_CODES
    )


def format_report(report: tuple[TensorReport, ...] | list[TensorReport]) -> list[tuple[str, ...]]:
    """Rows of text for a table under `REPORT_COLUMNS`: one per tensor, then a total row
    (bytes before and after, compression ratio, min / median SQNR over the INT8 tensors)."""
    rows: list[tuple[str, ...]] = [
        (
            entry.name,
            entry.action,
            "x".join(map(str, entry.shape)) or "scalar",
            f"{entry.bytes_before:,}",
            f"{entry.bytes_after:,}",
            _format_db(entry.sqnr_db),
        )
        for entry in report
    ]
    before = sum(entry.bytes_before for entry in report)
    after = sum(entry.bytes_after for entry in report)
    int8 = [entry.sqnr_db for entry in report if entry.action == "int8"]
    quality = (
        f"min {_format_db(min(int8))} / median {_format_db(statistics.median(int8))}"
        if int8
        else "-"
    )
    ratio = f"{before / after:.2f}x smaller" if after else "-"
    rows.append(("total", ratio, f"{len(report)} tensors", f"{before:,}", f"{after:,}", quality))
    return rows


def _format_db(value: float) -> str:
    return "exact" if value == math.inf else f"{value:.1f}"
