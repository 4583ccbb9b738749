"""``airlane serve`` paces its garbage collector (`airlane.server.gcpacer`), which runs full passes
seldom; so the gateway must not leave reference cycles behind per connection. A gateway
told to make a full pass every 0.2 s serves streams over every transport of ours, finished
and cut off mid-stream, and its ``/metrics`` must show full passes that found nothing. A cycle
that a finalizer breaks (a suspended generator's) is freed by a pass without being counted,
so it does not show here: ``tests/http/test_ws_cycles.py`` counts what stays alive instead."""

from __future__ import annotations

import asyncio
import time
from urllib.parse import urlsplit

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.cli.conftest import airlane
from tests.servers import FAST_SYNTHETIC, run_server

CONFIG = FAST_SYNTHETIC + "\n[gc]\nmin_full_interval_s = 0.0\nmax_full_interval_s = 0.2\n"


def gc_metrics(url: str) -> dict[str, float]:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        if family.name.startswith("airlane_gc_")
        for sample in family.samples
    }


async def cut_off(host: str, port: int, request: str) -> None:
    """Open a stream, read its first bytes, and drop the connection (a client that left)."""
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(request.encode("latin-1"))
    await reader.read(1024)
    writer.transport.abort()


async def cut_off_streams(url: str) -> None:
    parts = urlsplit(url)
    host, port = parts.hostname or "", parts.port or 80
    sse = "GET /v1/loadtest/sse?chunks=100&mode=paced HTTP/1.1\r\nHost: t\r\n\r\n"
    # A header value outside ASCII (websockets takes it as ISO-8859-1), and a client that
    # drops the connection without a closing handshake.
    ws = (
        "GET /v1/loadtest/ws?chunks=100&mode=paced HTTP/1.1\r\nHost: t\r\n"
        "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nX-Note: caf\xe9\r\n\r\n"
    )
    await asyncio.gather(*(cut_off(host, port, request) for request in [sse, ws] * 10))


def test_streams_leave_no_reference_cycles(tmp_path):
    with run_server(config=CONFIG) as server:
        assert server.airc is not None
        host, airc_port = server.airc
        for transport in ("sse", "ws", "airc", "airc-ws"):
            result = airlane(
                "bench", "--url", server.url, "--airc-url", f"tcp://{host}:{airc_port}",
                "--transport", transport, "--streams", "10", "--chunks", "5",
            )  # fmt: skip
            assert result.returncode == 0, result.stdout + result.stderr
        asyncio.run(cut_off_streams(server.url))
        # Wait for the cut-off streams' cleanup and a full pass after it.
        passes = gc_metrics(server.url)["airlane_gc_full_collections_total"]
        deadline = time.monotonic() + 10
        while gc_metrics(server.url)["airlane_gc_full_collections_total"] < passes + 3:
            assert time.monotonic() < deadline, "no full passes"
            time.sleep(0.2)
        time.sleep(1.0)
        metrics = gc_metrics(server.url)
    assert metrics["airlane_gc_full_collections_total"] > passes
    assert metrics["airlane_gc_tracked_objects"] > 0
    assert metrics["airlane_gc_collected_objects_total"] == 0
