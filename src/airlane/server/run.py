"""`serve`: the gateway's listeners and its process, until cancelled or signalled.

`serve` binds the listening sockets itself (so TCP keepalive applies to every accepted socket
and ``--port 0`` works), then runs the ASGI app under uvicorn with uvloop and httptools, the
AIRC/TCP listener and the gRPC server beside it.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass

import uvicorn

from airlane.runtime.acceptor import Acceptor, AcceptorMetrics
from airlane.runtime.admission import Admission
from airlane.server.compose import build_app
from airlane.server.config import ServerConfig
from airlane.server.fdtable import reserve_fd_table
from airlane.server.gcpacer import GcPacer
from airlane.transports.airc import AircTcpServer
from airlane.transports.grpc import GrpcServer
from airlane.transports.http import AirlaneApp
from airlane.transports.http.http_protocol import UpgradingHttpProtocol
from airlane.transports.http.ws_protocol import BatchingWebSocketProtocol

__all__ = ["Listening", "airc_port", "bind_socket", "grpc_port", "serve"]

log = logging.getLogger("airlane.server")


def bind_socket(host: str, port: int, keepalive_s: int) -> socket.socket:
    """A listening socket whose accepted connections inherit TCP keepalive settings and
    ``TCP_NODELAY``."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    # uvloop sets it on each connection; asyncio's own loop does only for sockets made with
    # proto=IPPROTO_TCP, which these are not: without it a chunk written while the previous
    # one is unacknowledged would wait for the peer's delayed ACK (up to 40 ms).
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    if hasattr(socket, "TCP_KEEPIDLE"):  # Linux; accepted sockets inherit these options
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, keepalive_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, max(1, keepalive_s // 3))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)
    sock.bind((host, port))
    sock.listen(4096)
    sock.setblocking(False)
    return sock


def uvicorn_config(app: AirlaneApp, config: ServerConfig) -> uvicorn.Config:
    """uvicorn settings: uvloop + httptools (`UpgradingHttpProtocol`), WebSocket pings and size
    limit from ``http``, and `BatchingWebSocketProtocol` for WebSockets."""
    return uvicorn.Config(
        app,
        loop="uvloop" if sys.platform != "win32" else "asyncio",
        # httptools, handing WebSocket upgrades over already parsed (http_protocol.py).
        http=UpgradingHttpProtocol,
        # uvicorn's websockets-sansio protocol, plus sending a batch of messages in one write.
        ws=BatchingWebSocketProtocol,
        ws_ping_interval=config.http.ws_ping_s,
        ws_ping_timeout=config.http.ws_ping_s,
        ws_max_size=config.http.max_ws_message_bytes,
        ws_per_message_deflate=config.http.ws_compression,
        lifespan="on",
        log_level=config.log_level,
        access_log=False,
        timeout_graceful_shutdown=5,
    )


class _AcceptingServer(uvicorn.Server):
    """uvicorn's server, taking its connections through an `Acceptor` rather than the loop's
    own server, which under uvloop accepts one connection a loop turn (`airlane.runtime.acceptor`).

    Plain TCP only: `uvicorn_config` sets no TLS, which the acceptor would not apply."""

    def __init__(
        self, config: uvicorn.Config, sock: socket.socket, metrics: AcceptorMetrics
    ) -> None:
        super().__init__(config)
        self._sock = sock
        self._metrics = metrics

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's start-up (the lifespan, the shared state) with no listener of its own,
        then the acceptor on the socket; `shutdown` closes it with uvicorn's servers."""
        assert self.config.ssl is None, "the acceptor does not wrap connections in TLS"
        await super().startup(sockets=[])
        if not self.started:
            return
        config, state, app_state = self.config, self.server_state, self.lifespan.state

        def protocol() -> asyncio.Protocol:
            # What uvicorn's own factory makes for each connection.
            return config.http_protocol_class(  # type: ignore[call-arg]
                config=config, server_state=state, app_state=app_state
            )

        acceptor = Acceptor(self._sock, protocol)
        acceptor.start()
        self._metrics.watch("http", acceptor)
        self.servers.append(acceptor)  # type: ignore[arg-type]  # close() and wait_closed()


@dataclass(frozen=True, slots=True)
class Listening:
    """Where a running gateway listens."""

    http: str
    """The base URL (``http://host:port``)."""
    airc: str | None
    """The AIRC/TCP listener (``tcp://host:port``), None when off."""
    grpc: str | None
    """The gRPC listener (``host:port``), None when off."""


def grpc_port(config: ServerConfig, http_port: int) -> int:
    """The gRPC port: as configured, else the HTTP port + 2 (a free one when the HTTP port
    was 0)."""
    if config.grpc.port is not None:
        return config.grpc.port
    return http_port + 2 if config.port else 0


def airc_port(config: ServerConfig, http_port: int) -> int:
    """The AIRC/TCP port: as configured, else the HTTP port + 1 (a free one when the HTTP
    port was 0, so that test servers never collide)."""
    if config.airc.port is not None:
        return config.airc.port
    return http_port + 1 if config.port else 0


async def serve(
    config: ServerConfig, *, on_ready: Callable[[Listening], None] | None = None
) -> None:
    """Run the gateway until cancelled or signalled; ``on_ready`` gets the addresses."""
    reserve_fd_table(config.reserved_fds)
    Admission.for_loop().configure(config.admission)
    app = build_app(config)
    pacer = GcPacer(config.gc)
    app.metrics.registry.register(pacer)
    sock = bind_socket(config.host, config.port, config.tcp_keepalive_s)
    host, port = sock.getsockname()[:2]
    url = f"http://{f'[{host}]' if ':' in host else host}:{port}"
    accept_metrics = AcceptorMetrics()
    app.metrics.registry.register(accept_metrics)
    server = _AcceptingServer(uvicorn_config(app, config), sock, accept_metrics)
    airc: AircTcpServer | None = None
    if config.airc.enabled:
        airc = AircTcpServer(app.gateway, config.airc)
        await airc.start(bind_socket(config.host, airc_port(config, port), config.tcp_keepalive_s))
        accept_metrics.watch("airc", airc.acceptor)
        # GOAWAY to every AIRC session before the hub closes under their streams.
        app.on_shutdown.append(airc.aclose)
    grpc_server: GrpcServer | None = None
    if config.grpc.enabled:
        grpc_server = GrpcServer(app.gateway, config.grpc)
        await grpc_server.start(config.host, grpc_port(config, port))
        app.on_shutdown.append(grpc_server.aclose)

    async def announce() -> None:
        # uvicorn exposes readiness only as a flag, so poll it briefly.
        while not server.started:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        if on_ready is not None:
            grpc_address = None
            if grpc_server is not None:
                grpc_address = f"{f'[{host}]' if ':' in host else host}:{grpc_server.port}"
            on_ready(Listening(url, airc.url if airc is not None else None, grpc_address))

    announcer = asyncio.create_task(announce())
    pacer.start()  # last: what start-up made is frozen once, not walked by every pass
    try:
        await server.serve()
    finally:
        announcer.cancel()
        if airc is not None:
            await airc.aclose()
        if grpc_server is not None:
            await grpc_server.aclose()
        sock.close()
        pacer.stop()
