"""Shard plans: which bytes of a checkpoint go into which file, written down as data.

A `ShardPlan` is a list of `Shard` files, each a list of `Piece` s; a piece is a whole source
tensor or a slice ``[start:stop]`` of it along one axis. Plans are plain JSON (`to_json`,
`from_json`), so a plan can be reviewed, stored next to the shards, and replayed. A plan is
*valid* for a checkpoint when it stores every element of every tensor exactly once
(`ShardPlan.validate`); a tensor may be cut along one axis only, which keeps the check a
one-dimensional interval tiling.

Three planners, all deterministic:

- `plan_by_layer`: tensors with a layer index in their name, ``layers_per_shard`` layers to a
  file; everything else in ``shared.safetensors``.
- `plan_by_head_group`: attention projections cut by groups of heads, so group ``g``'s file
  holds what one tensor-parallel rank needs of every layer; everything else in
  ``rest.safetensors``.
- `plan_by_size`: files of at most ``max_bytes``, packed greedily in file order.

`apply_plan` writes the shards; each carries the ``airlane.shard`` metadata entry (which piece
each stored tensor is, and which files make up the whole) from which `reassemble` puts the
checkpoint back together, refusing a missing, repeated or foreign shard.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeGuard

import numpy as np
import numpy.typing as npt

from airlane.artifacts.errors import ArtifactError, MalformedArtifact
from airlane.artifacts.tensorfile import Header, TensorFile, TensorInfo, write_tensors

__all__ = [
    "DEFAULT_LAYER_PATTERN",
    "SHARD_METADATA_KEY",
    "STRATEGIES",
    "Piece",
    "Shard",
    "ShardPlan",
    "apply_plan",
    "plan_by_head_group",
    "plan_by_layer",
    "plan_by_size",
    "reassemble",
]

STRATEGIES: Final = ("layer", "head_group", "size")
"""The planners' names, as `ShardPlan.strategy` records them."""
SHARD_METADATA_KEY: Final = "airlane.shard"
"""The metadata entry `apply_plan` writes in every shard and `reassemble` reads."""
DEFAULT_LAYER_PATTERN: Final = r"(?:^|\.)(?:layers|layer|h|blocks|block)\.(\d+)\."
"""Where a layer index sits in Llama (``model.layers.3.``), BERT (``encoder.layer.3.``),
GPT-2 (``h.3.``) and ViT-style (``blocks.3.``) names."""

_FORMAT: Final = 1
_PIECE_KEYS: Final = frozenset({"tensor", "axis", "start", "stop"})
_SHARD_KEYS: Final = frozenset({"file", "pieces", "bytes"})


def _is_count(value: object) -> TypeGuard[int]:
    """A non-negative int, and not a bool (which JSON ``true`` becomes)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


@dataclass(frozen=True, slots=True)
class Piece:
    """A whole source tensor (``axis`` None) or its slice ``[start:stop]`` along ``axis``."""

    tensor: str
    """The source tensor's name."""
    axis: int | None = None
    start: int | None = None
    stop: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.tensor, str) or not self.tensor:
            raise ArtifactError(f"a piece's tensor must be a non-empty name, not {self.tensor!r}")
        start, stop = self.start, self.stop
        if self.axis is None:
            if start is not None or stop is not None:
                raise ArtifactError(f"whole piece of {self.tensor!r} has start or stop")
        elif not (_is_count(self.axis) and _is_count(start) and _is_count(stop)):
            raise ArtifactError(f"slice of {self.tensor!r}: axis, start, stop must be ints >= 0")
        elif start >= stop:
            raise ArtifactError(f"slice of {self.tensor!r} is empty: {start}:{stop}")

    @property
    def whole(self) -> bool:
        """Whether this is the whole tensor."""
        return self.axis is None

    @property
    def stored_name(self) -> str:
        """Its name inside the shard: the source name, or ``name@axis:start:stop``."""
        if self.axis is None:
            return self.tensor
        return f"{self.tensor}@{self.axis}:{self.start}:{self.stop}"

    def nbytes(self, info: TensorInfo) -> int:
        """Its size, given its source tensor's entry."""
        if self.axis is None or self.start is None or self.stop is None:
            return info.nbytes
        return info.nbytes * (self.stop - self.start) // info.shape[self.axis]

    def to_json(self) -> dict[str, Any]:
        """Its JSON form: ``{"tensor", "axis", "start", "stop"}``."""
        return {"tensor": self.tensor, "axis": self.axis, "start": self.start, "stop": self.stop}


