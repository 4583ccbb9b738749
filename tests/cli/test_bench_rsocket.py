"""``airlane bench --transport rsocket`` and benchmarks/rsocket_unary.py, against real gateways."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest
import uvloop

from airlane.bench import BenchConfig
from airlane.bench.config import Mode
from airlane.bench.runner import run_transport
from tests.servers import ServerProcess

SCRIPT = Path(__file__).parent.parent.parent / "benchmarks" / "rsocket_unary.py"


@pytest.mark.parametrize("mode", ["burst", "paced"])
def test_every_chunk_arrives_in_order(server: ServerProcess, mode: Mode) -> None:
    # 600 chunks a stream: past the client's first window (256), so REQUEST_N keeps it going.
    config = BenchConfig(streams=6, chunks=600, mode=mode, interval_ms=1, timeout_s=60)
    result = uvloop.run(run_transport(config, server.url, "rsocket", rsocket=server.rsocket))
    assert result.transport == "rsocket"
    assert result.errors == 0, result.error_samples
    assert result.chunks_received == result.chunks_expected == 3600
    assert result.streams_completed == 6 and result.out_of_order == 0
    assert result.payload_bytes > 1000 * 3600


def test_an_unreachable_listener_is_an_error(server: ServerProcess) -> None:
    config = BenchConfig(streams=2, chunks=5, timeout_s=5)
    result = uvloop.run(run_transport(config, server.url, "rsocket", rsocket=("127.0.0.1", 1)))
    assert result.errors == 2


@pytest.mark.parametrize("model", ["response", "fnf"])
def test_rsocket_unary_smoke(model: str) -> None:
    command = [sys.executable, str(SCRIPT), "--calls", "200", "--concurrency", "4"]
    result = subprocess.run(
        [*command, "--model", model, "--json", "-"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = orjson.loads(result.stdout)
    assert summary["model"] == model
    assert summary["calls"] == 200 and summary["errors"] == 0
    assert summary["calls_per_s"] > 0
    assert 0 < summary["latency_ms"]["p50"] <= summary["latency_ms"]["p99"]
