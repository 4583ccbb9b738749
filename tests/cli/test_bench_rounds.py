"""``airlane bench --runs K``: K runs against one gateway, summarised as medians and ranges
(`airlane.bench.rounds`). The summary's arithmetic on made-up results, the command on a tiny
real run. No timing assertions."""

from __future__ import annotations

import json
import math
from pathlib import Path

from airlane.bench.config import MAX_RUNS, BenchConfig
from airlane.bench.rounds import clean, summarize_rounds
from airlane.bench.stats import Percentiles, TransportResult
from tests.cli.conftest import airlane

CONFIG = BenchConfig(streams=2, chunks=5, transports=("sse", "ws"))


def _result(
    transport: str, mb_s: float, *, errors: int = 0, lag_p99: float = 1.0
) -> TransportResult:
    wall_s = 1.0
    return TransportResult(
        transport=transport, config=CONFIG, wall_s=wall_s, chunks_expected=10,
        chunks_received=10 - errors, streams_completed=2 - errors, errors=errors,
        error_samples=["boom"] * errors, out_of_order=0, payload_bytes=int(mb_s * 1e6 * wall_s),
        ttfc_ms=Percentiles(1.0, 2.0, 3.0, 4.0, 2), lag_ms=Percentiles(0.5, 0.9, lag_p99, 2.0, 10),
        kept_up_pct=None,
    )  # fmt: skip


def test_medians_and_ranges_over_the_clean_runs_only() -> None:
    rounds = [
        [_result("sse", 100.0, lag_p99=3.0), _result("ws", 50.0)],
        [_result("sse", 300.0, lag_p99=1.0), _result("ws", 70.0)],
        [_result("sse", 200.0, lag_p99=2.0), _result("ws", 1.0, errors=1)],
    ]
    summary = summarize_rounds(rounds)
    sse, ws = summary["sse"], summary["ws"]
    assert (sse["runs"], sse["clean_runs"]) == (3, 3)
    assert sse["payload_mb_s"] == {"median": 200.0, "min": 100.0, "max": 300.0}
    assert sse["lag_p99_ms"] == {"median": 2.0, "min": 1.0, "max": 3.0}
    # The run with an error is counted but left out: its 1 MB/s measured something else.
    assert (ws["runs"], ws["clean_runs"]) == (3, 2)
    assert ws["payload_mb_s"] == {"median": 60.0, "min": 50.0, "max": 70.0}
    # Numbers no run has (burst: no rate kept; no CPU sampled) are None, not zeros.
    assert sse["kept_up_pct"] is None and sse["server_cpu_pct"] is None
    assert not clean(rounds[2][1]) and clean(rounds[2][0])


def test_a_metric_that_is_not_a_number_is_left_out() -> None:
    nan = _result("sse", 10.0)
    nan.lag_ms = Percentiles(math.nan, math.nan, math.nan, math.nan, 0)
    summary = summarize_rounds([[nan], [_result("sse", 20.0, lag_p99=4.0)]])
    assert summary["sse"]["lag_p99_ms"] == {"median": 4.0, "min": 4.0, "max": 4.0}


def test_runs_reports_medians_and_every_run(tmp_path: Path) -> None:
    json_path, plot_path = tmp_path / "runs.json", tmp_path / "runs.png"
    result = airlane(
        "bench", "--spawn", "--streams", "3", "--chunks", "10", "--transport", "both",
        "--runs", "2", "--json", str(json_path), "--plot", str(plot_path), "--timeout", "30",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "run 2 of 2" in result.stdout and "2 runs" in result.stdout
    assert "clean runs" in result.stdout and "median (range)" in result.stdout
    document = json.loads(json_path.read_text())
    assert document["config"]["runs"] == 2
    assert [(r["transport"], r["run"]) for r in document["results"]] == [
        ("sse", 1), ("ws", 1), ("sse", 2), ("ws", 2),
    ]  # fmt: skip
    for transport in ("sse", "ws"):
        summary = document["summary"][transport]
        assert summary["clean_runs"] == summary["runs"] == 2
        stats = summary["payload_mb_s"]
        assert 0 < stats["min"] <= stats["median"] <= stats["max"]
    assert plot_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_runs_out_of_range_are_refused() -> None:
    for runs in ("0", str(MAX_RUNS + 1)):
        for extra in ((), ("--compare",)):
            refused = airlane("bench", "--spawn", "--runs", runs, *extra)
            output = refused.stdout + refused.stderr
            assert refused.returncode == 2 and "--runs" in output and "Traceback" not in output
