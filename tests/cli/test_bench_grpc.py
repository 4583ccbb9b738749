"""``airlane bench --transport grpc`` and benchmarks/grpc_unary.py, against real gateways."""

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

SCRIPT = Path(__file__).parent.parent.parent / "benchmarks" / "grpc_unary.py"


@pytest.mark.parametrize("transport", ["grpc", "grpc-web"])
@pytest.mark.parametrize("mode", ["burst", "paced"])
def test_every_chunk_arrives_in_order(server: ServerProcess, transport: str, mode: Mode) -> None:
    config = BenchConfig(streams=8, chunks=30, mode=mode, interval_ms=5, timeout_s=30)
    result = uvloop.run(run_transport(config, server.url, transport, grpc=server.grpc))
    assert result.transport == transport
    assert result.errors == 0, result.error_samples
    assert result.chunks_received == result.chunks_expected == 240
    assert result.streams_completed == 8 and result.out_of_order == 0
    assert result.payload_bytes > 1000 * 240


def test_an_unreachable_listener_is_an_error(server: ServerProcess) -> None:
    config = BenchConfig(streams=2, chunks=5, timeout_s=5)
    result = uvloop.run(run_transport(config, server.url, "grpc", grpc="127.0.0.1:1"))
    assert result.errors == 2


@pytest.mark.parametrize("protocol", ["grpc", "grpc-web"])
def test_grpc_unary_smoke(protocol: str) -> None:
    command = [sys.executable, str(SCRIPT), "--calls", "100", "--concurrency", "4"]
    result = subprocess.run(
        [*command, "--protocol", protocol, "--json", "-"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = orjson.loads(result.stdout)
    assert summary["protocol"] == protocol
    assert summary["calls"] == 100 and summary["errors"] == 0
    assert summary["calls_per_s"] > 0
    assert 0 < summary["latency_ms"]["p50"] <= summary["latency_ms"]["p95"]
