"""benchmarks/opcount.py counts a traced gateway's bytecodes at a tiny size (no timing)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "opcount.py"


def _run(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        check=False,
    )


def test_opcount_smoke() -> None:
    result = _run("--transport", "ws", "--streams", "2", "--chunks", "2", "--top", "5")
    assert result.returncode == 0, result.stdout + result.stderr
    match = re.search(r"bytecodes per stream: ([\d,]+)", result.stdout)
    assert match is not None, result.stdout
    assert int(match.group(1).replace(",", "")) > 1000  # a stream is thousands of them
    assert "airlane/transports/http/" in result.stdout


def test_opcount_paced_reports_per_chunk() -> None:
    result = _run("--streams", "2", "--chunks", "3", "--interval-ms", "50", "--top", "5")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "paced every 50 ms" in result.stdout
    match = re.search(r"bytecodes per chunk: ([\d,]+)", result.stdout)
    assert match is not None, result.stdout
    assert int(match.group(1).replace(",", "")) > 100


def test_bad_sizes_are_refused() -> None:
    result = _run("--streams", "0", timeout=30)
    assert result.returncode == 2 and "--streams 1..500" in result.stderr
    result = _run("--interval-ms", "0", timeout=30)
    assert result.returncode == 2 and "--interval-ms 1..10000" in result.stderr


def test_opcount_proxy_mode_counts_the_backend() -> None:
    result = _run("--proxy", "--streams", "2", "--chunks", "3", "--interval-ms", "20", "--top", "9")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "proxy mode" in result.stdout
    match = re.search(r"bytecodes per chunk: ([\d,]+)", result.stdout)
    assert match is not None, result.stdout
    assert int(match.group(1).replace(",", "")) > 100
    assert "airlane/backends/" in result.stdout  # the upstream's chunks parsed
