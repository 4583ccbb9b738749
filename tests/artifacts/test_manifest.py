"""Manifests: built from files, tensor-aware chunks, strict parsing, round trips."""

from __future__ import annotations

import copy

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airlane.artifacts.chunker import ChunkParams
from airlane.artifacts.errors import MalformedArtifact, VerificationError
from airlane.artifacts.manifest import Manifest, build_manifest, check_relative_path, verify_file
from airlane.artifacts.tensorfile import read_header
from tests.artifacts.support import checkpoint

SMALL = ChunkParams(min_size=1024, avg_size=4096, max_size=16384)


@pytest.fixture
def model(tmp_path):
    return checkpoint(tmp_path / "m" / "model.safetensors")


def test_a_manifest_lists_every_chunk_tensor_and_hash(model):
    manifest = build_manifest(model.parent, ["model.safetensors"], name="tiny", version="1")
    entry = manifest.files[0]
    assert entry.size == model.stat().st_size == manifest.size
    assert sum(c.size for c in entry.chunks) == entry.size
    header = read_header(model)
    assert set(manifest.tensors) == set(header.names())
    assert manifest.chunking["algorithm"] == "fastcdc-gear64/1"
    assert Manifest.from_bytes(manifest.to_bytes()) == manifest


def test_chunks_never_straddle_a_tensor(model):
    manifest = build_manifest(
        model.parent, ["model.safetensors"], name="t", version="1", params=SMALL
    )
    starts = {c.offset for c in manifest.files[0].chunks}
    for info in manifest.tensors.values():
        if info["offsets"][1] > info["offsets"][0]:
            assert info["offsets"][0] in starts


def test_chunking_in_parallel_spans_cuts_where_one_pass_would(tmp_path, monkeypatch):
    import airlane.artifacts.manifest as manifest_module
    from airlane.artifacts.chunker import cut_points

    model = checkpoint(tmp_path / "model.safetensors", layers=6, hidden=256)
    monkeypatch.setattr(manifest_module, "_SPAN_BYTES", 300_000)  # several spans, grouped
    built = build_manifest(tmp_path, ["model.safetensors"], name="t", version="1", params=SMALL)
    header = read_header(model)
    forced = sorted({header.data_offset} | {header.data_offset + t.start for t in header.tensors})
    one_pass = cut_points(
        model.read_bytes(), SMALL, [p for p in forced if 0 < p < header.file_size]
    )
    assert [c.end for c in built.files[0].chunks] == one_pass


def test_fine_tuning_one_layer_changes_only_its_chunks(tmp_path):
    base = checkpoint(tmp_path / "a" / "model.safetensors")
    tuned = checkpoint(tmp_path / "b" / "model.safetensors", changed=(2,))
    one = build_manifest(base.parent, ["model.safetensors"], name="t", version="1", params=SMALL)
    two = build_manifest(tuned.parent, ["model.safetensors"], name="t", version="2", params=SMALL)
    old = {c.xxh3 for c in one.files[0].chunks}
    new = [c for c in two.files[0].chunks if c.xxh3 not in old]
    changed = two.tensors["model.layers.2.mlp.up_proj.weight"]["offsets"]
    assert new, "the changed layer must show"
    assert all(changed[0] <= c.offset and c.end <= changed[1] for c in new)


def test_verify_file_points_at_the_damaged_chunk_and_kib(model):
    manifest = build_manifest(model.parent, ["model.safetensors"], name="t", version="1")
    entry = manifest.files[0]
    victim = entry.chunks[3]
    data = bytearray(model.read_bytes())
    data[victim.offset + 2500] ^= 0x01
    model.write_bytes(bytes(data))
    assert verify_file(model, entry) == [3]
    assert victim.bad_pieces(bytes(data[victim.offset : victim.end])) == [2]
    model.write_bytes(bytes(data[:-1]))
    with pytest.raises(VerificationError, match="bytes on disk"):
        verify_file(model, entry)


def _good(model) -> dict:
    return build_manifest(model.parent, ["model.safetensors"], name="t", version="1").to_json()