@dataclass(frozen=True, slots=True)
class Shard:
    """One output file and the pieces it stores."""

    file: str
    """A bare file name (no directories): shards are written into one output directory."""
    pieces: tuple[Piece, ...]
    nbytes: int | None = None
    """Its bytes of tensor data, as the planner computed them (None if not recorded), so a
    plan can be described without its checkpoint at hand."""

    def __post_init__(self) -> None:
        name = self.file
        if self.nbytes is not None and not _is_count(self.nbytes):
            raise ArtifactError(f"shard {name!r}: nbytes must be an int >= 0 or None")
        # A plan may come from JSON: never let it write outside the output directory.
        if not isinstance(name, str) or not name or name.startswith(".") or "\0" in name:
            raise ArtifactError(f"shard file name {name!r} is not a plain file name")
        if "/" in name or "\\" in name:
            raise ArtifactError(f"shard file name {name!r} contains a directory")
        stored = [piece.stored_name for piece in self.pieces]
        if len(set(stored)) != len(stored):
            raise ArtifactError(f"shard {name!r} stores the same name twice")


@dataclass(frozen=True, slots=True)
class ShardPlan:
    """How a checkpoint is cut into shards (module docstring)."""

    strategy: str
    """Which planner made it: one of `STRATEGIES`."""
    params: dict[str, Any]
    """The planner's arguments, for the record."""
    shards: tuple[Shard, ...]

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ArtifactError(f"unknown sharding strategy {self.strategy!r}")
        files = [shard.file for shard in self.shards]
        if len(set(files)) != len(files):
            raise ArtifactError("two shards have the same file name")

    def to_json(self) -> dict[str, Any]:
        """The plan as a JSON-ready object; `from_json` reads it back."""
        return {
            "format": _FORMAT,
            "strategy": self.strategy,
            "params": dict(self.params),
            "shards": [
                {
                    "file": shard.file,
                    "bytes": shard.nbytes,
                    "pieces": [piece.to_json() for piece in shard.pieces],
                }
                for shard in self.shards
            ],
        }

    @classmethod
    def from_json(cls, obj: object) -> ShardPlan:
        """Read a plan written by `to_json`; `MalformedArtifact` says what is wrong."""
        if not isinstance(obj, dict) or obj.keys() != {"format", "strategy", "params", "shards"}:
            raise MalformedArtifact("a plan is an object of format, strategy, params, shards")
        if obj["format"] != _FORMAT or isinstance(obj["format"], bool):
            raise MalformedArtifact(f"plan format {obj['format']!r} is not {_FORMAT}")
        if not isinstance(obj["params"], dict) or not isinstance(obj["shards"], list):
            raise MalformedArtifact("plan params must be an object and shards a list")
        try:
            shards = tuple(_shard_from_json(shard) for shard in obj["shards"])
            return cls(obj["strategy"], dict(obj["params"]), shards)
        except MalformedArtifact:
            raise
        except ArtifactError as exc:
            raise MalformedArtifact(str(exc)) from None

    def validate(self, header: Header) -> None:
        """Check that the plan stores every element of every tensor of ``header`` exactly
        once, with in-bounds slices on valid axes; `ArtifactError` otherwise."""
        for name, pieces in self._pieces_by_tensor(header).items():
            fault = _coverage_fault(name, header.tensor(name).shape, pieces)
            if fault is not None:
                raise ArtifactError(fault)
        for shard in self.shards:
            if shard.nbytes is not None and shard.nbytes != _shard_bytes(shard.pieces, header):
                raise ArtifactError(f"shard {shard.file!r} records the wrong size")

    def describe(self, header: Header | None = None) -> list[tuple[str, int, int | None]]:
        """One row per shard for a table: file, number of pieces, bytes of tensor data
        (computed from ``header`` if given, else as recorded; None if neither)."""
        return [
            (
                shard.file,
                len(shard.pieces),
                shard.nbytes if header is None else _shard_bytes(shard.pieces, header),
            )
            for shard in self.shards
        ]

    def _pieces_by_tensor(self, header: Header) -> dict[str, list[Piece]]:
        by_tensor: dict[str, list[Piece]] = {name: [] for name in header.names()}
        for shard in self.shards:
            for piece in shard.pieces:
                if piece.tensor not in by_tensor:
                    raise ArtifactError(f"shard {shard.file!r} names unknown {piece.tensor!r}")
                by_tensor[piece.tensor].append(piece)
        return by_tensor


