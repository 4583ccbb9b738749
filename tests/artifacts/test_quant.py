"""Symmetric INT8 quantization.

Invariant: for every finite float input, ``|x - dequantize(quantize(x))| <= scale / 2`` per
element (plus float32 rounding of the product), where ``scale`` is the element's group scale;
and `dequantize` refuses metadata that does not describe the tensors it is given.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from airlane.artifacts.errors import ArtifactError, MalformedArtifact
from airlane.artifacts.quant import (
    METADATA_KEY,
    REPORT_COLUMNS,
    QuantConfig,
    TensorReport,
    dequantize,
    format_report,
    quantize,
    sqnr_db,
)
from airlane.artifacts.tensorfile import TensorFile, write_tensors

PER_CHANNEL = QuantConfig()
BLOCK32 = QuantConfig("block", 32)
BLOCK64 = QuantConfig("block", 64)


def gaussian(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def checkpoint() -> dict[str, np.ndarray]:
    return {
        "model.embed_tokens.weight": gaussian((32, 16), 1),
        "model.layers.0.self_attn.q_proj.weight": gaussian((16, 16), 2),
        "model.layers.0.self_attn.q_proj.bias": gaussian((16,), 3),
        "model.layers.0.input_layernorm.weight": np.ones(16, np.float32),
        "model.layers.0.mlp.up_proj.weight": gaussian((40, 16), 4).astype(np.float64),
        "model.layers.0.mlp.conv": gaussian((4, 3, 70), 5).astype(np.float16),
        "position_ids": np.arange(8, dtype=np.int64),
        "mask": np.array([True, False]),
        "lm_head.weight": gaussian((32, 16), 6),
    }


def report_of(quantized: Any, name: str) -> TensorReport:
    return next(entry for entry in quantized.report if entry.name == name)


# -- config --------------------------------------------------------------------------------


def test_config_is_validated() -> None:
    with pytest.raises(ArtifactError, match="block_size must be 32 or 64"):
        QuantConfig("block", 16)
    with pytest.raises(ArtifactError, match="unknown quantization scheme"):
        QuantConfig("per_tensor")  # type: ignore[arg-type]


def test_actions_follow_dtype_rank_and_patterns() -> None:
    quantized = quantize(checkpoint(), PER_CHANNEL)
    actions = {entry.name: entry.action for entry in quantized.report}
    assert actions == {
        "model.embed_tokens.weight": "fp16",
        "model.layers.0.self_attn.q_proj.weight": "int8",
        "model.layers.0.self_attn.q_proj.bias": "fp16",
        "model.layers.0.input_layernorm.weight": "fp16",
        "model.layers.0.mlp.up_proj.weight": "int8",
        "model.layers.0.mlp.conv": "int8",
        "position_ids": "unchanged",
        "mask": "unchanged",
        "lm_head.weight": "int8",
    }
    custom = quantize(checkpoint(), QuantConfig(keep_fp16=("lm_head.*",)))
    assert report_of(custom, "lm_head.weight").action == "fp16"
    assert report_of(custom, "model.embed_tokens.weight").action == "int8"


# -- round trips ---------------------------------------------------------------------------


@pytest.mark.parametrize("config", [PER_CHANNEL, BLOCK32, BLOCK64], ids=["pc", "b32", "b64"])
def test_round_trip_shapes_dtypes_and_accuracy(config: QuantConfig) -> None:
    source = checkpoint()
    quantized = quantize(source, config)
    restored = dequantize(quantized.tensors, quantized.metadata)
    assert set(restored) == set(source)
    for name, original in source.items():
        action = report_of(quantized, name).action
        assert restored[name].shape == original.shape
        if action == "int8":
            assert quantized.tensors[name].dtype == np.int8
            assert quantized.tensors[f"{name}.scale"].dtype == np.float32
            assert restored[name].dtype == np.float32
            assert sqnr_db(original, restored[name]) > 30
        elif action == "fp16":
            assert quantized.tensors[name].dtype == np.float16
            assert restored[name].dtype == original.dtype
            np.testing.assert_allclose(restored[name], original, rtol=1e-3, atol=1e-4)
        else:
            assert quantized.tensors[name] is original
            np.testing.assert_array_equal(restored[name], original)


def test_scale_shapes() -> None:
    tensors = {"w": gaussian((3, 5, 70))}
    assert quantize(tensors, PER_CHANNEL).tensors["w.scale"].shape == (3,)
    assert quantize(tensors, BLOCK64).tensors["w.scale"].shape == (15, 2)
    assert quantize(tensors, BLOCK32).tensors["w.scale"].shape == (15, 3)


def test_report_counts_bytes_with_scales() -> None:
    quantized = quantize({"w": gaussian((8, 100))}, BLOCK32)
    entry = report_of(quantized, "w")
    assert entry.bytes_before == 3200
    assert entry.bytes_after == 800 + 8 * 4 * 4
    assert entry.shape == (8, 100)


def test_sqnr_orders_block32_block64_per_channel() -> None:
    # N(0, 1) weights, 256 x 1024: per-channel 42.1 dB, block 64 44.5, block 32 45.4.
    tensors = {"w": gaussian((256, 1024))}
    results = {
        name: report_of(quantize(tensors, config), "w").sqnr_db
        for name, config in (("pc", PER_CHANNEL), ("b64", BLOCK64), ("b32", BLOCK32))
    }
    assert results["b32"] >= results["b64"] >= results["pc"] >= 40


def test_block_scales_contain_outliers() -> None:
    w = gaussian((64, 256))
    w[:, 0] = 100.0  # one huge value per row ruins a per-row scale, not a 32-wide block's
    per_channel = report_of(quantize({"w": w}, PER_CHANNEL), "w").sqnr_db
    block = report_of(quantize({"w": w}, BLOCK32), "w").sqnr_db
    assert block > per_channel + 6  # measured: 38.1 dB against 28.9
    restored = dequantize(*_parts(quantize({"w": w}, BLOCK32)))["w"]
    assert np.max(np.abs(restored[:, 0] - 100.0)) <= 100.0 / 127 / 2 + 1e-4


def test_all_zero_rows_and_tensors() -> None:
    w = gaussian((4, 40))
    w[1] = 0.0
    for config in (PER_CHANNEL, BLOCK32):
        quantized = quantize({"w": w, "z": np.zeros((3, 8), np.float32)}, config)
        assert np.all(np.isfinite(quantized.tensors["w.scale"]))
        assert np.all(quantized.tensors["z.scale"] == 1.0)
        assert np.all(quantized.tensors["z"] == 0)
        restored = dequantize(*_parts(quantized))
        assert np.all(restored["w"][1] == 0.0)
        assert np.all(restored["z"] == 0.0)
        assert report_of(quantized, "z").sqnr_db == math.inf


def test_partial_final_block() -> None:
    w = gaussian((5, 70))
    w[:, 64:] *= 1000  # the 6-value last block has its own scale
    quantized = quantize({"w": w}, BLOCK64)
    scales = quantized.tensors["w.scale"]
    assert scales.shape == (5, 2)
    np.testing.assert_allclose(scales[:, 1], np.abs(w[:, 64:]).max(axis=1) / 127, rtol=1e-6)
    restored = dequantize(*_parts(quantized))["w"]
    assert np.all(np.abs(restored - w) <= np.repeat(scales, 64, axis=1)[:, :70] / 2 + 1e-3)


def test_empty_tensors() -> None:
    tensors = {"a": np.zeros((0, 4), np.float32), "b": np.zeros((3, 0), np.float32)}
    for config in (PER_CHANNEL, BLOCK32):
        restored = dequantize(*_parts(quantize(tensors, config)))
        assert restored["a"].shape == (0, 4) and restored["b"].shape == (3, 0)


def test_non_finite_values_are_refused() -> None:
    for bad in (np.nan, np.inf):
        w = gaussian((4, 4))
        w[2, 3] = bad
        with pytest.raises(ArtifactError, match=r"'layer\.w' holds NaN or infinite"):
            quantize({"layer.w": w}, PER_CHANNEL)
        with pytest.raises(ArtifactError, match="'norm' holds NaN"):
            quantize({"norm": np.array([1.0, bad], np.float32)}, PER_CHANNEL)


def test_fp16_overflow_is_refused() -> None:
    with pytest.raises(ArtifactError, match="exceeds the FP16 range"):
        quantize({"embed": np.array([[1e6, 0]], np.float32)}, PER_CHANNEL)


def test_huge_float64_values_are_refused() -> None:
    with pytest.raises(ArtifactError, match="too large for float32 scales"):
        quantize({"w": np.full((2, 2), 1e300)}, PER_CHANNEL)


def test_scale_name_collision_is_refused() -> None:
    with pytest.raises(ArtifactError, match=r"'w\.scale' would collide"):
        quantize({"w": gaussian((2, 2)), "w.scale": gaussian((2, 2))}, PER_CHANNEL)


def test_metadata_record() -> None:
    quantized = quantize(checkpoint(), BLOCK32)
    record = json.loads(quantized.metadata[METADATA_KEY])
    assert record["format"] == 1 and record["scheme"] == "block" and record["block_size"] == 32
    assert record["tensors"]["model.layers.0.mlp.up_proj.weight"] == {
        "scheme": "block",
        "block_size": 32,
        "dtype": "F64",
        "scale": "model.layers.0.mlp.up_proj.weight.scale",
    }
    assert record["fp16"]["model.embed_tokens.weight"] == "F32"
    assert sorted(record["unchanged"]) == ["mask", "position_ids"]
    assert " " not in quantized.metadata[METADATA_KEY]
    per_channel = json.loads(quantize(checkpoint(), PER_CHANNEL).metadata[METADATA_KEY])
    assert per_channel["block_size"] is None


def test_metadata_round_trips_through_a_file(tmp_path: Path) -> None:
    source = checkpoint()
    quantized = quantize(source, BLOCK64)
    path = tmp_path / "q.safetensors"
    write_tensors(path, quantized.tensors, quantized.metadata)
    with TensorFile(path) as tf:
        restored = dequantize(tf.arrays(), tf.header.metadata)
    expected = dequantize(*_parts(quantized))
    for name, value in expected.items():
        np.testing.assert_array_equal(restored[name], value)
        assert restored[name].dtype == value.dtype


def _parts(quantized: Any) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    return quantized.tensors, quantized.metadata


# -- malformed metadata --------------------------------------------------------------------


def _tampered(change: Any) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    quantized = quantize({"w": gaussian((4, 70)), "n": np.ones(3, np.float32)}, BLOCK64)
    tensors = dict(quantized.tensors)
    record = json.loads(quantized.metadata[METADATA_KEY])
    change(tensors, record)
    return tensors, {METADATA_KEY: json.dumps(record)}


def _set(path: list[str], value: Any) -> Any:
    def change(tensors: dict[str, Any], record: dict[str, Any]) -> None:
        target = record
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return change


TAMPERS = [
    ("format", _set(["format"], 2), "format-1"),
    ("tensors not object", _set(["tensors"], []), "'tensors' is malformed"),
    ("bad scheme", _set(["tensors", "w", "scheme"], "x"), "'tensors' is malformed"),
    ("bad block", _set(["tensors", "w", "block_size"], 16), "'tensors' is malformed"),
    ("float block", _set(["tensors", "w", "block_size"], 64.0), "'tensors' is malformed"),
    ("bad dtype", _set(["tensors", "w", "dtype"], "I8"), "'tensors' is malformed"),
    ("fp16 list", _set(["fp16"], ["n"]), "'fp16' is malformed"),
    ("unchanged", _set(["unchanged"], [1]), "'unchanged' is malformed"),
    ("scheme swap", _set(["tensors", "w", "block_size"], 32), "scale of 'w'"),
    (
        "scale missing",
        lambda tensors, record: tensors.pop("w.scale"),
        "scale tensor 'w.scale', which is missing",
    ),
    (
        "scale shape",
        lambda tensors, record: tensors.__setitem__("w.scale", np.ones(4, np.float32)),
        "scale of 'w'",
    ),
    (
        "int8 dtype",
        lambda tensors, record: tensors.__setitem__("w", tensors["w"].astype(np.int16)),
        "int8 tensor 'w' is int16",
    ),
    (
        "fp16 dtype",
        lambda tensors, record: tensors.__setitem__("n", np.ones(3, np.float32)),
        "FP16-kept tensor 'n' is float32",
    ),
    (
        "undescribed",
        lambda tensors, record: tensors.__setitem__("extra", np.ones(3)),
        "'extra' is not described",
    ),
]


@pytest.mark.parametrize(
    ("change", "message"), [t[1:] for t in TAMPERS], ids=[t[0] for t in TAMPERS]
)
def test_malformed_metadata_is_refused(change: Any, message: str) -> None:
    tensors, metadata = _tampered(change)
    with pytest.raises(MalformedArtifact, match=message.replace("(", r"\(")):
        dequantize(tensors, metadata)


@pytest.mark.parametrize("text", ["", "{", "[]", "null", '{"format": 1}', "[" * 100_000])
def test_unparsable_metadata_is_refused(text: str) -> None:
    with pytest.raises(MalformedArtifact, match=METADATA_KEY):
        dequantize({}, {METADATA_KEY: text})


def test_missing_metadata_is_refused() -> None:
    with pytest.raises(MalformedArtifact, match=r"no airlane\.quant"):
        dequantize({}, {})


# -- report --------------------------------------------------------------------------------


def test_sqnr_db() -> None:
    x = np.array([3.0, 4.0])
    assert sqnr_db(x, x) == math.inf
    assert sqnr_db(np.zeros(2), np.zeros(2)) == math.inf
    assert sqnr_db(x, np.array([3.0, 4.5])) == pytest.approx(10 * math.log10(25 / 0.25))


def test_format_report() -> None:
    quantized = quantize(checkpoint(), PER_CHANNEL)
    rows = format_report(quantized.report)
    assert len(rows) == len(quantized.report) + 1
    assert all(len(row) == len(REPORT_COLUMNS) for row in rows)
    first = rows[0]
    assert first[:3] == ("model.embed_tokens.weight", "fp16", "32x16")
    assert first[3:] == ("2,048", "1,024", first[5])
    total = rows[-1]
    assert total[0] == "total" and total[1].endswith("x smaller")
    assert total[5].startswith("min ") and "/ median " in total[5]
    assert format_report(())[-1][5] == "-"


# -- property ------------------------------------------------------------------------------

floats = st.floats(-1e6, 1e6, width=32, allow_subnormal=True)
arrays = hnp.arrays(
    np.float32, hnp.array_shapes(min_dims=2, max_dims=3, min_side=1, max_side=40), elements=floats
)


@settings(max_examples=150, deadline=None)
@given(arrays, st.sampled_from([PER_CHANNEL, BLOCK32, BLOCK64]))
def test_error_is_at_most_half_a_scale(x: np.ndarray, config: QuantConfig) -> None:
    quantized = quantize({"w": x}, config)
    restored = dequantize(quantized.tensors, quantized.metadata)["w"]
    scales = quantized.tensors["w.scale"].astype(np.float64)
    if config.scheme == "per_channel":
        per_value = np.broadcast_to(scales.reshape((-1,) + (1,) * (x.ndim - 1)), x.shape)
    else:
        rows = x.reshape(-1, x.shape[-1])
        per_value = np.repeat(scales, config.block_size, axis=1)[:, : rows.shape[1]]
        per_value = per_value.reshape(x.shape)
    error = np.abs(x.astype(np.float64) - restored.astype(np.float64))
    tolerance = per_value / 2 + np.abs(x.astype(np.float64)) * 2**-22 + 1e-44
    assert np.all(error <= tolerance)
