"""``airlane bench`` smoke test at a tiny size: it spawns its own gateway, runs both
transports, and writes JSON and a PNG. No timing assertions: CI machines vary."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.conftest import airlane

RESULT_FIELDS = {
    "transport", "streams", "chunks_per_stream", "mode", "wall_s", "chunks_expected",
    "chunks_received", "streams_completed", "errors", "out_of_order", "payload_bytes",
    "payload_mb_s", "chunks_per_s", "ttfc_ms", "lag_ms", "steady_lag_ms", "kept_up_pct",
    "server_cpu", "client_cpu", "steal_pct",
}  # fmt: skip


def test_bench_spawn_smoke(tmp_path: Path) -> None:
    json_path, plot_path = tmp_path / "x.json", tmp_path / "y.png"
    result = airlane(
        "bench", "--spawn", "--streams", "5", "--chunks", "20", "--transport", "both",
        "--json", str(json_path), "--plot", str(plot_path), "--timeout", "30",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "TTFC p99 (ms)" in result.stdout
    assert "VM steal" in result.stdout
    document = json.loads(json_path.read_text())
    assert document["spawned"] is True
    assert [r["transport"] for r in document["results"]] == ["sse", "ws"]
    for run in document["results"]:
        assert set(run) >= RESULT_FIELDS
        assert run["chunks_expected"] == 100
        assert run["chunks_received"] == run["chunks_expected"]
        assert run["errors"] == 0 and run["out_of_order"] == 0
        assert set(run["ttfc_ms"]) >= {"p50", "p95", "p99"} and run["ttfc_ms"]["count"] == 5
        assert run["lag_ms"]["count"] == 100
        # Linux reports steal (0 on bare metal); anything else, none.
        assert run["steal_pct"] is None or 0 <= run["steal_pct"] <= 100
    assert plot_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_paced_smoke(tmp_path: Path) -> None:
    json_path = tmp_path / "paced.json"
    result = airlane(
        "bench", "--spawn", "--streams", "3", "--chunks", "10", "--mode", "paced",
        "--interval-ms", "5", "--transport", "sse", "--json", str(json_path),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "while all streams ran" in result.stdout
    [run] = json.loads(json_path.read_text())["results"]
    assert run["chunks_received"] == 30 and run["kept_up_pct"] is not None
    # Three streams that start together and run for ten intervals overlap.
    assert run["steady_lag_ms"]["count"] > 0


def test_bench_refuses_remote_targets() -> None:
    result = airlane("bench", "--url", "http://example.com:8420")
    assert result.returncode == 2
    assert "loopback" in result.stdout + result.stderr
