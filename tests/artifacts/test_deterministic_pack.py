"""Packing is deterministic: the same weights and options give the same bytes in any process
(safetensors writes its header's metadata in the order of a Rust hash map, seeded afresh in
every process whatever PYTHONHASHSEED says), so that ``artifacts diff`` of two packs of one
checkpoint finds nothing new."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.artifacts.support import checkpoint

PACKS = [
    [],
    ["--quantize", "block32"],
    ["--quantize", "block32", "--shard", "layer"],
]

# What a Hugging Face checkpoint's header carries, and more: the packer keeps a source's
# metadata in what it writes, and with eight keys two processes all but never agree on an
# order by chance (with one or two, a test would pass half the time without the fix).
SOURCE_METADATA = {
    "format": "pt",
    "framework": "transformers",
    "model_type": "llama",
    "torch_dtype": "float32",
    "license": "apache-2.0",
    "base_model": "tiny",
    "revision": "0123abc",
    "note": "one checkpoint, packed twice",
}


def airlane(*args: str, seed: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    return subprocess.run(
        [sys.executable, "-m", "airlane", "artifacts", *args],
        capture_output=True, text=True, timeout=120, check=False, env=env,
    )  # fmt: skip


@pytest.mark.parametrize("options", PACKS, ids=["plain", "quantized", "quantized+sharded"])
def test_two_packs_in_two_processes_are_byte_identical(tmp_path: Path, options: list[str]) -> None:
    source = checkpoint(tmp_path / "model.safetensors", hidden=64, metadata=SOURCE_METADATA)
    versions = []
    for store, seed in (("a", "1"), ("b", "2")):  # same name and version, two stores
        packed = airlane("pack", str(source), "--name", "m", "--version", "1", "--store",
                         str(tmp_path / store), *options, seed=seed)  # fmt: skip
        assert packed.returncode == 0, packed.stderr
        versions.append(tmp_path / store / "m" / "1")
    one, two = versions
    files = sorted(p.name for p in one.iterdir())
    assert "manifest.json" in files and files == sorted(p.name for p in two.iterdir())
    for name in files:  # every shard and the manifest (it holds no time or other per-run field)
        assert (one / name).read_bytes() == (two / name).read_bytes(), name
    diff = airlane("diff", str(one), str(two), "--out", str(tmp_path / "d.airdelta"), seed="3")
    assert diff.returncode == 0, diff.stderr
    assert ": 0 of " in diff.stdout and "0 B of" in diff.stdout, diff.stdout
