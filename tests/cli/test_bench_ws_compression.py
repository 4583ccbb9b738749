"""benchmarks/ws_compression.py runs at a tiny size and reports both modes (no timing checks)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "ws_compression.py"


def test_ws_compression_smoke() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--streams", "2", "--chunks", "5", "--rounds", "1"],
        capture_output=True,
        text=True,
        timeout=90,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert " deflate: 10 chunks" in result.stdout and "    none: 10 chunks" in result.stdout
    assert "median gateway CPU per chunk" in result.stdout


def test_bad_sizes_are_refused() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--streams", "0"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2 and "--streams 1..2000" in result.stderr
