"""Safetensors reading and writing.

Invariants: what `write_tensors` writes reads back identical, and so does what the reference
library writes; `parse_header` refuses every malformed header with a `MalformedArtifact` that
names the fault, and no input at all (random bytes, truncations) makes it raise anything else.
"""

from __future__ import annotations

import contextlib
import json
import re
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import safetensors.numpy
from hypothesis import given, settings
from hypothesis import strategies as st

from airlane.artifacts.errors import ArtifactError, MalformedArtifact
from airlane.artifacts.tensorfile import (
    DTYPE_BITS,
    DTYPES,
    MAX_HEADER_BYTES,
    NUMPY_DTYPES,
    TensorFile,
    parse_header,
    read_header,
    safetensors_dtype,
    write_tensors,
)


def sample_tensors() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {
        "scalar": np.array(2.5, dtype=np.float32),
        "empty": np.zeros((0, 3), dtype=np.float16),
        "w": rng.standard_normal((4, 5)).astype(np.float32),
        "d": rng.standard_normal((2, 3, 2)),
        "i": np.arange(-3, 3, dtype=np.int64),
        "u": np.arange(7, dtype=np.uint8),
        "flags": np.array([True, False, True]),
        "c": np.array([1 + 2j, 3 - 4j], dtype=np.complex64),
        "h": np.arange(6, dtype=np.int16).reshape(2, 3),
    }


def build(header: object, data: bytes = b"", length: int | None = None) -> bytes:
    """A file from a header object (or raw header bytes) and a data section."""
    blob = header if isinstance(header, bytes) else json.dumps(header).encode()
    size = len(blob) if length is None else length
    return struct.pack("<Q", size) + blob + data


def entry(dtype: str = "F32", shape: list[Any] | None = None, offsets: Any = None) -> Any:
    return {
        "dtype": dtype,
        "shape": [2] if shape is None else shape,
        "data_offsets": offsets or [0, 8],
    }


# -- round trips -------------------------------------------------------------------------------


def test_round_trip_keeps_dtypes_shapes_values_and_metadata(tmp_path: Path) -> None:
    tensors = sample_tensors()
    header = write_tensors(tmp_path / "m.safetensors", tensors, {"format": "np", "k": "v"})
    assert header.metadata == {"format": "np", "k": "v"}
    assert set(header.names()) == set(tensors)
    with TensorFile(tmp_path / "m.safetensors") as tf:
        for name, expected in tensors.items():
            got = tf.array(name)
            assert got.dtype == expected.dtype.newbyteorder("<") or got.dtype == expected.dtype
            assert got.shape == expected.shape
            np.testing.assert_array_equal(got, expected)
        assert tf.header == header


def test_header_describes_the_layout(tmp_path: Path) -> None:
    header = write_tensors(tmp_path / "m.safetensors", sample_tensors())
    assert header.file_size == (tmp_path / "m.safetensors").stat().st_size
    starts = [info.start for info in header.tensors]
    assert starts == sorted(starts)
    w = header.tensor("w")
    assert (w.dtype, w.shape, w.numel, w.nbytes) == ("F32", (4, 5), 20, 80)
    assert header.file_range("w") == (header.data_offset + w.start, header.data_offset + w.end)
    assert header.tensor("scalar").numel == 1
    assert header.tensor("empty").nbytes == 0
    with pytest.raises(ArtifactError, match="no tensor named 'nope'"):
        header.tensor("nope")


def test_reads_files_written_by_the_reference_library(tmp_path: Path) -> None:
    tensors = sample_tensors()
    path = tmp_path / "ref.safetensors"
    safetensors.numpy.save_file(tensors, path, metadata={"a": "b"})
    with TensorFile(path) as tf:
        assert tf.header.metadata == {"a": "b"}
        for name, expected in tensors.items():
            np.testing.assert_array_equal(tf.array(name), expected)
    reference = safetensors.numpy.load_file(path)
    ours = write_tensors(tmp_path / "ours.safetensors", tensors)
    assert set(reference) == set(ours.names())


def test_library_reads_what_we_write(tmp_path: Path) -> None:
    tensors = sample_tensors()
    write_tensors(tmp_path / "m.safetensors", tensors)
    loaded = safetensors.numpy.load_file(tmp_path / "m.safetensors")
    for name, expected in tensors.items():
        np.testing.assert_array_equal(loaded[name], expected)


