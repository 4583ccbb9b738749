"""The bench's load clients (`run_sse_stream`, `run_ws_stream`) over real sockets: against a
real gateway, against the ``websockets`` library's own server (another implementation of RFC
6455), against broken servers (every failure ends in ``tally.error``, nothing raises), and the
client-ceiling benchmark at a tiny size. Each runs on asyncio's loop and on uvloop, which
``airlane bench`` uses."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from array import array
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
import uvloop
from websockets.asyncio.server import ServerConnection, serve

from airlane.backends.synthetic import LoadTestChunk
from airlane.bench.sse_load import run_sse_stream
from airlane.bench.tally import StreamTally
from airlane.bench.ws_frames import Opcode, close_payload
from airlane.bench.ws_handshake import accept_value
from airlane.bench.ws_load import run_ws_stream
from tests.servers import ServerProcess

ROOT = Path(__file__).resolve().parents[2]
ENCODER = LoadTestChunk("airlane-loadtest", b"tests")

Runner = Callable[[Coroutine[Any, Any, None]], None]
LOOPS: dict[str, Runner] = {"asyncio": asyncio.run, "uvloop": uvloop.run}


@pytest.fixture(params=sorted(LOOPS))
def run(request: pytest.FixtureRequest) -> Runner:
    """Run a coroutine to completion on each event loop."""
    return LOOPS[request.param]


Start = Callable[[StreamTally, float], Awaitable[None]]


def streams(
    count: int, start: Start
) -> tuple[list[StreamTally], Callable[[], Coroutine[Any, Any, None]]]:
    """``count`` tallies, and a coroutine function that runs a stream into each at once
    (``start(tally, deadline)``)."""
    tallies = [StreamTally(array("q")) for _ in range(count)]

    async def main() -> None:
        deadline = asyncio.get_running_loop().time() + 20
        await asyncio.gather(*(start(tally, deadline) for tally in tallies))

    return tallies, main


def assert_complete(tally: StreamTally, chunks: int) -> None:
    assert tally.error is None and tally.finished
    assert tally.received == chunks and tally.disorder == 0 and tally.next_seq == chunks + 1
    assert tally.first_ns >= tally.start_ns > 0 and tally.last_ns >= tally.first_ns
    assert len(tally.lags) == chunks and tally.payload_bytes > 1000 * chunks


def test_both_transports_against_a_gateway(server: ServerProcess, run: Runner) -> None:
    parts = urlsplit(server.url)
    host, port = parts.hostname or "", parts.port or 80
    query = "chunks=20&mode=burst"
    sse, sse_main = streams(
        3, lambda t, d: run_sse_stream(host, port, f"/v1/loadtest/sse?{query}", t, d)
    )
    ws, ws_main = streams(
        3, lambda t, d: run_ws_stream(f"ws://{host}:{port}/v1/loadtest/ws?{query}", t, d)
    )
    run(sse_main())
    run(ws_main())
    for tally in sse + ws:
        assert_complete(tally, 20)
    assert {t.payload_bytes for t in sse} == {t.payload_bytes for t in ws}


def test_a_refused_stream_is_an_error(server: ServerProcess, run: Runner) -> None:
    parts = urlsplit(server.url)
    host, port = parts.hostname or "", parts.port or 80
    (sse,), sse_main = streams(1, lambda t, d: run_sse_stream(host, port, "/nowhere", t, d))
    (ws,), ws_main = streams(1, lambda t, d: run_ws_stream(f"ws://{host}:{port}/nowhere", t, d))
    run(sse_main())
    run(ws_main())
    assert sse.error is not None and "404" in sse.error and not sse.finished
    assert ws.error is not None and "instead of 101" in ws.error and not ws.finished


# -- the websockets library's server ------------------------------------------------------------


async def _library_handler(connection: ServerConnection) -> None:
    """Chunks as whole and fragmented text messages, pings between them, then the close code
    the path asks for."""
    chunks = [ENCODER.encode(n, 1000 * n) for n in range(1, 7)]
    for index, text in enumerate(chunks):
        if index % 2:
            await connection.send([text[:5], text[5:600], text[600:]], text=True)
        else:
            await connection.send(text, text=True)
        if index == 2:
            await connection.ping(b"still there?")
    assert connection.request is not None
    code = int(connection.request.path.rsplit("/", 1)[1])
    await connection.close(code, "bye")


@pytest.mark.parametrize("code", [1000, 1011])
def test_interop_with_the_websockets_library_server(run: Runner, code: int) -> None:
    tallies: list[StreamTally] = []

    async def main() -> None:
        async with serve(_library_handler, "127.0.0.1", 0, compression=None) as server:
            port = server.sockets[0].getsockname()[1]
            url = f"ws://127.0.0.1:{port}/{code}"
            group, inner = streams(2, lambda t, d: run_ws_stream(url, t, d))
            tallies.extend(group)
            await inner()

    run(main())
    for tally in tallies:
        if code == 1000:
            assert tally.error is None and tally.finished and tally.received == 6
        else:
            assert tally.error is not None and "1011" in tally.error and "bye" in tally.error
            assert tally.received == 6 and not tally.finished


# -- broken servers -----------------------------------------------------------------------------


class _Scripted(asyncio.Protocol):
    """Answers the request with ``reply``, keeps what the client sent, then closes (or not)."""

    def __init__(self, reply: bytes, received: bytearray, close: bool) -> None:
        self.reply, self.received, self.close = reply, received, close
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        self.received += data
        if data.endswith(b"\r\n\r\n"):
            self.transport.write(self.respond(data))
            if self.close:
                self.transport.close()

    def respond(self, request: bytes) -> bytes:
        return self.reply


class _Upgrading(_Scripted):
    """Accepts the WebSocket upgrade (for the client's key), then sends ``reply``."""

    def respond(self, request: bytes) -> bytes:
        key = request.split(b"Sec-WebSocket-Key: ")[1].split(b"\r\n")[0]
        return (
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\nSec-WebSocket-Accept: %b\r\n\r\n"
            % accept_value(key)
            + self.reply
        )


def scripted(
    reply: bytes, transport: str, *, close: bool = True, server: type[_Scripted] = _Scripted
) -> tuple[StreamTally, bytes]:
    """One stream of ``transport`` against a ``server`` that sends ``reply``; the tally and
    what the client sent."""
    tally = StreamTally(array("q"))
    received = bytearray()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        listener = await loop.create_server(lambda: server(reply, received, close), "127.0.0.1", 0)
        port = listener.sockets[0].getsockname()[1]
        deadline = loop.time() + 1.0
        if transport == "sse":
            await run_sse_stream("127.0.0.1", port, "/", tally, deadline)
        else:
            await run_ws_stream(f"ws://127.0.0.1:{port}/", tally, deadline)
        listener.close()

    uvloop.run(main())
    return tally, bytes(received)


def test_broken_sse_servers_end_in_tally_errors() -> None:
    head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
    replies = [
        head + b"5\r\ndata: {x}\n\n",  # cut short, then closed
        head + b"zz\r\n",
        b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n",
    ]
    for reply in replies:
        tally, _ = scripted(reply, "sse")
        assert tally.error and not tally.finished, reply
    tally, _ = scripted(head, "sse", close=False)
    assert tally.error == "timed out"


def test_broken_ws_servers_end_in_tally_errors_and_a_close_frame() -> None:
    tally, sent = scripted(b"\x82\x03abc", "ws", close=False, server=_Upgrading)
    assert tally.error and "binary" in tally.error and not tally.finished
    closing = sent[sent.index(b"\r\n\r\n") + 4 :]
    assert closing[0] == 0x80 | Opcode.CLOSE and closing[1] == 0x80 | 2  # final, masked
    payload = bytes(b ^ closing[2 + i % 4] for i, b in enumerate(closing[6:8]))
    assert payload == close_payload(1003)

    tally, _ = scripted(b"\x81\x7f\x80" + b"\x00" * 7, "ws", close=False, server=_Upgrading)
    assert tally.error and "top bit" in tally.error
    tally, _ = scripted(b"", "ws", server=_Upgrading)
    assert tally.error and "without a close frame" in tally.error
    tally, _ = scripted(b"", "ws", close=False, server=_Upgrading)
    assert tally.error == "timed out"
    tally, _ = scripted(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n", "ws")
    assert tally.error and "400 Bad Request" in tally.error
    tally = StreamTally(array("q"))
    uvloop.run(run_ws_stream("wss://127.0.0.1:1/", tally, 0.0))
    assert tally.error and "ws:// URL" in tally.error


def test_client_ceiling_benchmark_runs() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "client_ceiling.py"),
         "--streams", "4", "--chunks", "30", "--rounds", "1"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if "MB/s" in line]
    assert len(lines) == 4 and all("errors" not in line for line in lines), result.stdout


