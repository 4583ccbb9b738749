"""benchmarks/waku_mesh.py runs (a small smoke run of every part) and reports what it
measured: three real ``airlane serve`` processes relaying."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "waku_mesh.py"

pytestmark = pytest.mark.timeout(180)


def test_the_smoke_run_delivers_everything_and_reports_each_part() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--messages", "20", "--rate", "100", "--burst", "100",
         "--peers", "5", "--json", "-"],
        capture_output=True, text=True, timeout=170, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    results = orjson.loads(done.stdout)
    for part in ("mesh", "bridge", "throughput"):
        assert results[part]["delivered"] == results[part]["messages"], part
    assert 0 < results["mesh"]["p50_ms"] <= results["mesh"]["p99_ms"]
    assert results["throughput"]["messages_per_cpu_s"] > 0
    assert results["memory"]["peers"] == 5
