"""benchmarks/crdt_bench.py runs, tiny, and reports what it promises."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "crdt_bench.py"


def test_the_crdt_benchmark_runs_tiny_and_reports_json():
    completed = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--ops",
            "90",
            "--keys",
            "12",
            "--repeat",
            "1",
            "--json",
            "-",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    report = json.loads(completed.stdout)
    assert report["workload"] == {
        "replicas": 3,
        "ops": 90,
        "keys": 12,
        "seed": 2026,
        "mix": report["workload"]["mix"],
    }
    assert set(report["results"]) == {"airlane-set", "pycrdt-set", "airlane-map", "pycrdt-map"}
    for name, row in report["results"].items():
        assert set(row) >= {
            "ops_per_s",
            "converge_ms",
            "converged",
            "sync_bytes",
            "state_bytes",
            "payload_bytes",
            "metadata_overhead_pct",
            "tracemalloc_bytes",
        }
        assert row["converged"] is True, name
        assert row["ops_per_s"] > 0
        assert (row["tracemalloc_bytes"] is None) == name.startswith("pycrdt")


def test_the_crdt_benchmark_refuses_unbounded_runs():
    completed = subprocess.run(
        [sys.executable, str(SCRIPT), "--ops", str(10**9)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode == 2
    assert "ops" in completed.stderr
