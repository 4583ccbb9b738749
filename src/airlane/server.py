"""The composition root: configuration -> hub + backend + security -> gateway -> listeners.

`ServerConfig` is what ``airlane serve`` builds from its flags and an optional TOML file.
`serve` binds the listening socket itself (so TCP keepalive applies to every accepted socket
and ``--port 0`` works), then runs the ASGI app under uvicorn with uvloop and httptools.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import sys
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import uvicorn

from airlane.acceptor import Acceptor, AcceptorMetrics
from airlane.address import DEFAULT_HOST, DEFAULT_PORT
from airlane.admission import Admission, AdmissionConfig
from airlane.artifacts.config import ArtifactsConfig
from airlane.backends.base import Backend
from airlane.backends.openai import OpenAIUpstreamBackend
from airlane.backends.synthetic import SyntheticBackend, SyntheticConfig
from airlane.core import OrphanMode, OrphanPolicy, Retention
from airlane.eventsourcing import EventSourcing, EventSourcingConfig
from airlane.fdtable import DEFAULT_RESERVED_FDS, reserve_fd_table
from airlane.gateway import Gateway, GatewayConfig
from airlane.gcpacer import GcConfig, GcPacer
from airlane.hub import Hub, MemoryHub, MemoryHubConfig
from airlane.hub.jetstream import JetStreamHubConfig
from airlane.security import AllowAll, ApiKeyPolicy, SecurityPolicy
from airlane.transports.airc import (
    AIRC_SUBPROTOCOL,
    AircServerConfig,
    AircTcpServer,
    AircWebSocketHandler,
)
from airlane.transports.grpc import GrpcServer, GrpcServerConfig
from airlane.transports.grpc.web import GRPC_WEB_PREFIX, grpc_web_app
from airlane.transports.http import AirlaneApp, HttpConfig
from airlane.transports.http.http_protocol import UpgradingHttpProtocol
from airlane.transports.http.ws_protocol import BatchingWebSocketProtocol
from airlane.wire.airc import AircConfig

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "Listening",
    "ServerConfig",
    "airc_port",
    "bind_socket",
    "build_app",
    "build_event_sourcing",
    "build_hub",
    "grpc_port",
    "load_config",
    "serve",
]

log = logging.getLogger("airlane.server")

DEFAULT_TCP_KEEPALIVE_S = 45
"""The seed's TCP keepalive on accepted sockets."""


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """Everything ``airlane serve`` can be told."""

    host: str = DEFAULT_HOST
    """Address to listen on (loopback by default)."""
    port: int = DEFAULT_PORT
    """Port to listen on; 0 picks a free one (printed at start)."""
    upstream: str | None = None
    """An OpenAI-compatible base URL (``http://host:8000/v1``); None: the synthetic backend."""
    upstream_api_key: str | None = None
    """Bearer key sent upstream."""
    model: str | None = None
    """Model name forced on upstream requests (None: the client's)."""
    api_keys: dict[str, str] = field(default_factory=dict)
    """Client API keys -> principal names; empty: no authentication (localhost default)."""
    synthetic: SyntheticConfig = field(default_factory=SyntheticConfig)
    """Timing of the synthetic backend."""
    http: HttpConfig = field(default_factory=HttpConfig)
    """HTTP transport limits and heartbeats."""
    orphan: OrphanPolicy = field(default_factory=OrphanPolicy)
    """Default orphan policy of generations."""
    retention: Retention = field(default_factory=Retention)
    """Default retention of every stream."""
    airc: AircServerConfig = field(default_factory=AircServerConfig)
    """The AIRC transport: its TCP listener and session limits."""
    grpc: GrpcServerConfig = field(default_factory=GrpcServerConfig)
    """The gRPC transport: its listener and limits."""
    tcp_keepalive_s: int = DEFAULT_TCP_KEEPALIVE_S
    """Idle seconds before TCP keepalive probes on accepted sockets."""
    hub: str = "memory"
    """Where streams live: ``memory`` (this process) or NATS JetStream server URLs,
    ``nats://host:4222`` (several separated by commas), shared by every node pointed at it."""
    jetstream: JetStreamHubConfig = field(default_factory=JetStreamHubConfig)
    """The JetStream hub's settings (``[jetstream]``), used when ``hub`` is a NATS URL."""
    eventsourcing: EventSourcingConfig = field(default_factory=EventSourcingConfig)
    """Event logs and the schema registry (``[eventsourcing]``); in JetStream when ``hub``
    is a NATS URL, else in memory."""
    artifacts: ArtifactsConfig = field(default_factory=ArtifactsConfig)
    """The model artifact store served under ``/v1/artifacts`` (``[artifacts]``)."""
    log_level: str = "info"
    """Python logging level."""
    gc: GcConfig = field(default_factory=GcConfig)
    """How the garbage collector is scheduled (``[gc]``, `airlane.gcpacer`)."""
    admission: AdmissionConfig = field(default_factory=AdmissionConfig)
    """How long and how many new streams may wait to be set up (``[admission]``,
    `airlane.admission`)."""
    reserved_fds: int = DEFAULT_RESERVED_FDS
    """Descriptor slots made at start (at most the soft ``RLIMIT_NOFILE``), so that taking
    connections never waits for the kernel to grow the table (`airlane.fdtable`); 0: none."""