def _set(obj, path, value):
    target = obj
    for key in path[:-1]:
        target = target[key]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value


_DELETE = object()

MALFORMED = [
    (("format",), "airlane.artifact/9", "format"),
    (("name",), "../etc", "name"),
    (("version",), "", "version"),
    (("sha256",), "XYZ", "sha256"),
    (("files",), {}, "'files'"),
    (("files", 0, "path"), "../../escape", "safe relative path"),
    (("files", 0, "path"), "/etc/passwd", "safe relative path"),
    (("files", 0, "path"), "manifest.json", "manifest's own name"),
    (("files", 0, "size"), -1, "'size'"),
    (("files", 0, "size"), True, "'size'"),
    (("files", 0, "chunks", 0), [0, 10, "00", "AAAA"], "chunk must be"),
    (("files", 0, "chunks", 1, 0), 5, "tile the file"),
    (("files", 0, "chunks", 0, 3), "AAAAAA==", "Adler-32 count"),
    (("files", 0, "chunks", 0, 3), "AAAA", "(?i)adler"),
    (("files", 0, "chunks", 0, 3), "!!!", "(?i)adler|base64"),
    (("files", 0, "sha256"), "0" * 63, "'sha256'"),
    (("metadata",), {"k": 1}, "metadata"),
    (("signature",), {"value": 3}, "signature"),
]


@pytest.mark.parametrize(("path", "value", "message"), MALFORMED)
def test_a_malformed_manifest_is_refused_with_a_reason(model, path, value, message):
    body = copy.deepcopy(_good(model))
    _set(body, path, value)
    with pytest.raises(MalformedArtifact, match=message):
        Manifest.from_json(body)


def test_not_json_and_not_an_object_are_refused():
    with pytest.raises(MalformedArtifact, match="not JSON"):
        Manifest.from_bytes(b"{nope")
    with pytest.raises(MalformedArtifact, match="object"):
        Manifest.from_bytes(b"[]")


def test_a_file_listed_twice_or_uncovered_is_refused(model):
    body = _good(model)
    body["files"].append(copy.deepcopy(body["files"][0]))
    with pytest.raises(MalformedArtifact, match="twice"):
        Manifest.from_json(body)
    body = _good(model)
    body["files"][0]["chunks"].pop()
    with pytest.raises(MalformedArtifact, match="cover"):
        Manifest.from_json(body)


@pytest.mark.parametrize("path", ["a/../b", "./a", "a//b", "a\\b", "", "x\x00"])
def test_unsafe_paths_are_refused(path):
    with pytest.raises(MalformedArtifact):
        check_relative_path(path)


def test_canonical_bytes_leave_out_the_signature_and_sort_keys(model):
    manifest = build_manifest(model.parent, ["model.safetensors"], name="t", version="1")
    signed = manifest.signed({"algorithm": "ed25519", "key_id": "k", "value": "v"})
    assert signed.canonical_bytes() == manifest.canonical_bytes()
    assert orjson.loads(signed.to_bytes())["signature"]["key_id"] == "k"
    parsed = orjson.loads(manifest.canonical_bytes())
    assert list(parsed) == sorted(parsed)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    files=st.lists(st.binary(min_size=0, max_size=30_000), min_size=1, max_size=3),
    metadata=st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=3),
)
def test_any_manifest_round_trips(tmp_path_factory, files, metadata):
    root = tmp_path_factory.mktemp("files")
    names = []
    for index, data in enumerate(files):
        name = f"dir/f{index}.bin"
        (root / "dir").mkdir(exist_ok=True)
        (root / name).write_bytes(data)
        names.append(name)
    manifest = build_manifest(root, names, name="n", version="v1", params=SMALL, metadata=metadata)
    assert Manifest.from_bytes(manifest.to_bytes()) == manifest
    assert manifest.size == sum(len(d) for d in files)
    for name, entry in zip(names, manifest.files, strict=True):
        assert verify_file(root / name, entry) == []
