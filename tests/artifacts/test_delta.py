"""airlane.artifacts.delta: delta files between two versions, and applying them.

Invariant: ``apply_delta(write_delta(A, B), A)`` rebuilds B byte for byte; any other base,
and any damaged or truncated delta, is refused (`DeltaBaseMismatch`, `VerificationError`,
`MalformedArtifact`) without leaving a file under the target's names.
"""

from __future__ import annotations

import dataclasses
import struct
from pathlib import Path

import numpy as np
import orjson
import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.numpy import save_file

from airlane.artifacts.chunker import ChunkParams
from airlane.artifacts.delta import (
    MAGIC,
    DeltaStats,
    apply_delta,
    plan_delta,
    read_delta_header,
    write_delta,
)
from airlane.artifacts.errors import (
    ArtifactError,
    DeltaBaseMismatch,
    MalformedArtifact,
    VerificationError,
)
from airlane.artifacts.manifest import Manifest, build_manifest

PARAMS = ChunkParams(min_size=256, avg_size=1024, max_size=4096)
"""Small chunks, so that kilobyte tensors span several."""
MODEL = "model.safetensors"


def weights(seed: int = 0, layers: int = 4) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    tensors = {"embed": rng.standard_normal((64, 32), dtype=np.float32)}
    for layer in range(layers):
        tensors[f"layer{layer}.w"] = rng.standard_normal((32, 48), dtype=np.float32)
        tensors[f"layer{layer}.b"] = np.zeros(48, np.float32)
    tensors["head"] = rng.standard_normal((32, 64), dtype=np.float32)
    return tensors


def version(
    root: Path, tensors: dict[str, np.ndarray], name: str = "1", **extra: bytes
) -> Manifest:
    """A version directory ``root/name`` holding ``model.safetensors`` and ``extra`` files."""
    folder = root / name
    folder.mkdir(parents=True)
    save_file(tensors, str(folder / MODEL))
    for path, data in extra.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_bytes(data)
    files = [MODEL, *extra]
    return build_manifest(folder, files, name="tiny", version=name, params=PARAMS)


def fine_tuned(
    tensors: dict[str, np.ndarray], names: list[str], scale: float = 1e-3
) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(99)
    out = dict(tensors)
    for name in names:
        out[name] = (out[name] * (1 + scale * rng.standard_normal(out[name].shape))).astype(
            np.float32
        )
    return out


def round_trip(tmp_path: Path, base: Manifest, target: Manifest, **options: bool) -> DeltaStats:
    delta = tmp_path / "d.airdelta"
    stats = write_delta(
        base, tmp_path / base.version, target, tmp_path / target.version, delta, **options
    )
    assert stats.encoded_bytes == delta.stat().st_size
    out = tmp_path / "rebuilt"
    rebuilt = apply_delta(delta, base, tmp_path / base.version, out)
    assert rebuilt == target
    for entry in target.files:
        assert (out / entry.path).read_bytes() == (
            tmp_path / target.version / entry.path
        ).read_bytes()
    assert Manifest.from_bytes((out / "manifest.json").read_bytes()) == target
    assert not [p for p in out.rglob("*") if p.name.startswith(".")]  # no temporaries left
    return stats


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Manifest, Manifest]:
    """Version 1, and version 2 with two layers fine-tuned."""
    base = weights()
    return version(tmp_path, base, "1"), version(
        tmp_path, fine_tuned(base, ["layer1.w", "layer2.w"]), "2"
    )


def test_round_trip(tmp_path: Path, pair: tuple[Manifest, Manifest]) -> None:
    base, target = pair
    stats = round_trip(tmp_path, base, target)
    assert stats.target_bytes == target.size
    assert stats.chunks_total == target.chunk_count
    assert 0 < stats.chunks_new < stats.chunks_total
    assert stats.reused_bytes + stats.new_bytes == target.size  # no chunk repeats here
    # Only the two fine-tuned layers (and the header chunk, whose offsets did not move but
    # whose bytes did not either) travel.
    assert stats.new_bytes <= 2 * 32 * 48 * 4 + 4096


