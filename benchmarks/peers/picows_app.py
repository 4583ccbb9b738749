"""The load-test contract's WebSocket half served the picows way (no SSE: picows speaks
WebSocket only). A reference for ``airlane bench --url ... --transport ws``.

One `picows.WSListener` per connection; a task sends the chunks with ``WSTransport.send``
(buffered by the transport: picows has no awaitable send) and honours ``pause_writing`` /
``resume_writing`` as a careful picows user would, so that a slow client does not grow the
buffer without end. ``/healthz`` answers with this process's id (a picows non-101 response),
which the benchmark uses to sample the server's CPU. Run on uvloop, as picows recommends.

    python benchmarks/peers/picows_app.py --port 0     # prints: listening on http://...
"""

from __future__ import annotations

import asyncio
import json
import os
from urllib.parse import parse_qsl, urlsplit

import uvloop
from loadtest import LoadTestQuery, announce, chunk_stream, listening_socket, parse_args
from picows import (
    WSCloseCode,
    WSFrame,
    WSListener,
    WSMsgType,
    WSTransport,
    WSUpgradeRequest,
    WSUpgradeResponse,
    WSUpgradeResponseWithListener,
    ws_create_server,
)


class LoadTestListener(WSListener):
    """One load-test stream over WebSocket: each text message is one chunk; close 1000."""

    def __init__(self, query: LoadTestQuery) -> None:
        self.query = query
        self.task: asyncio.Task[None] | None = None
        self.writable = asyncio.Event()
        self.writable.set()

    def on_ws_connected(self, transport: WSTransport) -> None:
        self.task = asyncio.get_running_loop().create_task(self.stream(transport))

    async def stream(self, transport: WSTransport) -> None:
        async for chunk in chunk_stream(self.query):
            if not self.writable.is_set():
                await self.writable.wait()
            transport.send(WSMsgType.TEXT, chunk.encode())
        transport.send_close(WSCloseCode.OK)
        transport.disconnect()

    def on_ws_frame(self, transport: WSTransport, frame: WSFrame) -> None:
        if frame.msg_type == WSMsgType.CLOSE:
            transport.send_close(frame.get_close_code())
            transport.disconnect()

    def on_ws_disconnected(self, transport: WSTransport) -> None:
        if self.task is not None:
            self.task.cancel()

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()


def route(request: WSUpgradeRequest) -> WSListener | WSUpgradeResponseWithListener | None:
    """``/healthz`` and ``/v1/loadtest/ws``; anything else 404."""
    target = request.path.decode() if isinstance(request.path, bytes) else str(request.path)
    parts = urlsplit(target)
    if parts.path == "/healthz":
        body = json.dumps({"pid": os.getpid()}).encode()
        response = WSUpgradeResponse.create_ok_response(body, {"Content-Type": "application/json"})
        return WSUpgradeResponseWithListener(response, None)
    if parts.path != "/v1/loadtest/ws":
        return None
    try:
        query = LoadTestQuery.parse(dict(parse_qsl(parts.query)))
    except ValueError as exc:
        return WSUpgradeResponseWithListener(
            WSUpgradeResponse.create_error_response(400, str(exc).encode()), None
        )
    return LoadTestListener(query)


async def serve() -> None:
    """Serve on ``--host``/``--port`` until interrupted."""
    args = parse_args("The load-test contract (WebSocket) on picows.")
    sock = listening_socket(args.host, args.port)
    server = await ws_create_server(route, sock=sock)
    announce(sock)
    await server.serve_forever()


if __name__ == "__main__":
    uvloop.run(serve())
