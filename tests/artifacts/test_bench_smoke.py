"""The artifact benchmarks run, tiny (CI smoke runs; the numbers are in docs/artifacts.md)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=240, check=check
    )


def test_throughput_benchmark_reports_every_step():
    out = _run(str(BENCHMARKS / "artifacts_throughput.py"), "--size-mb", "8", "--quick").stdout
    for step in ("plain copy", "SHA-256", "XXH3", "pack", "verify", "pull"):
        assert step in out, out


def test_delta_benchmark_reports_the_three_fine_tunes():
    out = _run(str(BENCHMARKS / "artifacts_delta.py"), "--quick").stdout
    for row in ("| full", "| top", "| grown"):
        assert row in out, out


def test_handoff_benchmark_runs_or_says_why_not():
    result = _run(str(BENCHMARKS / "cuda_ipc.py"), "--quick", "--device", "cpu", check=False)
    if importlib.util.find_spec("torch") is None:
        assert result.returncode == 1
        assert "PyTorch is not installed" in result.stderr
    else:
        assert result.returncode == 0, result.stderr
        assert "speed-up" in result.stdout