def _shard_from_json(obj: object) -> Shard:
    if not isinstance(obj, dict) or not {"file", "pieces"} <= obj.keys() <= _SHARD_KEYS:
        raise MalformedArtifact("a shard is an object of file, pieces and (optional) bytes")
    if not isinstance(obj["pieces"], list):
        raise MalformedArtifact(f"pieces of shard {obj['file']!r} is not a list")
    pieces = tuple(_piece_from_json(piece) for piece in obj["pieces"])
    return Shard(obj["file"], pieces, obj.get("bytes"))


def _shard(file: str, pieces: Sequence[Piece], header: Header) -> Shard:
    return Shard(file, tuple(pieces), _shard_bytes(pieces, header))


def _shard_bytes(pieces: Iterable[Piece], header: Header) -> int:
    return sum(piece.nbytes(header.tensor(piece.tensor)) for piece in pieces)


def _piece_from_json(obj: object, extra: frozenset[str] = frozenset()) -> Piece:
    if not isinstance(obj, dict) or obj.keys() != _PIECE_KEYS | extra:
        keys = ", ".join(sorted(_PIECE_KEYS | extra))
        raise MalformedArtifact(f"a piece is an object of {keys}")
    return Piece(obj["tensor"], obj["axis"], obj["start"], obj["stop"])


def _coverage_fault(name: str, shape: tuple[int, ...], pieces: Sequence[Piece]) -> str | None:
    """Why ``pieces`` do not store tensor ``name`` exactly once, or None if they do."""
    if not pieces:
        return f"no shard stores tensor {name!r}"
    if any(piece.whole for piece in pieces):
        return None if len(pieces) == 1 else f"tensor {name!r} is stored more than once"
    axes = {piece.axis for piece in pieces}
    axis = pieces[0].axis
    if len(axes) > 1 or axis is None:
        return f"tensor {name!r} is cut along more than one axis"
    if axis >= len(shape):
        return f"tensor {name!r} of shape {shape} has no axis {axis}"
    position = 0
    for piece in sorted(pieces, key=lambda p: p.start or 0):
        start, stop = piece.start or 0, piece.stop or 0
        if start > position:
            return f"tensor {name!r}: elements {position}:{start} of axis {axis} are not stored"
        if start < position:
            return f"tensor {name!r}: slices overlap at {start}:{position} of axis {axis}"
        position = stop
    if position != shape[axis]:
        return f"tensor {name!r}: slices cover {position} of the {shape[axis]} of axis {axis}"
    return None