def test_xor_encoding_wins_on_fine_tuned_floats(
    tmp_path: Path, pair: tuple[Manifest, Manifest]
) -> None:
    base, target = pair
    plain = write_delta(base, tmp_path / "1", target, tmp_path / "2", tmp_path / "p", xor=False)
    xored = round_trip(tmp_path, base, target)
    assert plain.chunks_xor == 0
    # Every chunk but the 29-byte tail (too short for XOR to gain a byte) goes as xor-zstd.
    assert xored.chunks_xor >= xored.chunks_new - 1 > 0
    _, _, plain_entries = read_delta_header(tmp_path / "p")
    _, _, entries = read_delta_header(tmp_path / "d.airdelta")
    assert {entry.encoding for entry in entries} == {"xor-zstd", "zstd"}
    assert all(entry.ref == (MODEL, entry.ref[1]) for entry in entries if entry.ref)
    # A 1e-3 relative change keeps sign, exponent and the top mantissa bits: ~28 % smaller.
    payload = sum(entry.length for entry in entries)
    assert payload < 0.8 * sum(entry.length for entry in plain_entries)


def test_plan_points_at_equal_bytes(tmp_path: Path, pair: tuple[Manifest, Manifest]) -> None:
    base, target = pair
    reuse, stats = plan_delta(base, target)
    assert stats.encoded_bytes == stats.new_bytes
    data = (tmp_path / "1" / MODEL).read_bytes()
    target_data = (tmp_path / "2" / MODEL).read_bytes()
    for chunk in target.files[0].chunks:
        if chunk.xxh3 in reuse:
            path, offset, size = reuse[chunk.xxh3]
            assert path == MODEL
            assert data[offset : offset + size] == target_data[chunk.offset : chunk.end]


def test_identical_versions_make_an_empty_delta(tmp_path: Path) -> None:
    tensors = weights()
    base, target = version(tmp_path, tensors, "1"), version(tmp_path, tensors, "2")
    stats = round_trip(tmp_path, base, target)
    assert stats.chunks_new == 0
    assert stats.new_bytes == 0
    assert stats.reused_bytes == target.size
    _, _, entries = read_delta_header(tmp_path / "d.airdelta")
    assert entries == []


def test_an_inserted_tensor_adds_few_chunks(tmp_path: Path) -> None:
    tensors = weights(layers=8)
    grown = dict(tensors)
    grown["layer3.adapter"] = np.random.default_rng(5).standard_normal((16, 48), dtype=np.float32)
    base, target = version(tmp_path, tensors, "1"), version(tmp_path, grown, "2")
    stats = round_trip(tmp_path, base, target)
    # The new tensor's 3 KiB, the header chunk (it lists the new tensor) and at most a
    # chunk or two around the insertion; every other tensor only moved.
    assert stats.chunks_new <= 6
    assert stats.new_bytes <= 16 * 48 * 4 + 3 * 4096
    assert stats.reused_bytes > 0.9 * target.size


