"""``airlane bench --hub nats://...``: the spawned gateway appends through a real JetStream
broker (the tests' ``nats-server``), and the report says which hub it measured; when the broker
goes away under a benchmark, the load clients record why each stream failed."""

from __future__ import annotations

import asyncio
import json
from array import array
from pathlib import Path
from urllib.parse import urlsplit

from airlane.bench.grpc_load import run_grpc_streams
from airlane.bench.grpc_web_load import run_grpc_web_stream
from airlane.bench.sse_load import run_sse_stream
from airlane.bench.tally import StreamTally
from airlane.bench.ws_load import run_ws_stream
from airlane.v1.service_pb2 import GenerateRequest, LoadTest
from tests.cli.conftest import airlane
from tests.natsserver import NatsServer
from tests.servers import FAST_SYNTHETIC, run_server


def test_bench_on_a_jetstream_hub(tmp_path: Path, nats_session: NatsServer) -> None:
    json_path = tmp_path / "hub.json"
    result = airlane(
        "bench", "--hub", nats_session.url, "--streams", "5", "--chunks", "20",
        "--transport", "sse", "--json", str(json_path), "--timeout", "30",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    document = json.loads(json_path.read_text())
    assert document["spawned"] is True and document["hub"] == nats_session.url
    [run] = document["results"]
    assert run["chunks_received"] == run["chunks_expected"] == 100
    assert run["errors"] == 0 and run["out_of_order"] == 0


def test_hub_goes_with_a_spawned_gateway_only() -> None:
    for args in (["--url", "http://127.0.0.1:8420"], ["--compare"]):
        result = airlane("bench", "--hub", "nats://127.0.0.1:4222", *args)
        assert result.returncode == 2
        assert "--hub is the spawned gateway's" in result.stdout + result.stderr
    result = airlane("bench", "--hub", "memory")
    assert result.returncode == 2 and "nats://" in result.stdout + result.stderr


async def test_a_failed_load_test_stream_says_why(nats_server: NatsServer, tmp_path: Path) -> None:
    """The broker goes away under a running benchmark for longer than the gateway waits for
    it: each load-test stream ends with the gateway's error, and the load clients record its
    code (SSE: an ``event: error``; WebSocket: close 1011 with the code; gRPC and gRPC-Web:
    the ``error`` event), not a stream that merely ended early."""
    config = "[jetstream]\nunavailable_after_s = 0.5\n"
    log_path = tmp_path / "gateway.log"
    with (
        log_path.open("w") as log,
        run_server(
            "--hub", nats_server.url, "--airc-port", "-1",
            config=FAST_SYNTHETIC + config, stderr=log,
        ) as server,
    ):  # fmt: skip
        parts = urlsplit(server.url)
        host, port = parts.hostname or "", parts.port or 80
        query = "chunks=500&mode=paced&interval_ms=20"  # 10 s, far longer than the test
        sse, ws, grpc, grpc_web = (StreamTally(array("q")) for _ in range(4))
        generate = GenerateRequest(loadtest=LoadTest(chunks=500, mode="paced", interval_ms=20))
        assert server.grpc is not None
        deadline = asyncio.get_running_loop().time() + 30
        running = asyncio.gather(
            run_sse_stream(host, port, f"/v1/loadtest/sse?{query}", sse, deadline),
            run_ws_stream(f"ws://{host}:{port}/v1/loadtest/ws?{query}", ws, deadline),
            run_grpc_streams(server.grpc, generate, [grpc], deadline),
            run_grpc_web_stream(host, port, generate, grpc_web, deadline),
        )
        tallies = (sse, ws, grpc, grpc_web)
        async with asyncio.timeout(10):
            while min(tally.received for tally in tallies) < 5:
                await asyncio.sleep(0.02)
        nats_server.kill()  # away longer than unavailable_after_s: an append gives up
        async with asyncio.timeout(10):  # until every generation gave up
            while log_path.read_text().count("the hub stopped the generation") < 4:
                await asyncio.sleep(0.05)  # another process writes it: poll
        nats_server.start()  # the gateway can store the error that ends each stream
        await asyncio.wait_for(running, 30)
    for tally in (sse, grpc, grpc_web):
        assert tally.error is not None, tally.received
        assert "the stream failed: hub_unavailable" in tally.error, tally.error
    assert ws.error is not None and "code 1011" in ws.error and "hub_unavailable" in ws.error
    assert all(tally.received < 500 for tally in tallies)
    assert "Traceback" not in log_path.read_text()