def plan_by_layer(
    header: Header, layers_per_shard: int = 1, pattern: str = DEFAULT_LAYER_PATTERN
) -> ShardPlan:
    """One shard per ``layers_per_shard`` consecutive layer indices, named after the first
    and last layer it holds (``layers-000-003.safetensors``), then ``shared.safetensors``.

    The layer index is the first group of ``pattern`` found in a tensor's name. Indices are
    read as numbers only: an encoder and a decoder both having a layer 0 share a shard.
    """
    if not _is_count(layers_per_shard) or layers_per_shard < 1:
        raise ArtifactError(f"layers_per_shard must be a positive int, not {layers_per_shard!r}")
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        raise ArtifactError(f"layer pattern {pattern!r} is not a regex: {exc}") from None
    if regex.groups < 1:
        raise ArtifactError(f"layer pattern {pattern!r} has no group for the layer index")
    groups: dict[int, list[tuple[int, Piece]]] = {}
    shared = []
    for info in header.tensors:
        found = regex.search(info.name)
        if found is None or not (found.group(1) or "").isdecimal():
            shared.append(Piece(info.name))
            continue
        layer = int(found.group(1))
        groups.setdefault(layer // layers_per_shard, []).append((layer, Piece(info.name)))
    shards = []
    for group in sorted(groups):
        layers = [layer for layer, _ in groups[group]]
        file = f"layers-{min(layers):03d}-{max(layers):03d}.safetensors"
        shards.append(_shard(file, [piece for _, piece in groups[group]], header))
    if shared:
        shards.append(_shard("shared.safetensors", shared, header))
    params = {"layers_per_shard": layers_per_shard, "pattern": pattern}
    return ShardPlan("layer", params, tuple(shards))


def plan_by_head_group(
    header: Header,
    *,
    num_heads: int,
    head_dim: int,
    heads_per_group: int,
    num_kv_heads: int | None = None,
    q: Sequence[str] = ("q_proj", "query", "wq"),
    k: Sequence[str] = ("k_proj", "key", "wk"),
    v: Sequence[str] = ("v_proj", "value", "wv"),
    o: Sequence[str] = ("o_proj", "out_proj", "wo", "dense"),
) -> ShardPlan:
    """Cut attention projections into ``num_heads / heads_per_group`` head groups.

    **Matching.** A tensor is a projection when its name is ``<fragment>.weight`` or
    ``<fragment>.bias``, or ends with ``.<fragment>.weight`` / ``.<fragment>.bias``, for a
    fragment of ``q``, ``k``, ``v`` or ``o`` (checked in that order); a fragment may itself
    hold dots (``attention.output.dense``) to tell apart modules that share a last name.

    **Cutting.** q/k/v weights ``[heads * head_dim, hidden]`` and their biases are cut along
    axis 0, o weights ``[hidden, heads * head_dim]`` along axis 1; o biases are not per head
    and go to ``rest.safetensors`` with everything unmatched. Under grouped-query attention
    k/v have ``num_kv_heads`` heads, which must split into the same number of groups. Shard
    ``heads-<first>-<last>.safetensors`` holds one group's slices of every layer.

    Fused layouts (``qkv_proj``, GPT-2's ``c_attn``, ``query_key_value``) interleave q, k and v
    in ways that differ by model, so they match no default fragment and stay whole in ``rest``.
    """
    for label, value in (("num_heads", num_heads), ("head_dim", head_dim)):
        if not _is_count(value) or value < 1:
            raise ArtifactError(f"{label} must be a positive int, not {value!r}")
    if not _is_count(heads_per_group) or heads_per_group < 1 or num_heads % heads_per_group:
        raise ArtifactError(f"heads_per_group {heads_per_group!r} does not divide {num_heads}")
    group_count = num_heads // heads_per_group
    kv_heads = num_heads if num_kv_heads is None else num_kv_heads
    if not _is_count(kv_heads) or kv_heads < 1 or kv_heads % group_count:
        raise ArtifactError(f"{kv_heads!r} kv heads do not split into {group_count} groups")
    roles = {"q": tuple(q), "k": tuple(k), "v": tuple(v), "o": tuple(o)}
    per_group: list[list[Piece]] = [[] for _ in range(group_count)]
    rest = []
    for info in header.tensors:
        role = _projection_role(info.name, roles)
        if role is None or (role == "o" and info.name.endswith(".bias")):
            rest.append(Piece(info.name))
            continue
        heads = kv_heads if role in ("k", "v") else num_heads
        axis = 1 if role == "o" else 0
        _check_projection(info, axis, heads * head_dim)
        width = heads // group_count * head_dim
        for group, pieces in enumerate(per_group):
            pieces.append(Piece(info.name, axis, group * width, (group + 1) * width))
    if not per_group[0]:
        raise ArtifactError("no tensor matched the q/k/v/o projection names")
    shards = [
        _shard(_heads_file(group, heads_per_group), pieces, header)
        for group, pieces in enumerate(per_group)
    ]
    if rest:
        shards.append(_shard("rest.safetensors", rest, header))
    params = {
        "num_heads": num_heads,
        "head_dim": head_dim,
        "heads_per_group": heads_per_group,
        "num_kv_heads": kv_heads,
        **{role: list(fragments) for role, fragments in roles.items()},
    }
    return ShardPlan("head_group", params, tuple(shards))


def _projection_role(name: str, roles: dict[str, tuple[str, ...]]) -> str | None:
    module, _, kind = name.rpartition(".")
    if kind not in ("weight", "bias"):
        return None
    for role, fragments in roles.items():
        if any(module == frag or module.endswith(f".{frag}") for frag in fragments):
            return role
    return None


def _check_projection(info: TensorInfo, axis: int, width: int) -> None:
    ndim = 1 if info.name.endswith(".bias") else 2
    if len(info.shape) != ndim or info.shape[axis] != width:
        raise ArtifactError(
            f"tensor {info.name!r} has shape {info.shape}; expected {ndim} dims "
            f"with {width} (heads x head_dim) on axis {axis}"
        )


def _heads_file(group: int, heads_per_group: int) -> str:
    first = group * heads_per_group
    return f"heads-{first:03d}-{first + heads_per_group - 1:03d}.safetensors"


def plan_by_size(header: Header, max_bytes: int) -> ShardPlan:
    """Files of at most ``max_bytes`` of tensor data (``part-00000.safetensors``...), packed
    greedily with whole tensors in file order.

    A tensor larger than ``max_bytes`` is cut along axis 0 into row ranges of at most
    ``max_bytes``. One row larger than ``max_bytes`` (or a tensor with a single row, or none)
    cannot be cut that way: it becomes one oversized piece in a file of its own.
    """
    if not _is_count(max_bytes) or max_bytes < 1:
        raise ArtifactError(f"max_bytes must be a positive int, not {max_bytes!r}")
    shards: list[Shard] = []
    current: list[Piece] = []
    filled = 0
    for piece, size in _size_pieces(header, max_bytes):
        if current and filled + size > max_bytes:
            shards.append(_shard(f"part-{len(shards):05d}.safetensors", current, header))
            current, filled = [], 0
        current.append(piece)
        filled += size
    if current:
        shards.append(_shard(f"part-{len(shards):05d}.safetensors", current, header))
    return ShardPlan("size", {"max_bytes": max_bytes}, tuple(shards))


def _size_pieces(header: Header, max_bytes: int) -> Iterable[tuple[Piece, int]]:
    for info in header.tensors:
        if info.nbytes <= max_bytes or len(info.shape) == 0 or info.shape[0] <= 1:
            yield Piece(info.name), info.nbytes
            continue
        rows = info.shape[0]
        row_bytes = info.nbytes // rows
        step = max(1, max_bytes // row_bytes)
        for start in range(0, rows, step):
            stop = min(rows, start + step)
            yield Piece(info.name, 0, start, stop), (stop - start) * row_bytes


def apply_plan(source: TensorFile, plan: ShardPlan, out_dir: Path) -> list[Path]:
    """Validate ``plan`` against ``source``, then write its shards into ``out_dir``.

    Each shard keeps the source's metadata (``airlane.quant``, say) and adds
    ``airlane.shard``. Tensors must have a numpy dtype (not BF16 or F8): slices are cut as
    numpy views.
    """
    plan.validate(source.header)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = [shard.file for shard in plan.shards]
    written = []
    for shard in plan.shards:
        arrays: dict[str, npt.NDArray[Any]] = {}
        pieces: dict[str, dict[str, Any]] = {}
        for piece in shard.pieces:
            full = source.array(piece.tensor)
            arrays[piece.stored_name] = _cut(full, piece)
            pieces[piece.stored_name] = {**piece.to_json(), "shape": list(full.shape)}
        record = {"plan": plan.strategy, "file": shard.file, "files": files, "pieces": pieces}
        metadata = dict(source.header.metadata)
        metadata[SHARD_METADATA_KEY] = json.dumps(record, separators=(",", ":"))
        write_tensors(out_dir / shard.file, arrays, metadata)
        written.append(out_dir / shard.file)
    return written


def _cut(array: npt.NDArray[Any], piece: Piece) -> npt.NDArray[Any]:
    """The view of ``array`` that ``piece`` stores."""
    if piece.axis is None:
        return array
    return array[(*(slice(None),) * piece.axis, slice(piece.start, piece.stop))]


def reassemble(paths: Iterable[Path]) -> dict[str, npt.NDArray[Any]]:
    """Read shards written by `apply_plan` and put every source tensor back together.

    Raises `MalformedArtifact` if a shard lacks or garbles its ``airlane.shard`` entry, if
    shards are missing, repeated or from different plans, or if pieces do not fit together.
    """
    parts: dict[str, list[tuple[Piece, tuple[int, ...], npt.NDArray[Any]]]] = {}
    seen: list[str] = []
    expected: list[str] | None = None
    for path in paths:
        with TensorFile(path) as shard:
            record = _shard_record(shard)
            if record["file"] in seen:
                raise MalformedArtifact(f"shard {record['file']!r} was given twice")
            if expected is not None and record["files"] != expected:
                raise MalformedArtifact(f"{path} belongs to a different plan")
            seen.append(record["file"])
            expected = record["files"]
            for stored, (piece, shape) in record["pieces"].items():
                array = np.array(shard.array(stored))  # a copy: the file closes below
                parts.setdefault(piece.tensor, []).append((piece, shape, array))
    if expected is not None and sorted(seen) != sorted(expected):
        missing = sorted(set(expected) - set(seen))
        raise MalformedArtifact(f"shards missing: {', '.join(missing)}")
    return {name: _join(name, pieces) for name, pieces in parts.items()}


def _shard_record(shard: TensorFile) -> dict[str, Any]:
    """Parse a shard's ``airlane.shard`` entry; pieces become ``(Piece, full shape)``."""
    where = f"{shard.path}: {SHARD_METADATA_KEY}"
    text = shard.header.metadata.get(SHARD_METADATA_KEY)
    if text is None:
        raise MalformedArtifact(f"{shard.path} has no {SHARD_METADATA_KEY} metadata")
    try:
        record = json.loads(text)
    except (ValueError, RecursionError):
        raise MalformedArtifact(f"{where} is not valid JSON") from None
    if not isinstance(record, dict) or record.keys() != {"plan", "file", "files", "pieces"}:
        raise MalformedArtifact(f"{where} is not an object of plan, file, files, pieces")
    files, pieces = record["files"], record["pieces"]
    if not isinstance(files, list) or not all(isinstance(name, str) for name in files):
        raise MalformedArtifact(f"{where} 'files' is not a list of names")
    if record["file"] not in files or not isinstance(pieces, dict):
        raise MalformedArtifact(f"{where} 'file' is not among 'files', or 'pieces' is no object")
    if set(pieces) != set(shard.header.names()):
        raise MalformedArtifact(f"{where} 'pieces' does not list exactly the stored tensors")
    parsed = {}
    for stored, entry in pieces.items():
        shape = entry.get("shape") if isinstance(entry, dict) else None
        if not isinstance(shape, list) or not all(map(_is_count, shape)):
            raise MalformedArtifact(f"{where} piece {stored!r} has no valid shape")
        try:
            piece = _piece_from_json(entry, frozenset({"shape"}))
        except ArtifactError as exc:
            raise MalformedArtifact(f"{where}: {exc}") from None
        parsed[stored] = (piece, tuple(shape))
    return {**record, "pieces": parsed}


def _join(
    name: str, parts: list[tuple[Piece, tuple[int, ...], npt.NDArray[Any]]]
) -> npt.NDArray[Any]:
    shape = parts[0][1]
    if any(part_shape != shape for _, part_shape, _ in parts):
        raise MalformedArtifact(f"pieces of tensor {name!r} disagree on its shape")
    fault = _coverage_fault(name, shape, [piece for piece, _, _ in parts])
    if fault is not None:
        raise MalformedArtifact(fault)
    dtypes = {array.dtype for _, _, array in parts}
    if len(dtypes) > 1:
        raise MalformedArtifact(f"pieces of tensor {name!r} have different dtypes")
    for piece, _, array in parts:
        expected = list(shape)
        if piece.axis is not None and piece.start is not None and piece.stop is not None:
            expected[piece.axis] = piece.stop - piece.start
        if array.shape != tuple(expected):
            raise MalformedArtifact(f"piece {piece.stored_name!r} has shape {array.shape}")
    if parts[0][0].whole:
        return parts[0][2]
    ordered = sorted(parts, key=lambda part: part[0].start or 0)
    return np.concatenate([array for _, _, array in ordered], axis=parts[0][0].axis)
