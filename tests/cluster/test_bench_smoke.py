"""Smoke runs of the cluster benchmarks (CI runs benchmarks small, never timed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson

from tests.natsserver import nats_binary

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "cluster_fanout.py"


def test_cluster_fanout_runs_and_loses_nothing():
    nats_binary()  # skips (fails in CI) without nats-server
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--streams", "6", "--chunks", "20", "--interval-ms", "5",
         "--resume-streams", "3", "--resume-chunks", "150", "--resume-after-s", "1",
         "--limit-s", "60", "--json", "-"],
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    report = orjson.loads(result.stdout)
    for run in ("memory", "jetstream"):
        assert report[run]["chunks"] == report[run]["expected_chunks"] == 6 * 2 * 20
        assert report[run]["incomplete_readers"] == 0
    assert set(report["jetstream"]["lag_ms"]) == {"a", "b"}
    assert report["resume"]["every_chunk_once_in_order"] is True


def test_home_log_compression_reports_each_method():
    script = SCRIPT.parent / "home_log_compression.py"
    result = subprocess.run(
        [sys.executable, str(script), "--streams", "20", "--per-stream", "1",
         "--volume-mb", "1", "--json", "-"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    report = orjson.loads(result.stdout)
    assert report["message_bytes"] > 20 * 400
    for method in ("zstd-1", "lz4", "zlib-1"):
        assert report[method]["ratio"] > 1
        assert report[method]["compress_mb_s"] > 0 and report[method]["decompress_mb_s"] > 0
