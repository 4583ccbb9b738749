"""Smoke tests of the benchmark scripts in ``benchmarks/`` at a tiny size: each runs as a
subprocess, as a user would run it, spawns its own gateway, and writes JSON (and a PNG) whose
shape is checked. No timing or memory assertions: at this size the numbers are noise.

The pure parts they rest on (`airlane.bench.sweep`, `airlane.bench.memory`) are tested
directly below."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from airlane.bench.memory import (
    ProcessWatch,
    ResourceSampler,
    median_slope_per_min,
    raise_fd_limit,
    read_pss_bytes,
    slope_per_min,
)
from airlane.bench.sweep import KeepUpCriteria, SweepPlan, sustained_n

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def script(name: str, *args: str, timeout: float = 90.0) -> subprocess.CompletedProcess[str]:
    """Run ``benchmarks/<name>.py`` to completion."""
    return subprocess.run(
        [sys.executable, str(BENCHMARKS / f"{name}.py"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        check=False,
    )


@pytest.mark.parametrize("name", ["scaling", "idle_connections", "soak"])
def test_help(name: str) -> None:
    result = script(name, "--help")
    assert result.returncode == 0, result.stderr
    assert "usage:" in result.stdout and "--json" in result.stdout


def test_scaling_smoke(tmp_path: Path) -> None:
    json_path, plot_path = tmp_path / "scaling.json", tmp_path / "scaling.png"
    result = script(
        "scaling", "--ns", "5,10", "--chunks", "5", "--interval-ms", "5",
        "--point-timeout-s", "30", "--json", str(json_path), "--plot", str(plot_path),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "largest N that keeps up" in result.stdout
    document = json.loads(json_path.read_text())
    assert document["benchmark"] == "scaling" and document["label"] == "airlane"
    assert [(p["transport"], p["streams"]) for p in document["points"]] == [
        ("sse", 5), ("ws", 5), ("sse", 10), ("ws", 10),
    ]  # fmt: skip
    for point in document["points"]:
        assert point["chunks_received"] == point["streams"] * 5
        assert point["errors"] == 0
        assert point["kept_up_pct"] is not None and point["lag_ms"]["p99"] is not None
        assert point["ttfc_ms"]["p99"] is not None
        assert isinstance(point["keeps_up"], bool)
    assert set(document["sustained_n"]) == {"sse", "ws"}
    assert plot_path.read_bytes()[:8] == PNG_MAGIC

    # Several runs' JSON files drawn together, measuring nothing.
    peer = tmp_path / "peer.json"
    peer.write_text(json.dumps({**document, "label": "peer"}))
    overlay = tmp_path / "overlay.png"
    result = script("scaling", "--overlay", str(json_path), str(peer), "--plot", str(overlay))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[peer]" in result.stdout
    assert overlay.read_bytes()[:8] == PNG_MAGIC


def test_scaling_refuses_remote_targets() -> None:
    result = script("scaling", "--url", "http://example.com:8420", "--ns", "5")
    assert result.returncode == 2
    assert "loopback" in result.stderr


def test_idle_connections_smoke(tmp_path: Path) -> None:
    json_path = tmp_path / "idle.json"
    result = script(
        "idle_connections", "--sse", "20", "--ws", "20", "--hold-s", "2", "--ping-s", "0.5",
        "--streams", "4", "--settle-s", "0.2", "--paced-pct", "50", "--json", str(json_path),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    document = json.loads(json_path.read_text())
    assert document["benchmark"] == "idle_connections"
    assert [c["transport"] for c in document["connections"]] == ["sse", "ws"]
    for connections in document["connections"]:
        assert connections["opened"] == connections["requested"] == 20
        assert connections["open_at_end"] == 20
        assert connections["heartbeats_min"] >= 1  # 2 s held, a heartbeat every 0.5 s
    assert document["every_connection_held"] is True
    assert isinstance(document["heartbeats_ok"], bool)
    for connections in document["connections"]:
        assert connections["heartbeat_lateness_ms"]["gaps"] >= 20
        assert connections["accepted_per_s"] > 0
    paced = document["paced"]  # 50 % of 40: 20 readers of 2 generations
    assert (paced["readers"], paced["generations"]) == (20, 2)
    assert paced["chunks_received"] == paced["chunks_expected"] > 0
    assert paced["lag_ms"]["samples"] > 0
    assert document["config"]["sources"] == 1
    for kind in ("sse", "ws", "all"):
        assert isinstance(document["memory_per_connection"][kind]["rss_kb"], float)
    assert document["samples"]["baseline"]["rss_bytes"] > 0
    assert document["gateway_cpu_pct"]["idle_with_connections"] is not None
    assert not psutil.pid_exists(document["gateway_pid"])  # the script stopped its gateway


def test_soak_smoke(tmp_path: Path) -> None:
    json_path, plot_path = tmp_path / "soak.json", tmp_path / "soak.png"
    result = script(
        "soak", "--duration-s", "6", "--streams", "6", "--chunks", "10", "--interval-ms", "10",
        "--sample-s", "0.5", "--json", str(json_path), "--plot", str(plot_path),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "VERDICT: memory" in result.stdout
    document = json.loads(json_path.read_text())
    load, memory = document["load"], document["memory"]
    assert load["errors"] == 0 and load["chunks"] == load["streams_opened"] * 10
    assert load["streams_opened"] > 6  # streams were re-opened: connections churned
    assert set(load["transports"]) == {"sse", "ws"}
    assert len(document["samples"]) >= 5
    assert memory["rss_max_bytes"] >= memory["rss_first_bytes"] > 0
    assert isinstance(memory["flat"], bool)
    assert memory["rss_slope_second_half_kb_per_min"] is not None
    assert plot_path.read_bytes()[:8] == PNG_MAGIC
    assert not psutil.pid_exists(document["gateway_pid"])


def _point(transport: str, streams: int, kept_up: float, lag_p99: float, errors: int = 0):
    return {"transport": transport, "streams": streams, "kept_up_pct": kept_up,
            "lag_ms": {"p99": lag_p99}, "errors": errors}  # fmt: skip


def test_proxy_stages_smoke() -> None:
    """Each stage runs the real classes on the real chunk (a broken stage raises) and is
    reported in microseconds."""
    result = script("proxy_stages", "--number", "200", "--repeat", "1")
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert [line.split("  ")[0] for line in lines] == [
        "upstream read (connection + translate)",
        "hub (append, poll, accounting)",
        "render (OpenAI SSE frame)",
        "sum",
    ]
    for line in lines:
        match = re.search(r"([\d.]+) us", line)
        assert match is not None and float(match.group(1)) > 0, line
    assert script("proxy_stages", "--number", "0").returncode == 2


def test_sustained_n_is_the_last_n_before_the_first_failure() -> None:
    criteria = KeepUpCriteria()
    points = [
        _point("sse", 100, 99.8, 5.0),
        _point("sse", 250, 99.5, 19.0),
        _point("sse", 500, 98.0, 30.0),  # breaks here
        _point("sse", 1000, 99.5, 10.0),  # a lucky pass after the break does not count
        _point("ws", 100, 99.9, 25.0),  # lag too high from the start
    ]
    assert sustained_n(points, "sse", criteria) == 250
    assert sustained_n(points, "ws", criteria) is None
    assert not criteria.passed(_point("sse", 100, 99.9, 1.0, errors=1))
    assert not criteria.passed({"transport": "sse", "streams": 1, "kept_up_pct": None,
                                "lag_ms": {"p99": None}, "errors": 0})  # fmt: skip


def test_sweep_plan_validates_and_orders_points() -> None:
    plan = SweepPlan(ns=(10, 20), transports=("sse", "ws"))
    assert list(plan.points()) == [(10, "sse"), (10, "ws"), (20, "sse"), (20, "ws")]
    assert plan.config(20, "ws").mode == "paced"
    with pytest.raises(ValueError):
        SweepPlan(ns=())
    with pytest.raises(ValueError):
        SweepPlan(ns=(10,), chunks=0)


def test_slope_per_min() -> None:
    assert slope_per_min([(0.0, 5.0), (60.0, 5.0), (120.0, 5.0)]) == pytest.approx(0.0)
    assert slope_per_min([(0.0, 0.0), (30.0, 1.0), (60.0, 2.0)]) == pytest.approx(2.0)
    assert slope_per_min([(1.0, 1.0)]) is None
    assert slope_per_min([(1.0, 1.0), (1.0, 2.0)]) is None


def test_median_slope_per_min_tells_one_step_from_steady_growth() -> None:
    # Flat, one rise of 2,000 a third of the way in, flat again: least squares sees a slope,
    # the median of the pairwise slopes does not.
    step = [(t * 5.0, 100.0 if t < 20 else 2100.0) for t in range(60)]
    assert slope_per_min(step) == pytest.approx(533.5, rel=0.01)
    assert median_slope_per_min(step) == pytest.approx(0.0)
    growth = [(t * 5.0, 100.0 + 2.0 * t) for t in range(60)]
    assert median_slope_per_min(growth) == pytest.approx(24.0)
    assert median_slope_per_min([(1.0, 1.0)]) is None
    assert median_slope_per_min([(1.0, 1.0), (1.0, 2.0)]) is None
    # A long series is thinned, not walked pair by pair: the answer stays the same.
    long = [(t * 0.1, 3.0 * t) for t in range(20_000)]
    assert median_slope_per_min(long) == pytest.approx(1800.0)


def test_process_watch_and_bounded_sampler() -> None:
    watch = ProcessWatch(os.getpid())
    first, second = watch.sample(), watch.sample()
    assert first.cpu_pct is None and second.cpu_pct is not None
    assert first.rss_bytes > 0 and second.t_s >= first.t_s
    if sys.platform == "linux":
        assert read_pss_bytes(os.getpid()) is not None
        assert first.open_fds is not None and first.open_fds > 0

    async def sample_briefly() -> ResourceSampler:
        async with ResourceSampler(watch, interval_s=0.001, max_samples=8) as sampler:
            await asyncio.sleep(0.1)
        return sampler

    sampler = asyncio.run(sample_briefly())
    assert 2 <= len(sampler.samples) <= 8  # halved whenever it filled up
    assert sampler.gone is None


def test_raise_fd_limit_is_idempotent() -> None:
    limit = raise_fd_limit()
    assert raise_fd_limit() == limit >= 256