def test_files_of_every_kind(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    notes = rng.integers(0, 256, 20_000, dtype=np.uint8).tobytes()
    zeros = bytes(30_000)  # one chunk, repeated: it travels once
    base = version(tmp_path, weights(), "1", **{"docs/notes.bin": notes, "empty": b""})
    edited = notes[:9000] + b"edit" + notes[9000:]
    target = version(
        tmp_path, weights(), "2", **{"docs/notes.bin": edited, "empty": b"", "z/zeros": zeros}
    )
    stats = round_trip(tmp_path, base, target)
    assert stats.chunks_new < stats.chunks_total
    assert (tmp_path / "rebuilt" / "empty").read_bytes() == b""


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    seed=st.integers(0, 2**32 - 1),
    edits=st.lists(
        st.tuples(st.integers(0, 20_000), st.integers(0, 300), st.binary(max_size=300)), max_size=4
    ),
)
def test_round_trip_property(
    tmp_path_factory: pytest.TempPathFactory, seed: int, edits: list[tuple[int, int, bytes]]
) -> None:
    root = tmp_path_factory.mktemp("prop")
    data = np.random.default_rng(seed).integers(0, 256, 20_000, dtype=np.uint8).tobytes()
    edited = data
    for where, cut, inserted in edits:
        edited = edited[:where] + inserted + edited[where + cut :]
    for name, content in (("1", data), ("2", edited)):
        (root / name).mkdir()
        (root / name / "blob").write_bytes(content)
    base = build_manifest(root / "1", ["blob"], name="b", version="1", params=PARAMS)
    target = build_manifest(root / "2", ["blob"], name="b", version="2", params=PARAMS)
    round_trip(root, base, target)


# -- refusing the wrong base ---------------------------------------------------------------