def test_client_ceiling_benchmark_runs_paced() -> None:
    """Paced mode: every chunk arrives, in order, never before its ts; the lag is printed."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "client_ceiling.py"), "--mode", "paced",
         "--interval-ms", "5", "--streams", "6", "--chunks", "20", "--rounds", "1"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if "MB/s" in line]
    assert len(lines) == 4 and all("errors" not in line for line in lines), result.stdout
    for line in lines:
        lag_p50 = float(line.split("lag p50")[1].split()[0])
        assert 0 <= lag_p50 < 1000, line  # negative would mean a chunk left before its ts
        assert "server" in line and "us/chunk" in line


def test_client_ceiling_serves_alone() -> None:
    """``--serve``: the ceiling server alone, its port printed and its pid on ``/healthz``,
    measurable by the bench's client like any peer."""
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "benchmarks" / "client_ceiling.py"), "--serve"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("listening on http://127.0.0.1:"), line
        port = int(line.rsplit(":", 1)[1])
        health = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=10, trust_env=False)
        assert health.json() == {"pid": process.pid}
        tally = StreamTally(array("q"))
        path = "/v1/loadtest/sse?chunks=5&mode=paced&interval_ms=2"

        async def one_stream() -> None:
            deadline = asyncio.get_running_loop().time() + 20
            await run_sse_stream("127.0.0.1", port, path, tally, deadline)

        uvloop.run(one_stream())
        assert tally.error is None and tally.received == 5 and tally.disorder == 0
    finally:
        process.terminate()
        process.wait(10)
