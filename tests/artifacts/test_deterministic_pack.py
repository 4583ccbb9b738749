"""Packing is deterministic: the same weights and options give the same bytes in any process
(safetensors writes its header in hash-map order, which changes from process to process), so
that ``artifacts diff`` of two packs of one checkpoint finds nothing new."""

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


def airlane(*args: str, seed: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONHASHSEED": seed}
    return subprocess.run(
        [sys.executable, "-m", "airlane", "artifacts", *args],
        capture_output=True, text=True, timeout=120, check=False, env=env,
    )  # fmt: skip


@pytest.mark.parametrize("options", PACKS, ids=["plain", "quantized", "quantized+sharded"])
def test_two_packs_in_two_processes_are_byte_identical(tmp_path: Path, options: list[str]) -> None:
    source = checkpoint(tmp_path / "model.safetensors", hidden=64)
    for version, seed in (("1", "1"), ("2", "2")):
        packed = airlane("pack", str(source), "--name", "m", "--version", version, "--store",
                         str(tmp_path / "store"), *options, seed=seed)  # fmt: skip
        assert packed.returncode == 0, packed.stderr
    one, two = tmp_path / "store" / "m" / "1", tmp_path / "store" / "m" / "2"
    files = sorted(p.name for p in one.iterdir() if p.name != "manifest.json")
    assert files == sorted(p.name for p in two.iterdir() if p.name != "manifest.json")
    for name in files:
        assert (one / name).read_bytes() == (two / name).read_bytes(), name
    diff = airlane("diff", str(one), str(two), "--out", str(tmp_path / "d.airdelta"), seed="3")
    assert diff.returncode == 0, diff.stderr
    assert ": 0 of " in diff.stdout and "0 B of" in diff.stdout, diff.stdout
