"""Smoke test of benchmarks/airc_idle.py: it runs, and every connection stays up."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson

SCRIPT = Path(__file__).parent.parent.parent / "benchmarks" / "airc_idle.py"


def test_airc_idle_smoke() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--connections", "5", "--hold-s", "0.2", "--json", "-"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rows = orjson.loads(result.stdout)
    assert [row["transport"] for row in rows] == ["airc", "airc-ws"]
    for row in rows:
        assert row["connections"] == 5 and row["dropped"] == 0
        assert row["rss_after_bytes"] > 0