def load_config(path: Path, base: ServerConfig | None = None) -> ServerConfig:
    """Read a TOML file: top-level keys of `ServerConfig`, plus ``[synthetic]``, ``[http]``,
    ``[orphan]``, ``[retention]``, ``[airc]``, ``[grpc]``, ``[jetstream]``, ``[eventsourcing]``,
    ``[artifacts]``, ``[gc]``, ``[admission]`` and ``[api_keys]`` tables. Unknown
    keys are an error."""
    with path.open("rb") as fh:
        data = tomllib.load(fh)
    config = base or ServerConfig()
    nested: dict[str, Any] = {
        "synthetic": (SyntheticConfig, config.synthetic),
        "http": (HttpConfig, config.http),
        "orphan": (OrphanPolicy, config.orphan),
        "retention": (Retention, config.retention),
        "airc": (AircServerConfig, config.airc),
        "grpc": (GrpcServerConfig, config.grpc),
        "jetstream": (JetStreamHubConfig, config.jetstream),
        "eventsourcing": (EventSourcingConfig, config.eventsourcing),
        "artifacts": (ArtifactsConfig, config.artifacts),
        "gc": (GcConfig, config.gc),
        "admission": (AdmissionConfig, config.admission),
    }
    changes: dict[str, Any] = {}
    allowed = {f.name for f in fields(ServerConfig)}
    for key, value in data.items():
        if key not in allowed:
            raise ValueError(f"{path}: unknown setting {key!r}")
        if key not in nested:
            changes[key] = value
            continue
        cls, current = nested[key]
        section = dict(value)
        if key == "airc" and "connection" in section:
            # [airc.connection]: the protocol's windows and timers.
            unknown = set(section["connection"]) - {f.name for f in fields(AircConfig)}
            if unknown:
                raise ValueError(f"{path}: unknown [airc.connection] settings {sorted(unknown)}")
            section["connection"] = replace(current.connection, **section["connection"])
        if key == "orphan" and "mode" in section:
            section["mode"] = OrphanMode(section["mode"])
        if key == "jetstream" and ("local" in section or "servers" in section):
            raise ValueError(f"{path}: set the NATS servers with hub = 'nats://...'")
        for name in ("models", "cors_origins"):
            if key == "http" and name in section:
                section[name] = tuple(section[name])
        unknown = set(section) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"{path}: unknown [{key}] settings {sorted(unknown)}")
        changes[key] = replace(current, **section)
    return replace(config, **changes)


def build_backend(config: ServerConfig) -> Backend:
    """The synthetic backend, or the upstream one when ``upstream`` is set."""
    if config.upstream:
        return OpenAIUpstreamBackend(config.upstream, config.upstream_api_key, model=config.model)
    return SyntheticBackend(config.synthetic)


def nats_servers(config: ServerConfig) -> tuple[str, ...]:
    """The NATS servers ``hub`` names; empty for ``memory``."""
    if config.hub == "memory":
        return ()
    servers = tuple(url.strip() for url in config.hub.split(",") if url.strip())
    if not servers or not all(url.startswith(("nats://", "tls://")) for url in servers):
        raise ValueError(f"hub {config.hub!r}: use 'memory' or nats://host:port[,nats://...]")
    return servers


def build_hub(config: ServerConfig) -> Hub:
    """The in-memory hub, or the JetStream hub when ``hub`` names NATS servers."""
    local = MemoryHubConfig(retention=config.retention)
    servers = nats_servers(config)
    if not servers:
        return MemoryHub(local)
    from airlane.hub.jetstream.hub import JetStreamHub  # loads the NATS client: only here

    return JetStreamHub(replace(config.jetstream, servers=servers, local=local))


def build_event_sourcing(config: ServerConfig) -> EventSourcing:
    """Event logs and the registry: in JetStream beside the hub, or in memory."""
    return EventSourcing(
        config.eventsourcing,
        servers=nats_servers(config),
        prefix=config.jetstream.prefix,
        replicas=config.jetstream.replicas,
    )


def build_app(config: ServerConfig) -> AirlaneApp:
    """Gateway and HTTP app for ``config`` (the gateway starts on ASGI lifespan startup)."""
    security: SecurityPolicy = ApiKeyPolicy(config.api_keys) if config.api_keys else AllowAll()
    gateway = Gateway(
        build_hub(config),
        build_backend(config),
        security=security,
        config=GatewayConfig(orphan=config.orphan, retention=config.retention),
        events=build_event_sourcing(config),
    )
    if config.artifacts.dir is not None:
        from airlane.artifacts.service import ArtifactService  # numpy and hashes: only here

        gateway.artifacts = ArtifactService(
            Path(config.artifacts.dir),
            gateway.hub,
            scan_interval_s=config.artifacts.scan_interval_s,
        )
    http = config.http
    if config.model and config.model not in http.models:
        http = replace(http, models=(config.model, *http.models))
    airc = AircWebSocketHandler(gateway, config.airc)
    # gRPC-Web and Connect for browsers, on the HTTP port (native gRPC has its own listener).
    rpc = grpc_web_app(gateway, config.grpc)
    return AirlaneApp(
        gateway, http, subprotocols={AIRC_SUBPROTOCOL: airc}, mounts={GRPC_WEB_PREFIX: rpc}
    )


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
    own server, which under uvloop accepts one connection a loop turn (`airlane.acceptor`).

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
