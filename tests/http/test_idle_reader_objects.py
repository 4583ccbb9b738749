"""What an idle SSE reader costs the garbage collector: the objects a full pass walks for it.

At 100,000 idle connections a full pass walks every tracked object of every reader, and
every heartbeat due meanwhile waits for it; so the count per reader is kept down and checked
here. The gateway runs in this process (so that its objects can be counted) and the readers
are plain sockets in a child process (so that theirs are not).
"""

from __future__ import annotations

import asyncio
import collections
import contextvars
import gc
import subprocess
import sys
from dataclasses import replace

import httpx
import uvloop

from airlane.server.config import ServerConfig
from airlane.server.run import Listening, serve

READERS = 300
MAX_TRACKED_PER_READER = 52
"""51 when this was written (60 before the loop's call-backs stopped copying the context)."""

CLIENT = r"""
import socket, sys, time
port, count = int(sys.argv[1]), int(sys.argv[2])
head = (
    "GET /v1/streams/idle/events HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    "Accept: text/event-stream\r\n\r\n"
).encode()
readers = []
for _ in range(count):
    reader = socket.create_connection(("127.0.0.1", port))
    reader.sendall(head)
    readers.append(reader)
print("open", flush=True)
sys.stdin.read()  # until the test is done
"""


def _census() -> collections.Counter[type]:
    gc.unfreeze()  # (the pacer freezes what survives a pass: count it too)
    gc.collect()
    return collections.Counter(type(o) for o in gc.get_objects())


def test_an_idle_sse_reader_keeps_few_objects_and_no_context_copy_of_its_own() -> None:
    # On uvloop, as `airlane serve` runs (asyncio's own loop makes other objects).
    grown = uvloop.run(_grown_by_readers())
    per_reader = sum(grown.values()) / READERS
    assert per_reader <= MAX_TRACKED_PER_READER, grown.most_common(12)
    # Its task's context and its transport's: the timers and done call-backs it waits on
    # copy none (`airlane.runtime.plain`).
    assert grown[contextvars.Context] <= 2 * READERS + 5, grown.most_common(12)


async def _grown_by_readers() -> collections.Counter[type]:
    """The gateway's tracked objects, by type, grown by `READERS` parked SSE readers."""
    config = ServerConfig(port=0, log_level="warning")
    config = replace(  # the HTTP listener alone
        config,
        airc=replace(config.airc, enabled=False),
        grpc=replace(config.grpc, enabled=False),
        http3=replace(config.http3, enabled=False),
        rsocket=replace(config.rsocket, enabled=False),
    )
    ready: asyncio.Future[Listening] = asyncio.get_running_loop().create_future()
    server = asyncio.ensure_future(serve(config, on_ready=ready.set_result))
    client: asyncio.subprocess.Process | None = None
    try:
        listening = await asyncio.wait_for(ready, 30)
        async with httpx.AsyncClient(base_url=listening.http) as http:
            created = await http.post("/v1/streams", json={"name": "idle"})
            assert created.status_code == 201, created.text
            before = _census()
            port = listening.http.rsplit(":", 1)[1]
            client = await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                CLIENT,
                port,
                str(READERS),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
            assert client.stdout is not None
            assert await asyncio.wait_for(client.stdout.readline(), 60) == b"open\n"

            async def parked() -> bool:
                metrics = (await http.get("/metrics")).text
                return f'airlane_stream_connections{{transport="sse"}} {READERS}.0' in metrics

            for _ in range(300):
                if await parked():
                    break
                await asyncio.sleep(0.1)
            assert await parked()
            return _census() - before
    finally:
        if client is not None:
            client.kill()
            await client.wait()
        server.cancel()
        await asyncio.gather(server, return_exceptions=True)
