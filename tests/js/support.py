"""The TypeScript client (``clients/js``): where it is, and building it with its own compiler."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import shutil
import socket
import struct
import subprocess
from pathlib import Path

import pytest

from airlane.backends.synthetic import SyntheticConfig, SyntheticScript
from airlane.core import Kind
from airlane.gateway.chat_request import parse_chat_request

CLIENT_DIR = Path(__file__).resolve().parents[2] / "clients" / "js"
TSC = CLIENT_DIR / "node_modules" / "typescript" / "bin" / "tsc"


def node_or_skip() -> str:
    """``node``, with the client's development packages installed (``scripts/setup.sh --test``
    runs ``npm ci`` there); skips without them, except under ``CI=true``, where it fails."""
    node = shutil.which("node")
    missing = None
    if node is None:
        missing = "node is not installed"
    elif not TSC.is_file():
        missing = f"run 'npm ci --prefix {CLIENT_DIR}' first"
    if missing is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(missing)
        pytest.skip(missing)
    assert node is not None
    return node


def build(node: str, *args: str) -> None:
    """Compile the client with ``tsc`` (``-p clients/js/tsconfig.json`` and ``args``); fails
    the test with the compiler's messages."""
    done = subprocess.run(
        [node, str(TSC), "-p", str(CLIENT_DIR / "tsconfig.json"), *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


PROMPT = "tell me about resumable streams"  # test/support.js asks this
LONG = 250


@functools.cache
def long_seeds(count: int = 3) -> list[int]:
    """Seeds whose answer to `PROMPT` runs to `LONG` tokens (the synthetic backend's text
    depends only on seed, model and messages): the tests' streams end at their ``max_tokens``
    ("length"), long enough to be cut, cancelled and paused midway."""
    seeds = []
    for seed in range(5000):
        body = {"model": "synthetic", "messages": [{"role": "user", "content": PROMPT}],
                "seed": seed, "max_tokens": LONG}  # fmt: skip
        script = SyntheticScript(parse_chat_request(body).generation, SyntheticConfig())
        if sum(event.kind is Kind.DELTA for _, event in script) >= LONG:
            seeds.append(seed)
            if len(seeds) == count:
                return seeds
    raise AssertionError(f"fewer than {count} seeds below 5000 give {LONG} tokens")


class CuttingProxy:
    """A TCP proxy on 127.0.0.1 in front of ``upstream`` that resets the first connection
    whose response is a stream (an SSE body or a WebSocket upgrade) once that connection has
    carried ``after`` more bytes to the client: a network that drops mid-stream, whatever
    else the browser fetches through it first."""

    STREAMS = (b"\r\ncontent-type: text/event-stream", b"HTTP/1.1 101 ")
    """What a streaming response's head holds (as the gateway writes it)."""

    def __init__(self, upstream: tuple[str, int], after: int) -> None:
        self.upstream = upstream
        self.after = after
        self.cuts = 0
        self.url = ""
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def __aenter__(self) -> CuttingProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, OSError):
                await task

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        pumps = [asyncio.create_task(_copy(reader, up_writer)),
                 asyncio.create_task(self._responses(up_reader, writer))]  # fmt: skip
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pump in pumps:
                pump.cancel()
            for w in (writer, up_writer):
                w.transport.abort()
            self._tasks.discard(task)

    async def _responses(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        counting: int | None = None  # bytes left before the cut, on the connection cut
        for _ in range(1_000_000):
            data = await reader.read(65536)
            if not data:
                return
            if counting is None and self.cuts == 0 and any(s in data for s in self.STREAMS):
                self.cuts += 1
                counting = self.after
            if counting is not None:
                data = data[:counting]
                counting -= len(data)
            writer.write(data)
            await writer.drain()
            if counting == 0:
                await asyncio.sleep(0.1)  # the client reads what it got, then: RST
                sock = writer.get_extra_info("socket")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                writer.transport.abort()
                return


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    for _ in range(1_000_000):
        data = await reader.read(65536)
        if not data:
            return
        writer.write(data)
        await writer.drain()