def test_empty_file_and_empty_data_section(tmp_path: Path) -> None:
    header = write_tensors(tmp_path / "none.safetensors", {})
    assert header.tensors == ()
    with TensorFile(tmp_path / "none.safetensors") as tf:
        assert tf.arrays() == {}
    header = write_tensors(tmp_path / "zero.safetensors", {"z": np.zeros((0,), np.float32)})
    assert header.file_size == header.data_offset
    with TensorFile(tmp_path / "zero.safetensors") as tf:
        assert tf.array("z").shape == (0,)
        assert bytes(tf.raw("z")) == b""


def test_non_contiguous_arrays_are_written_in_logical_order(tmp_path: Path) -> None:
    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    tensors = {"t": base.T, "strided": base[:, ::2], "scalar": np.float64(3.0)}
    write_tensors(tmp_path / "m.safetensors", tensors)
    with TensorFile(tmp_path / "m.safetensors") as tf:
        for name, expected in tensors.items():
            np.testing.assert_array_equal(tf.array(name), expected)
            assert tf.array(name).shape == expected.shape


def test_big_endian_input_is_stored_little_endian(tmp_path: Path) -> None:
    value = np.arange(4, dtype=">i4")
    write_tensors(tmp_path / "m.safetensors", {"be": value})
    with TensorFile(tmp_path / "m.safetensors") as tf:
        assert bytes(tf.raw("be")) == np.arange(4, dtype="<i4").tobytes()
        np.testing.assert_array_equal(tf.array("be"), value)


def test_arrays_are_zero_copy_read_only_views(tmp_path: Path) -> None:
    write_tensors(tmp_path / "m.safetensors", sample_tensors())
    with TensorFile(tmp_path / "m.safetensors") as tf:
        w = tf.array("w")
        assert not w.flags.writeable
        with pytest.raises(ValueError):
            w[0, 0] = 1.0
        mapped = np.frombuffer(tf.raw("w"), dtype=np.uint8)
        assert np.shares_memory(w, mapped)
        raw = tf.raw("w")
        assert raw.readonly and len(raw) == 80
        assert np.shares_memory(tf.arrays()["w"], mapped)
        del w, mapped, raw


def test_closed_file_refuses_reads_and_close_survives_live_views(tmp_path: Path) -> None:
    write_tensors(tmp_path / "m.safetensors", sample_tensors())
    tf = TensorFile(tmp_path / "m.safetensors")
    view = tf.array("w")
    tf.close()  # a view is still alive: the mapping stays until it is collected
    assert view.shape == (4, 5)
    with pytest.raises(ArtifactError, match="closed"):
        tf.array("w")
    tf.close()


def test_dtypes_without_numpy_equivalent_are_raw_only(tmp_path: Path) -> None:
    blob = json.dumps({"b": entry("BF16", [2], [0, 4]), "f": entry("F8_E4M3", [3], [4, 7])})
    path = tmp_path / "bf16.safetensors"
    path.write_bytes(build(blob.encode(), b"\x80\x3f\x00\x40\x01\x02\x03"))
    with TensorFile(path) as tf:
        assert bytes(tf.raw("b")) == b"\x80\x3f\x00\x40"
        assert bytes(tf.raw("f")) == b"\x01\x02\x03"
        with pytest.raises(ArtifactError, match=r"BF16.*\.raw\(\)"):
            tf.array("b")


def test_dtype_tables() -> None:
    assert {"BOOL", "U8", "I8", "F8_E4M3", "F8_E5M2", "I16", "U16", "F16", "BF16"} <= set(DTYPES)
    assert {"I32", "U32", "F32", "I64", "U64", "F64"} <= set(DTYPES)
    assert DTYPES["BF16"] == 2 and DTYPES["F64"] == 8 and DTYPES["BOOL"] == 1
    assert DTYPE_BITS["F4"] == 4 and "F4" not in DTYPES
    for code, dtype in NUMPY_DTYPES.items():
        assert dtype.itemsize == DTYPES[code]
        assert safetensors_dtype(dtype) == code
    assert "BF16" not in NUMPY_DTYPES
    with pytest.raises(ArtifactError, match="cannot store"):
        safetensors_dtype(np.dtype(object))