def test_wrong_base_manifest_is_refused(tmp_path: Path, pair: tuple[Manifest, Manifest]) -> None:
    base, target = pair
    delta = tmp_path / "d.airdelta"
    write_delta(base, tmp_path / "1", target, tmp_path / "2", delta)
    with pytest.raises(
        DeltaBaseMismatch, match=f"applies to tiny 1 sha256 {base.sha256}; the base here is tiny 2"
    ):
        apply_delta(delta, target, tmp_path / "2", tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_modified_base_bytes_are_refused(tmp_path: Path, pair: tuple[Manifest, Manifest]) -> None:
    base, target = pair
    delta = tmp_path / "d.airdelta"
    write_delta(base, tmp_path / "1", target, tmp_path / "2", delta)
    path = tmp_path / "1" / MODEL
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(DeltaBaseMismatch, match="modified since"):
        apply_delta(delta, base, tmp_path / "1", tmp_path / "out")
    path.write_bytes(bytes(data[:-4]))
    with pytest.raises(DeltaBaseMismatch, match=f"{len(data) - 4} bytes"):
        apply_delta(delta, base, tmp_path / "1", tmp_path / "out")
    path.unlink()
    with pytest.raises(DeltaBaseMismatch, match=r"lacks model\.safetensors"):
        apply_delta(delta, base, tmp_path / "1", tmp_path / "out")


def test_a_manifest_claiming_the_pinned_sha256_is_refused(
    tmp_path: Path, pair: tuple[Manifest, Manifest]
) -> None:
    base, target = pair
    delta = tmp_path / "d.airdelta"
    write_delta(base, tmp_path / "1", target, tmp_path / "2", delta)
    impostor = dataclasses.replace(target, sha256=base.sha256)  # version 2's files on disk
    with pytest.raises(DeltaBaseMismatch, match="digest to another sha256"):
        apply_delta(delta, impostor, tmp_path / "2", tmp_path / "out")


# -- refusing damaged deltas ---------------------------------------------------------------


def test_corrupted_payload_is_refused(tmp_path: Path, pair: tuple[Manifest, Manifest]) -> None:
    base, target = pair
    delta = tmp_path / "d.airdelta"
    write_delta(base, tmp_path / "1", target, tmp_path / "2", delta)
    data = bytearray(delta.read_bytes())
    payload_start = len(data) - sum(e.length for e in read_delta_header(delta)[2])
    for position in (
        payload_start,
        payload_start + 20,
        len(data) // 2 + payload_start // 2,
        len(data) - 1,
    ):
        damaged = bytearray(data)
        damaged[position] ^= 0x40
        delta.write_bytes(bytes(damaged))
        out = tmp_path / f"out{position}"
        with pytest.raises((VerificationError, MalformedArtifact)):
            apply_delta(delta, base, tmp_path / "1", out)
        assert list(out.rglob("*")) == []  # nothing under the target's names, no temporaries


@pytest.mark.parametrize("keep", [0, 5, 12, 13, 100, -1, -50])
def test_truncated_delta_is_refused(
    tmp_path: Path, pair: tuple[Manifest, Manifest], keep: int
) -> None:
    base, target = pair
    delta = tmp_path / "d.airdelta"
    write_delta(base, tmp_path / "1", target, tmp_path / "2", delta)
    delta.write_bytes(delta.read_bytes()[:keep])
    with pytest.raises(MalformedArtifact):
        read_delta_header(delta)
    with pytest.raises(MalformedArtifact):
        apply_delta(delta, base, tmp_path / "1", tmp_path / "out")


def test_trailing_bytes_are_refused(tmp_path: Path, pair: tuple[Manifest, Manifest]) -> None:
    base, target = pair
    delta = tmp_path / "d.airdelta"
    write_delta(base, tmp_path / "1", target, tmp_path / "2", delta)
    delta.write_bytes(delta.read_bytes() + b"\x00")
    with pytest.raises(MalformedArtifact, match="trailing"):
        read_delta_header(delta)


def _load(stored: bytes) -> dict:
    """A delta's header, decompressed and parsed."""
    return orjson.loads(zstandard.ZstdDecompressor().decompress(stored))


def _dump(header: object) -> bytes:
    """A header as a delta stores it (zstd of the JSON, or of raw bytes given as such)."""
    plain = header if isinstance(header, bytes) else orjson.dumps(header)
    return zstandard.ZstdCompressor().compress(plain)


def rewrite(
    delta: Path, change: dict[str, object] | None = None, prefix: bytes | None = None
) -> None:
    """Rewrite ``delta`` with header fields replaced (payloads kept)."""
    data = delta.read_bytes()
    (length,) = struct.unpack("<I", data[9:13])
    header = _load(data[13 : 13 + length])
    header.update(change or {})
    blob = _dump(header)
    delta.write_bytes(
        (prefix or data[:9]) + struct.pack("<I", len(blob)) + blob + data[13 + length :]
    )


@pytest.mark.parametrize(
    ("prefix", "message"),
    [(b"NOTDELTA\x01", "magic"), (MAGIC + b"\x02", "version 2")],
)
def test_bad_prefix(
    tmp_path: Path, pair: tuple[Manifest, Manifest], prefix: bytes, message: str
) -> None:
    base, target = pair
    delta = tmp_path / "d.airdelta"
    write_delta(base, tmp_path / "1", target, tmp_path / "2", delta)
    rewrite(delta, prefix=prefix)
    with pytest.raises(MalformedArtifact, match=message):
        read_delta_header(delta)


def test_bad_headers(tmp_path: Path, pair: tuple[Manifest, Manifest]) -> None:
    base, target = pair
    delta = tmp_path / "d.airdelta"
    write_delta(base, tmp_path / "1", target, tmp_path / "2", delta)
    good = delta.read_bytes()
    entries = _load(good[13 : 13 + struct.unpack("<I", good[9:13])[0]])["entries"]
    cases: list[tuple[dict[str, object], str]] = [
        ({"base": None}, "'base'"),
        ({"base": {"name": "tiny"}}, "'base'"),
        ({"target": {"format": "nope"}}, "manifest format"),
        ({"entries": {}}, "'entries'"),
        ({"entries": [1, *entries[1:]]}, "entry must be an object"),
        ({"entries": [{**entries[0], "encoding": "gzip"}, *entries[1:]]}, "encoding"),
        ({"entries": [{**entries[0], "xxh3": "XYZ"}, *entries[1:]]}, "xxh3"),
        ({"entries": [{**entries[0], "length": -1}, *entries[1:]]}, "length"),
        ({"entries": [{**entries[0], "ref": None}, *entries[1:]]}, "ref"),
        ({"entries": [{**entries[0], "ref": {"file": "../x", "offset": 0}}, *entries[1:]]}, "path"),
    ]
    for change, message in cases:
        delta.write_bytes(good)
        rewrite(delta, change)
        with pytest.raises(MalformedArtifact, match=message):
            read_delta_header(delta)


def test_header_that_does_not_match_the_target(
    tmp_path: Path, pair: tuple[Manifest, Manifest]
) -> None:
    base, target = pair
    delta = tmp_path / "d.airdelta"
    write_delta(base, tmp_path / "1", target, tmp_path / "2", delta)
    good = delta.read_bytes()
    entries = _load(good[13 : 13 + struct.unpack("<I", good[9:13])[0]])["entries"]
    first = entries[0]
    cases: list[tuple[list[dict[str, object]], str]] = [
        ([{**first, "xxh3": "0" * 32}, *entries[1:]], "which the target lacks"),
        ([{**first, "ref": {"file": MODEL, "offset": 10**9}}, *entries[1:]], "past the base"),
        ([{**first, "ref": {"file": "other", "offset": 0}}, *entries[1:]], "past the base"),
    ]
    for new_entries, message in cases:
        delta.write_bytes(good)
        rewrite(delta, {"entries": new_entries})
        with pytest.raises(MalformedArtifact, match=message):
            apply_delta(delta, base, tmp_path / "1", tmp_path / "out")
    # An entry dropped, with its payload: a target chunk nobody holds.
    data = good
    (length,) = struct.unpack("<I", data[9:13])
    header = _load(data[13 : 13 + length])
    header["entries"] = entries[1:]
    blob = _dump(header)
    payloads = data[13 + length + first["length"] :]
    delta.write_bytes(data[:9] + struct.pack("<I", len(blob)) + blob + payloads)
    with pytest.raises(MalformedArtifact, match="lacks 1 chunk"):
        apply_delta(delta, base, tmp_path / "1", tmp_path / "out")


def test_oversized_header_claim(tmp_path: Path) -> None:
    delta = tmp_path / "d.airdelta"
    delta.write_bytes(MAGIC + b"\x01" + struct.pack("<I", 2**32 - 1) + b"{}")
    with pytest.raises(MalformedArtifact, match="header claims"):
        read_delta_header(delta)
    delta.write_bytes(MAGIC + b"\x01" + struct.pack("<I", 3) + b"{x}")
    with pytest.raises(MalformedArtifact, match="not a zstd frame"):
        read_delta_header(delta)
    blob = _dump(b"{x}")
    delta.write_bytes(MAGIC + b"\x01" + struct.pack("<I", len(blob)) + blob)
    with pytest.raises(MalformedArtifact, match="not JSON"):
        read_delta_header(delta)
    with pytest.raises(ArtifactError, match="cannot read delta"):
        read_delta_header(tmp_path / "missing.airdelta")


def test_damaged_sources_make_no_delta(tmp_path: Path, pair: tuple[Manifest, Manifest]) -> None:
    base, target = pair
    path = tmp_path / "2" / MODEL
    good = path.read_bytes()
    damaged = bytearray(good)
    damaged[-10] ^= 1  # the last tensor: head, unchanged from the base
    damaged[target.tensors["layer1.w"]["offsets"][0] + 5] ^= 1
    path.write_bytes(bytes(damaged))
    out = tmp_path / "d.airdelta"
    with pytest.raises(VerificationError, match="does not match tiny 2"):
        write_delta(base, tmp_path / "1", target, tmp_path / "2", out)
    assert not out.exists()
    path.write_bytes(good)
    base_path = tmp_path / "1" / MODEL
    damaged_base = bytearray(base_path.read_bytes())
    damaged_base[base.tensors["layer2.w"]["offsets"][0] + 8] ^= 1  # an XOR source
    base_path.write_bytes(bytes(damaged_base))
    with pytest.raises(VerificationError, match="does not match tiny 1"):
        write_delta(base, tmp_path / "1", target, tmp_path / "2", out)
    assert list(tmp_path.glob(".d.airdelta*")) == []
