"""Shard plans.

Invariants: every planner's plan stores every element of every tensor exactly once, and
``reassemble(apply_plan(...))`` gives back the checkpoint bit for bit; plans survive JSON;
`validate` and `reassemble` refuse overlaps, gaps and missing or foreign shards.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airlane.artifacts.errors import ArtifactError, MalformedArtifact
from airlane.artifacts.plan import (
    SHARD_METADATA_KEY,
    Piece,
    Shard,
    ShardPlan,
    apply_plan,
    plan_by_head_group,
    plan_by_layer,
    plan_by_size,
    reassemble,
)
from airlane.artifacts.quant import QuantConfig, dequantize, quantize
from airlane.artifacts.tensorfile import Header, TensorFile, read_header, write_tensors

HEADS, KV_HEADS, HEAD_DIM, HIDDEN, VOCAB, LAYERS = 8, 4, 16, 128, 64, 4


def transformer() -> dict[str, np.ndarray]:
    """A small Llama-shaped checkpoint: 8 heads of 16, 4 kv heads, 4 layers."""
    rng = np.random.default_rng(0)

    def rand(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    tensors = {"model.embed_tokens.weight": rand(VOCAB, HIDDEN)}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        tensors |= {
            p + "input_layernorm.weight": rand(HIDDEN),
            p + "self_attn.q_proj.weight": rand(HEADS * HEAD_DIM, HIDDEN),
            p + "self_attn.q_proj.bias": rand(HEADS * HEAD_DIM),
            p + "self_attn.k_proj.weight": rand(KV_HEADS * HEAD_DIM, HIDDEN),
            p + "self_attn.k_proj.bias": rand(KV_HEADS * HEAD_DIM),
            p + "self_attn.v_proj.weight": rand(KV_HEADS * HEAD_DIM, HIDDEN),
            p + "self_attn.v_proj.bias": rand(KV_HEADS * HEAD_DIM),
            p + "self_attn.o_proj.weight": rand(HIDDEN, HEADS * HEAD_DIM),
            p + "self_attn.o_proj.bias": rand(HIDDEN),
            p + "post_attention_layernorm.weight": rand(HIDDEN),
            p + "mlp.up_proj.weight": rand(2 * HIDDEN, HIDDEN),
            p + "mlp.down_proj.weight": rand(HIDDEN, 2 * HIDDEN),
        }
    tensors |= {
        "model.norm.weight": rand(HIDDEN),
        "lm_head.weight": rand(VOCAB, HIDDEN),
        "model.step": np.array(7, dtype=np.int64),
    }
    return tensors


@pytest.fixture
def source(tmp_path: Path) -> Path:
    path = tmp_path / "model.safetensors"
    write_tensors(path, transformer(), {"origin": "test"})
    return path


def head_plan(header: Header, heads_per_group: int = 2) -> ShardPlan:
    return plan_by_head_group(
        header,
        num_heads=HEADS,
        head_dim=HEAD_DIM,
        heads_per_group=heads_per_group,
        num_kv_heads=KV_HEADS,
    )


def round_trip(source: Path, plan: ShardPlan, out: Path) -> list[Path]:
    with TensorFile(source) as tf:
        paths = apply_plan(tf, plan, out)
        original = {name: np.array(array) for name, array in tf.arrays().items()}
    rebuilt = reassemble(paths)
    assert set(rebuilt) == set(original)
    for name, array in original.items():
        assert rebuilt[name].dtype == array.dtype
        np.testing.assert_array_equal(rebuilt[name], array)
    return paths


# -- planners ------------------------------------------------------------------------------


def test_plan_by_layer(source: Path, tmp_path: Path) -> None:
    header = read_header(source)
    plan = plan_by_layer(header, layers_per_shard=3)
    assert [shard.file for shard in plan.shards] == [
        "layers-000-002.safetensors",
        "layers-003-003.safetensors",
        "shared.safetensors",
    ]
    shared = {piece.tensor for piece in plan.shards[-1].pieces}
    assert shared == {
        "model.embed_tokens.weight",
        "model.norm.weight",
        "lm_head.weight",
        "model.step",
    }
    assert all(piece.whole for shard in plan.shards for piece in shard.pieces)
    plan.validate(header)
    paths = round_trip(source, plan, tmp_path / "out")
    assert [p.name for p in paths] == [shard.file for shard in plan.shards]
    assert plan_by_layer(header) == plan_by_layer(header)  # deterministic
    assert len(plan_by_layer(header).shards) == LAYERS + 1


def test_plan_by_layer_patterns() -> None:
    tensors = {"h.0.attn.w": np.zeros(1), "h.10.attn.w": np.zeros(1), "wte": np.zeros(1)}
    header = _header(tensors)
    assert [s.file for s in plan_by_layer(header).shards] == [
        "layers-000-000.safetensors",
        "layers-010-010.safetensors",
        "shared.safetensors",
    ]
    assert [s.file for s in plan_by_layer(header, pattern=r"^(w)").shards] == ["shared.safetensors"]
    with pytest.raises(ArtifactError, match="no group"):
        plan_by_layer(header, pattern=r"h\.\d+")
    with pytest.raises(ArtifactError, match="not a regex"):
        plan_by_layer(header, pattern=r"(")
    with pytest.raises(ArtifactError, match="positive int"):
        plan_by_layer(header, layers_per_shard=0)


def test_plan_by_head_group(source: Path, tmp_path: Path) -> None:
    header = read_header(source)
    plan = head_plan(header)
    files = [shard.file for shard in plan.shards]
    assert files == [
        "heads-000-001.safetensors",
        "heads-002-003.safetensors",
        "heads-004-005.safetensors",
        "heads-006-007.safetensors",
        "rest.safetensors",
    ]
    group1 = {piece.stored_name for piece in plan.shards[1].pieces}
    assert "model.layers.2.self_attn.q_proj.weight@0:32:64" in group1
    assert "model.layers.2.self_attn.q_proj.bias@0:32:64" in group1
    assert "model.layers.2.self_attn.k_proj.weight@0:16:32" in group1
    assert "model.layers.2.self_attn.v_proj.bias@0:16:32" in group1
    assert "model.layers.2.self_attn.o_proj.weight@1:32:64" in group1
    assert len(group1) == LAYERS * 7
    rest = {piece.tensor for piece in plan.shards[-1].pieces}
    assert "model.layers.0.self_attn.o_proj.bias" in rest
    assert "model.layers.0.mlp.up_proj.weight" in rest
    paths = round_trip(source, plan, tmp_path / "out")
    with TensorFile(paths[1]) as tf:
        q = tf.array("model.layers.2.self_attn.q_proj.weight@0:32:64")
        expected = transformer()["model.layers.2.self_attn.q_proj.weight"][32:64]
        np.testing.assert_array_equal(q, expected)


def test_plan_by_head_group_one_group_per_kv_head(source: Path, tmp_path: Path) -> None:
    header = read_header(source)
    plan = head_plan(header, heads_per_group=2)
    plan.validate(header)
    single = plan_by_head_group(
        header, num_heads=HEADS, head_dim=HEAD_DIM, heads_per_group=8, num_kv_heads=4
    )
    assert [s.file for s in single.shards] == ["heads-000-007.safetensors", "rest.safetensors"]
    round_trip(source, single, tmp_path / "single")


def test_plan_by_head_group_refusals(source: Path) -> None:
    header = read_header(source)
    with pytest.raises(ArtifactError, match="4 kv heads do not split into 8 groups"):
        head_plan(header, heads_per_group=1)
    with pytest.raises(ArtifactError, match="does not divide 8"):
        head_plan(header, heads_per_group=3)
    with pytest.raises(
        ArtifactError, match=r"self_attn\.[qo]_proj\.weight' has shape \(128, 128\)"
    ):
        plan_by_head_group(
            header, num_heads=4, head_dim=HEAD_DIM, heads_per_group=2, num_kv_heads=4
        )
    with pytest.raises(ArtifactError, match="k_proj"):
        plan_by_head_group(header, num_heads=HEADS, head_dim=HEAD_DIM, heads_per_group=2)
    with pytest.raises(ArtifactError, match="no tensor matched"):
        plan_by_head_group(
            _header({"a.weight": np.zeros((2, 2))}), num_heads=2, head_dim=1, heads_per_group=1
        )
    with pytest.raises(ArtifactError, match="head_dim"):
        plan_by_head_group(header, num_heads=HEADS, head_dim=0, heads_per_group=2)


def test_head_group_matching_rule() -> None:
    tensors = {
        "attention.self.query.weight": np.zeros((4, 4)),
        "attention.output.dense.weight": np.zeros((4, 4)),
        "output.dense.weight": np.zeros((4, 8)),
        "c_attn.weight": np.zeros((4, 12)),  # fused: never split
        "q_proj.weight": np.zeros((4, 4)),  # a bare fragment matches too
        "my_q_proj.weight": np.zeros((4, 4)),  # not ".q_proj."
    }
    header = _header(tensors)
    with pytest.raises(ArtifactError, match=r"'output\.dense\.weight'"):
        plan_by_head_group(header, num_heads=2, head_dim=2, heads_per_group=1)
    plan = plan_by_head_group(
        header, num_heads=2, head_dim=2, heads_per_group=1, o=("attention.output.dense",)
    )
    sliced = {p.tensor for s in plan.shards for p in s.pieces if not p.whole}
    assert sliced == {
        "attention.self.query.weight",
        "attention.output.dense.weight",
        "q_proj.weight",
    }


def test_plan_by_size(source: Path, tmp_path: Path) -> None:
    header = read_header(source)
    limit = 20_000
    plan = plan_by_size(header, limit)
    assert plan.shards[0].file == "part-00000.safetensors"
    assert all(size is not None and size <= limit for _, _, size in plan.describe(header))
    split = {p.tensor for s in plan.shards for p in s.pieces if not p.whole}
    assert "model.layers.0.self_attn.q_proj.weight" in split  # 64 KiB
    assert "model.layers.0.input_layernorm.weight" not in split
    round_trip(source, plan, tmp_path / "out")
    whole = plan_by_size(header, 10**9)
    assert len(whole.shards) == 1


def test_plan_by_size_oversized_rows_get_their_own_file(tmp_path: Path) -> None:
    tensors = {
        "a": np.zeros(3, np.float32),
        "row": np.arange(50, dtype=np.float32).reshape(1, 50),
        "rows": np.arange(150, dtype=np.float32).reshape(3, 50),
        "s": np.array(1.0),
    }
    path = tmp_path / "m.safetensors"
    header = write_tensors(path, tensors)
    plan = plan_by_size(header, 16)
    described = {file: (count, size) for file, count, size in plan.describe(header)}
    assert sorted(described.values()) == sorted(
        [(1, 12), (1, 200), (1, 200), (1, 200), (1, 200), (1, 8)]
    )
    round_trip(path, plan, tmp_path / "out")
    with pytest.raises(ArtifactError, match="positive int"):
        plan_by_size(header, 0)


def test_empty_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "empty.safetensors"
    header = write_tensors(path, {})
    for plan in (plan_by_layer(header), plan_by_size(header, 10)):
        assert plan.shards == ()
        plan.validate(header)
        with TensorFile(path) as tf:
            assert apply_plan(tf, plan, tmp_path / "out") == []
    assert reassemble([]) == {}


def test_shards_keep_source_metadata_and_quantization(source: Path, tmp_path: Path) -> None:
    with TensorFile(source) as tf:
        quantized = quantize(tf.arrays(), QuantConfig("block", 32))
    qpath = tmp_path / "q.safetensors"
    write_tensors(qpath, quantized.tensors, quantized.metadata)
    header = read_header(qpath)
    plan = head_plan(header)
    with TensorFile(qpath) as tf:
        paths = apply_plan(tf, plan, tmp_path / "shards")
    shard = read_header(paths[0])
    assert shard.metadata["airlane.quant"] == quantized.metadata["airlane.quant"]
    record = json.loads(shard.metadata[SHARD_METADATA_KEY])
    assert record["plan"] == "head_group" and record["file"] == paths[0].name
    restored = dequantize(reassemble(paths), shard.metadata)
    expected = dequantize(quantized.tensors, quantized.metadata)
    for name, value in expected.items():
        np.testing.assert_array_equal(restored[name], value)


# -- JSON ----------------------------------------------------------------------------------


def test_json_round_trip(source: Path) -> None:
    header = read_header(source)
    for plan in (plan_by_layer(header, 2), head_plan(header), plan_by_size(header, 30_000)):
        text = json.dumps(plan.to_json())
        again = ShardPlan.from_json(json.loads(text))
        assert again == plan
        again.validate(header)
        assert again.describe() == plan.describe(header)


pieces = st.one_of(
    st.builds(Piece, st.text(min_size=1, max_size=6)),
    st.builds(
        lambda name, axis, start, length: Piece(name, axis, start, start + length),
        st.text(min_size=1, max_size=6),
        st.integers(0, 3),
        st.integers(0, 1000),
        st.integers(1, 1000),
    ),
)
shards = st.builds(
    Shard,
    st.from_regex(r"[a-z0-9][a-z0-9_-]{0,10}\.safetensors", fullmatch=True),
    st.lists(pieces, max_size=4, unique_by=lambda p: p.stored_name).map(tuple),
    st.one_of(st.none(), st.integers(0, 10**12)),
)
plans = st.builds(
    ShardPlan,
    st.sampled_from(["layer", "head_group", "size"]),
    st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5), max_size=3),
    st.lists(shards, max_size=4, unique_by=lambda s: s.file).map(tuple),
)


@settings(max_examples=100, deadline=None)
@given(plans)
def test_any_plan_survives_json(plan: ShardPlan) -> None:
    assert ShardPlan.from_json(json.loads(json.dumps(plan.to_json()))) == plan


def _plan_json(**shard: Any) -> dict[str, Any]:
    base = {
        "file": "a.safetensors",
        "pieces": [{"tensor": "w", "axis": None, "start": None, "stop": None}],
    }
    return {"format": 1, "strategy": "size", "params": {}, "shards": [base | shard]}


def _piece_json(**piece: Any) -> dict[str, Any]:
    return _plan_json(pieces=[{"tensor": "w", "axis": 0, "start": 0, "stop": 2} | piece])


MALFORMED_PLANS = [
    ("not object", [], "format, strategy, params, shards"),
    ("extra key", _plan_json() | {"x": 1}, "format, strategy, params, shards"),
    ("format", _plan_json() | {"format": 2}, "plan format 2"),
    ("format bool", _plan_json() | {"format": True}, "plan format True"),
    ("strategy", _plan_json() | {"strategy": "random"}, "unknown sharding strategy"),
    ("params", _plan_json() | {"params": []}, "params must be an object"),
    ("shards", _plan_json() | {"shards": {}}, "shards a list"),
    ("shard not object", _plan_json() | {"shards": [1]}, "a shard is an object"),
    ("pieces not list", _plan_json(pieces={}), "is not a list"),
    ("escape", _plan_json(file="../evil.safetensors"), "not a plain file name"),
    ("subdir", _plan_json(file="a/b.safetensors"), "contains a directory"),
    ("backslash", _plan_json(file="a\\b.safetensors"), "contains a directory"),
    ("file type", _plan_json(file=3), "not a plain file name"),
    ("bytes", _plan_json(bytes=-1), "nbytes must be"),
    ("piece keys", _plan_json(pieces=[{"tensor": "w"}]), "a piece is an object"),
    ("empty name", _piece_json(tensor=""), "non-empty name"),
    ("bool axis", _piece_json(axis=True), "must be ints >= 0"),
    ("float start", _piece_json(start=0.0), "must be ints >= 0"),
    ("negative", _piece_json(start=-1), "must be ints >= 0"),
    ("empty slice", _piece_json(start=2, stop=2), "is empty"),
    ("whole with start", _piece_json(axis=None, start=0, stop=None), "has start or stop"),
    (
        "same name twice",
        _plan_json(pieces=[_piece_json()["shards"][0]["pieces"][0]] * 2),
        "same name twice",
    ),
    (
        "same file twice",
        _plan_json() | {"shards": _plan_json()["shards"] * 2},
        "same file name",
    ),
]


@pytest.mark.parametrize(
    ("obj", "message"), [m[1:] for m in MALFORMED_PLANS], ids=[m[0] for m in MALFORMED_PLANS]
)
def test_malformed_plans_are_refused(obj: Any, message: str) -> None:
    with pytest.raises(MalformedArtifact, match=message.replace("(", r"\(")):
        ShardPlan.from_json(obj)


# -- coverage ------------------------------------------------------------------------------


def _header(tensors: dict[str, np.ndarray]) -> Header:
    import safetensors.numpy

    from airlane.artifacts.tensorfile import parse_header

    blob = safetensors.numpy.save(tensors)
    return parse_header(blob, len(blob))


COVERAGE_HEADER = _header({"w": np.zeros((4, 6), np.float32), "b": np.zeros(4, np.float32)})
B = Piece("b")


def _coverage_plan(*pieces: Piece, nbytes: int | None = None) -> ShardPlan:
    return ShardPlan("size", {}, (Shard("a.safetensors", (B, *pieces), nbytes),))


COVERAGE_FAULTS = [
    ("missing", _coverage_plan(), "no shard stores tensor 'w'"),
    ("unknown", _coverage_plan(Piece("w"), Piece("x")), "unknown 'x'"),
    (
        "twice",
        ShardPlan("size", {}, (Shard("a", (B, Piece("w"))), Shard("b", (Piece("w"),)))),
        "more than once",
    ),
    ("whole and slice", _coverage_plan(Piece("w"), Piece("w", 0, 0, 2)), "more than once"),
    ("gap", _coverage_plan(Piece("w", 0, 0, 1), Piece("w", 0, 2, 4)), "elements 1:2 of axis 0"),
    ("overlap", _coverage_plan(Piece("w", 0, 0, 3), Piece("w", 0, 2, 4)), "overlap at 2:3"),
    ("short", _coverage_plan(Piece("w", 1, 0, 5)), "cover 5 of the 6 of axis 1"),
    ("too long", _coverage_plan(Piece("w", 0, 0, 5)), "cover 5 of the 4"),
    ("bad axis", _coverage_plan(Piece("w", 2, 0, 1)), "has no axis 2"),
    ("mixed axes", _coverage_plan(Piece("w", 0, 0, 4), Piece("w", 1, 0, 6)), "more than one axis"),
    ("wrong bytes", _coverage_plan(Piece("w"), nbytes=5), "records the wrong size"),
]


@pytest.mark.parametrize(
    ("plan", "message"), [c[1:] for c in COVERAGE_FAULTS], ids=[c[0] for c in COVERAGE_FAULTS]
)
def test_validate_catches_coverage_faults(plan: ShardPlan, message: str) -> None:
    with pytest.raises(ArtifactError, match=message):
        plan.validate(COVERAGE_HEADER)


def test_validate_accepts_exact_tilings() -> None:
    _coverage_plan(Piece("w")).validate(COVERAGE_HEADER)
    _coverage_plan(Piece("w", 1, 3, 6), Piece("w", 1, 0, 3), nbytes=112).validate(COVERAGE_HEADER)


def test_apply_plan_validates_first(source: Path, tmp_path: Path) -> None:
    header = read_header(source)
    plan = plan_by_layer(header)
    broken = ShardPlan("layer", {}, plan.shards[:-1])
    with TensorFile(source) as tf, pytest.raises(ArtifactError, match="no shard stores"):
        apply_plan(tf, broken, tmp_path / "out")
    assert not (tmp_path / "out").exists()


# -- reassembly ----------------------------------------------------------------------------


@pytest.fixture
def shards(source: Path, tmp_path: Path) -> list[Path]:
    with TensorFile(source) as tf:
        return apply_plan(tf, head_plan(tf.header), tmp_path / "shards")


def test_reassemble_refuses_missing_shard(shards: list[Path]) -> None:
    with pytest.raises(MalformedArtifact, match=r"shards missing: heads-002-003\.safetensors"):
        reassemble([shards[0], *shards[2:]])


def test_reassemble_refuses_repeated_shard(shards: list[Path]) -> None:
    with pytest.raises(MalformedArtifact, match="given twice"):
        reassemble([*shards, shards[0]])


def test_reassemble_refuses_foreign_shard(shards: list[Path], source: Path, tmp_path: Path) -> None:
    with TensorFile(source) as tf:
        other = apply_plan(tf, plan_by_layer(tf.header), tmp_path / "other")
    with pytest.raises(MalformedArtifact, match="different plan"):
        reassemble([*shards, other[0]])


def _rewrite(path: Path, change: Any) -> None:
    with TensorFile(path) as tf:
        tensors = {name: np.array(a) for name, a in tf.arrays().items()}
        metadata = dict(tf.header.metadata)
    change(tensors, metadata)
    write_tensors(path, tensors, metadata)


def _edit_record(change: Any) -> Any:
    def edit(tensors: dict[str, Any], metadata: dict[str, str]) -> None:
        record = json.loads(metadata[SHARD_METADATA_KEY])
        change(record)
        metadata[SHARD_METADATA_KEY] = json.dumps(record)

    return edit


def _first_piece(record: dict[str, Any]) -> dict[str, Any]:
    return next(iter(record["pieces"].values()))


SHARD_TAMPERS = [
    ("no record", lambda t, m: m.pop(SHARD_METADATA_KEY), "has no airlane.shard"),
    ("not json", lambda t, m: m.__setitem__(SHARD_METADATA_KEY, "{"), "not valid JSON"),
    ("keys", _edit_record(lambda r: r.pop("files")), "not an object of plan"),
    ("file", _edit_record(lambda r: r.__setitem__("file", "zzz")), "'file' is not among"),
    ("unlisted tensor", lambda t, m: t.__setitem__("extra", np.zeros(1)), "exactly the stored"),
    ("shape", _edit_record(lambda r: _first_piece(r).__setitem__("shape", "x")), "no valid shape"),
    ("piece", _edit_record(lambda r: _first_piece(r).__setitem__("stop", 0)), "is empty"),
    (
        "full shape",
        _edit_record(lambda r: _first_piece(r).__setitem__("shape", [999, HIDDEN])),
        "disagree on its shape",
    ),
]


@pytest.mark.parametrize(
    ("change", "message"), [t[1:] for t in SHARD_TAMPERS], ids=[t[0] for t in SHARD_TAMPERS]
)
def test_reassemble_refuses_tampered_shards(shards: list[Path], change: Any, message: str) -> None:
    _rewrite(shards[0], change)
    with pytest.raises(MalformedArtifact, match=message):
        reassemble(shards)


def test_reassemble_refuses_resized_piece(shards: list[Path]) -> None:
    def shrink(tensors: dict[str, Any], metadata: dict[str, str]) -> None:
        name = next(n for n in tensors if n.endswith("q_proj.weight@0:0:32"))
        tensors[name] = tensors[name][:5]

    _rewrite(shards[0], shrink)
    with pytest.raises(MalformedArtifact, match="has shape"):
        reassemble(shards)
