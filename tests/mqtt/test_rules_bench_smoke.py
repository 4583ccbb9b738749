"""benchmarks/mqtt_rules.py runs (a small smoke run: sensor -> Mosquitto -> bridge -> rule ->
generation -> result topic) and reports a latency for every message it sent."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson

from tests.mosquitto import mosquitto_binary

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "mqtt_rules.py"


def test_the_smoke_run_answers_every_sensor_message() -> None:
    mosquitto_binary()  # skips (fails in CI) without the broker
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--messages", "10", "--rate", "50", "--json", "-"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = orjson.loads(done.stdout)
    assert result["messages"] == 10 and result["qos"] == 1
    assert result["received_first"] == 10 and result["received_done"] == 10
    assert result["errors"] == 0 and result["unmatched"] == 0 and result["out_of_order"] == 0
    for key in ("first_event_ms", "done_ms"):
        latency = result[key]
        assert latency["count"] == 10
        assert 0 < latency["p50"] <= latency["p99"] <= latency["max"]
    assert result["first_event_ms"]["p50"] <= result["done_ms"]["p50"]
    assert result["rule_stats"]["generated"] >= 10 and result["rule_stats"].get("failed", 0) == 0
    assert set(result["synthetic"]) >= {"ttft_ms", "itl_ms"}