def test_write_refuses_bad_input(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    with pytest.raises(ArtifactError, match="cannot store"):
        write_tensors(path, {"s": np.array(["a"])})
    with pytest.raises(ArtifactError, match="non-empty"):
        write_tensors(path, {"": np.zeros(1)})
    with pytest.raises(ArtifactError, match="not a numpy array"):
        write_tensors(path, {"x": [1, 2]})  # type: ignore[dict-item]
    with pytest.raises(ArtifactError, match="str to str"):
        write_tensors(path, {"x": np.zeros(1)}, {"k": 1})  # type: ignore[dict-item]
    assert list(tmp_path.iterdir()) == []  # no partial or temporary file left behind


def test_write_replaces_atomically(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    write_tensors(path, {"a": np.zeros(3)})
    write_tensors(path, {"b": np.ones(2)})
    assert read_header(path).names() == ("b",)
    assert [p.name for p in tmp_path.iterdir()] == ["m.safetensors"]


def test_read_header_reads_only_the_header(tmp_path: Path) -> None:
    path = tmp_path / "m.safetensors"
    written = write_tensors(path, sample_tensors(), {"x": "y"})
    assert read_header(path) == written


# -- malformed headers -------------------------------------------------------------------------

W = {"w": entry()}
MALFORMED: list[tuple[str, bytes, str]] = [
    ("short file", b"\x01\x00\x00", "shorter than the 8-byte length"),
    ("zero length", build(b"", length=0), "header length is 0"),
    ("huge length", build(b"{}", length=MAX_HEADER_BYTES + 1), "exceeds"),
    ("length past end", build(b"{}", length=50), "runs past the end"),
    ("not utf-8", build(b'{"\xff": 1}'), "not UTF-8"),
    ("not json", build(b"{nope"), "not valid JSON"),
    ("json list", build([]), "not an object"),
    ("json string", build("x"), "not an object"),
    ("duplicate key", build(b'{"w": {}, "w": {}}'), "duplicate key 'w'"),
    ("deep nesting", build(b"[" * 100_000 + b"]" * 100_000), "JSON"),
    ("huge number", build(b'{"w": ' + b"9" * 5000 + b"}"), "not valid JSON"),
    ("metadata not object", build({"__metadata__": []}), "__metadata__ is not a JSON object"),
    ("metadata value", build({"__metadata__": {"k": 1}}), "__metadata__['k'] is not a string"),
    ("metadata surrogate", build(b'{"__metadata__": {"k": "\\ud800"}}'), "lone surrogate"),
    ("entry not object", build({"w": [1]}), "entry of tensor 'w' is not an object"),
    ("missing key", build({"w": {"dtype": "F32", "shape": [2]}}), "missing keys ['data_offsets']"),
    ("extra key", build({"w": {**entry(), "x": 1}}), "extra keys ['x']"),
    ("empty name", build({"": entry()}, b"\0" * 8), "empty name"),
    ("name surrogate", build(b'{"\\udc00": 1}'), "lone surrogate"),
    ("unknown dtype", build({"w": entry("F128")}, b"\0" * 8), "unknown dtype 'F128'"),
    ("dtype not str", build({"w": entry(7)}, b"\0" * 8), "unknown dtype 7"),
    ("shape not list", build({"w": entry(shape=2)}, b"\0" * 8), "shape is not a list"),  # type: ignore[arg-type]
    ("negative dim", build({"w": entry(shape=[-2])}, b"\0" * 8), "shape is not a list"),
    ("bool dim", build({"w": entry(shape=[True, 2])}, b"\0" * 8), "shape is not a list"),
    ("float dim", build({"w": entry(shape=[2.0])}, b"\0" * 8), "shape is not a list"),
    ("offsets one int", build({"w": entry(offsets=[0])}, b"\0" * 8), "not two non-negative"),
    ("offsets bool", build({"w": entry(offsets=[False, 8])}, b"\0" * 8), "not two non-negative"),
    ("offsets negative", build({"w": entry(offsets=[-1, 8])}, b"\0" * 8), "not two non-negative"),
    ("offsets reversed", build({"w": entry(offsets=[8, 0])}, b"\0" * 8), "begin 8 > end 0"),
    ("size mismatch", build({"w": entry(offsets=[0, 4])}, b"\0" * 4), "needs 8"),
    ("huge shape", build({"w": entry(shape=[2**62, 2**62])}, b"\0" * 8), "larger than the file"),
    ("sub-byte", build({"w": entry("F4", [3], [0, 1])}, b"\0"), "whole number of bytes"),
    (
        "gap",
        build({"w": entry(offsets=[4, 12])}, b"\0" * 12),
        "gap of 4 bytes before 'w'",
    ),
    (
        "overlap",
        build({"a": entry(offsets=[0, 8]), "b": entry(offsets=[4, 12])}, b"\0" * 12),
        "overlaps",
    ),
    ("trailing data", build(W, b"\0" * 9), "data section is 9 bytes"),
    ("truncated data", build(W, b"\0" * 7), "data section is 7 bytes"),
]


@pytest.mark.parametrize(
    ("blob", "message"), [case[1:] for case in MALFORMED], ids=[c[0] for c in MALFORMED]
)
def test_malformed_headers_are_refused(blob: bytes, message: str, tmp_path: Path) -> None:
    with pytest.raises(MalformedArtifact, match=re.escape(message)):
        parse_header(blob, len(blob))
    path = tmp_path / "bad.safetensors"
    path.write_bytes(blob)
    with pytest.raises(MalformedArtifact, match=re.escape(message)):
        read_header(path)
    with pytest.raises(MalformedArtifact, match=re.escape(message)):
        TensorFile(path)


def test_short_prefix_is_refused() -> None:
    blob = build(W, b"\0" * 8)
    with pytest.raises(MalformedArtifact, match="truncated"):
        parse_header(blob[:20], len(blob))


def test_valid_oddities_are_accepted() -> None:
    # Offsets listed out of order, padding spaces, zero-size tensors sharing an offset.
    header = {
        "b": entry(offsets=[8, 16]),
        "a": entry(offsets=[0, 8]),
        "z": entry(shape=[0, 5], offsets=[8, 8]),
        "__metadata__": {"k": "v"},
    }
    blob = build(json.dumps(header).encode() + b"    ", b"\0" * 16)
    parsed = parse_header(blob, len(blob))
    assert parsed.names() == ("a", "z", "b")
    assert parsed.metadata == {"k": "v"}


# -- property tests ----------------------------------------------------------------------------


def _valid_file() -> bytes:
    return safetensors.numpy.save(
        {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.arange(3, dtype=np.int8)},
        metadata={"k": "v"},
    )


VALID = _valid_file()


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_raise_only_malformed(blob: bytes) -> None:
    for data in (blob, VALID[:8] + blob, struct.pack("<Q", len(blob)) + blob):
        with contextlib.suppress(MalformedArtifact):
            parse_header(data, len(data))


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=0, max_value=len(VALID) - 1))
def test_truncations_raise_malformed(cut: int) -> None:
    with pytest.raises(MalformedArtifact):
        parse_header(VALID[:cut], cut)


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=0, max_value=len(VALID) - 1), st.integers(0, 255))
def test_single_byte_corruptions_raise_only_malformed(position: int, value: int) -> None:
    data = bytearray(VALID)
    data[position] = value
    with contextlib.suppress(MalformedArtifact):
        parse_header(bytes(data), len(data))


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(
        st.text(min_size=1, max_size=8).filter(lambda s: s != "__metadata__"),
        st.tuples(
            st.sampled_from(["F32", "I8", "F64", "U16", "BOOL"]),
            st.lists(st.integers(0, 3), max_size=3),
        ),
        max_size=5,
    )
)
def test_written_files_parse(spec: dict[str, tuple[str, list[int]]]) -> None:
    tensors = {
        name: np.zeros(shape, dtype=NUMPY_DTYPES[code]) for name, (code, shape) in spec.items()
    }
    blob = safetensors.numpy.save(tensors)
    header = parse_header(blob, len(blob))
    assert {info.name: (info.dtype, list(info.shape)) for info in header.tensors} == spec
