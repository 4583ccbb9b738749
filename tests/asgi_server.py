"""Airlane's HTTP/WebSocket server around any ASGI app, in the test's own event loop, on a
free port of 127.0.0.1 (`airlane.transports.http.server.HttpServer`)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Any

from airlane.server import DEFAULT_TCP_KEEPALIVE_S, bind_socket
from airlane.transports.http.asgi import ASGIApp
from airlane.transports.http.server import HttpServer, ServerSettings


@dataclass
class Served:
    """A running server: where it listens, and the server itself."""

    server: HttpServer
    host: str
    port: int

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://{self.host}:{self.port}"


@contextlib.asynccontextmanager
async def serving(
    app: ASGIApp, settings: ServerSettings | None = None, **changes: Any
) -> AsyncIterator[Served]:
    """Serve ``app`` (its lifespan included) with ``settings`` (default: `ServerSettings`)
    and ``changes`` to them until the block ends, then shut the server down as ``airlane
    serve`` does."""
    sock = bind_socket("127.0.0.1", 0, DEFAULT_TCP_KEEPALIVE_S)
    server = HttpServer(app, replace(settings or ServerSettings(), **changes))
    try:
        await server.start(sock)
        yield Served(server, "127.0.0.1", sock.getsockname()[1])
    finally:
        await server.shutdown()
        sock.close()
