"""benchmarks/mqtt_bridge.py runs (a small smoke run of each mode) and reports what it
measured."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson

from tests.mosquitto import mosquitto_binary

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "mqtt_bridge.py"


def _run(*args: str) -> dict:
    mosquitto_binary()  # skips (fails in CI) without the broker
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args, "--json", "-"],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return orjson.loads(done.stdout)


def test_the_rate_smoke_run_stores_every_message_at_each_qos() -> None:
    rows = _run("--messages", "300")["rate"]
    assert [row["qos"] for row in rows] == [0, 1, 2]
    assert all(row["stored"] == 300 and row["stored_per_s"] > 0 for row in rows)


def test_the_memory_smoke_run() -> None:
    memory = _run("--mode", "memory", "--topics", "50")["memory"]
    assert memory["topics"] == 50
    assert memory["rss_mb_with_bridge"] > 0 and memory["rss_mb_without_bridge"] > 0
