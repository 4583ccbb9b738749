"""`serve`: the gateway's listeners and its process, until cancelled or signalled.

`serve` binds the listening sockets itself (so TCP keepalive and ``TCP_NODELAY`` apply to
every accepted socket, and ``--port 0`` works), then runs the ASGI app on Airlane's own
HTTP/1.1 and WebSocket server (`airlane.transports.http.server`, under uvloop), the AIRC/TCP
listener and the gRPC server beside it.

Every listener is bound before anything starts, and what keeps the gateway from starting is
a `StartupError` whose text is one line for a person: a port that is taken names its listener
and address (`ListenerError`, which ``airlane serve`` completes with the flag that changes
it), a bad setting says which, an application that fails its lifespan start-up says why. A
signal during start-up cancels it.

SIGINT and SIGTERM stop it gracefully (`HttpServer.shutdown`: requests in flight get their
grace, WebSockets 1012, then the lifespan's shutdown sends AIRC's GOAWAY, stops gRPC and
closes the gateway); a second signal cuts the grace short. Once stopped, the signal is raised
again, handled as it was before `serve`, so that the process ends as it would have without
`serve`'s handler (SIGINT: ``KeyboardInterrupt``, which ``airlane serve`` turns into exit
status 130).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from airlane import __version__
from airlane.core.errors import ErrorCode
from airlane.gateway import Gateway, ServerTls
from airlane.runtime.acceptor import AcceptorMetrics
from airlane.runtime.admission import Admission
from airlane.runtime.handoff import Handoff, HandoffMetrics
from airlane.runtime.loadboard import LoadBoard
from airlane.runtime.worker_metrics import WorkerMetrics
from airlane.security.jwt import Jwks
from airlane.security.rbac import RbacPolicy
from airlane.security.spiffe import SpiffeId
from airlane.security.tls import TlsSettings
from airlane.server.compose import build_app, nats_servers
from airlane.server.config import ServerConfig
from airlane.server.fdtable import reserve_fd_table
from airlane.server.gcpacer import GcPacer
from airlane.server.gcturns import GcTurns, turns_path
from airlane.transports.airc import AircTcpServer
from airlane.transports.grpc import GrpcServer
from airlane.transports.http import AirlaneApp
from airlane.transports.http.h3 import Http3Server
from airlane.transports.http.server import HttpServer, LifespanFailed, ServerSettings
from airlane.transports.http.webrtc.signalling import PeerSignalling
from airlane.transports.mqtt import MqttBridge
from airlane.transports.rsocket import RSocketTcpServer
from airlane.transports.waku import WakuMetrics, WakuNode

__all__ = [
    "ListenerError",
    "Listening",
    "StartupError",
    "airc_port",
    "bind_socket",
    "grpc_port",
    "rsocket_port",
    "serve",
]

log = logging.getLogger("airlane.server")

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class StartupError(Exception):
    """The gateway cannot start, for a reason its user can act on; the text is one line."""


class ListenerError(StartupError):
    """A listener cannot bind its address (the port is taken, or not allowed)."""

    def __init__(self, listener: str, host: str, port: int, reason: str) -> None:
        where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        super().__init__(f"the {listener} listener cannot bind {where}: {reason}")
        self.listener = listener
        """``HTTP``, ``AIRC``, ``gRPC``, ``HTTP/3`` or ``RSocket``."""
        self.host = host
        self.port = port
        self.reason = reason

    @classmethod
    def of(cls, listener: str, host: str, port: int, exc: OSError) -> ListenerError:
        """The error for ``exc``, raised binding ``listener``'s ``host``:``port``."""
        return cls(listener, host, port, _reason(exc))


def bind_socket(
    host: str, port: int, keepalive_s: int, *, reuse_port: bool = False
) -> socket.socket:
    """A listening socket whose accepted connections inherit TCP keepalive settings and
    ``TCP_NODELAY``; ``reuse_port``: shared with other processes that bind it so."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        # uvloop sets it on each connection; asyncio's own loop does only for sockets made
        # with proto=IPPROTO_TCP, which these are not: without it a chunk written while the
        # previous one is unacknowledged would wait for the peer's delayed ACK (up to 40 ms).
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if hasattr(socket, "TCP_KEEPIDLE"):  # Linux; accepted sockets inherit these options
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, keepalive_s)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, max(1, keepalive_s // 3))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)
        sock.bind((host, port))
        sock.listen(4096)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def bind_udp(host: str, port: int, *, reuse_port: bool = False) -> socket.socket:
    """A UDP socket bound to ``host``:``port`` (QUIC's), non-blocking; ``reuse_port``: shared
    with other processes that bind it so (the kernel keeps each client's datagrams on one)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_DGRAM)
    try:
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


@dataclass(frozen=True, slots=True)
class Listening:
    """Where a running gateway listens."""

    http: str
    """The base URL (``http://host:port``)."""
    airc: str | None
    """The AIRC/TCP listener (``tcp://host:port``), None when off."""
    grpc: str | None
    """The gRPC listener (``host:port``), None when off."""
    http3: str | None = None
    """The HTTP/3 listener (``udp://host:port``), None when off."""
    rsocket: str | None = None
    """The RSocket/TCP listener (``tcp://host:port``), None when off."""
    waku: str | None = None
    """The Waku node's WebSocket multiaddr (``/ip4/.../tcp/.../ws/p2p/...``), None when off."""


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


def rsocket_port(config: ServerConfig, http_port: int) -> int:
    """The RSocket/TCP port: as configured, else the HTTP port + 3 (a free one when the HTTP
    port was 0)."""
    if config.rsocket.port is not None:
        return config.rsocket.port
    return http_port + 3 if config.port else 0


async def serve(
    config: ServerConfig, *, on_ready: Callable[[Listening], None] | None = None
) -> None:
    """Run the gateway until cancelled or signalled; ``on_ready`` gets the addresses once
    every listener takes connections. Raises `StartupError` when it cannot start."""
    signals = _Signals()
    signals.install()
    try:
        await _serve(config, on_ready, signals)
    except asyncio.CancelledError:
        # A signal during start-up cancels it (nothing is serving yet to stop gracefully).
        task = asyncio.current_task()
        if not signals.caught or task is None or task.uncancel() > 0:
            raise
    finally:
        signals.restore()
    signals.raise_again()


async def _serve(
    config: ServerConfig, on_ready: Callable[[Listening], None] | None, signals: _Signals
) -> None:
    try:
        nats_servers(config)
    except ValueError as exc:
        raise StartupError(f"{exc} (--hub, or hub in the configuration file)") from exc
    try:
        tls = server_tls(config)
        reserve_fd_table(config.reserved_fds)
        Admission.for_loop().configure(config.admission)
        app = build_app(config)
    except (ValueError, OSError) as exc:
        raise StartupError(str(exc)) from exc
    pacer = GcPacer(config.gc, announce=app.gateway.hub.pausing, turns=_gc_turns(config))
    app.metrics.registry.register(pacer)
    app.metrics.registry.register(app.gateway.audit)
    app.metrics.registry.register(app.gateway.auth_guard)
    _register_backend_metrics(app)
    if tls is not None:
        tls.on_refused = _audit_refused_handshakes(app.gateway)
    accept_metrics = AcceptorMetrics()
    app.metrics.registry.register(accept_metrics)
    listeners = _Listeners(tls)
    server: HttpServer | None = None
    watchers = await _watchers(config, app.gateway, tls) + _share_metrics(config, app)
    try:
        sock = listeners.bind("HTTP", config.host, config.port, config)
        host, port = sock.getsockname()[:2]
        await listeners.start(app, config, port, accept_metrics)
        server = HttpServer(
            app, listeners.http_settings(config), tls=tls, handoff=_handoff(config, app, tls)
        )
        try:
            await server.start(sock)
        except LifespanFailed as exc:
            log.debug("the gateway failed to start", exc_info=exc.__cause__ or exc)
            raise StartupError(f"the gateway cannot start: {exc}") from exc
        await listeners.start_http3(app, config, server.lifespan.state)
        await listeners.start_bridges(app, config)
        assert server.acceptor is not None
        accept_metrics.watch("http", server.acceptor)
        stop = signals.serving(server)
        pacer.start()  # last: what start-up made is frozen once, not walked by every pass
        if on_ready is not None:
            scheme = "http" if tls is None else "https"
            on_ready(listeners.listening(f"{scheme}://{_bracketed(host)}:{port}", host))
        await stop.wait()
    finally:
        for task in watchers:
            task.cancel()
        if server is not None:
            await server.shutdown()
        await listeners.aclose()
        pacer.stop()


def server_tls(config: ServerConfig) -> ServerTls | None:
    """The listeners' TLS as configured (None: plain TCP); a `ValueError` naming the file or
    setting that is wrong."""
    c = config.tls
    if not c.enabled and (c.key_file or c.client_ca_file):
        raise ValueError("TLS settings without a certificate: set --tls-cert (and --tls-key)")
    if c.cert_file is None:
        return None
    if c.key_file is None:
        raise ValueError("--tls-cert needs --tls-key (the certificate's private key)")
    if c.trust_domains and c.client_ca_file is None and not config.trusted_proxies:
        raise ValueError(
            "--trust-domain needs --tls-client-ca (client certificates) or --trusted-proxy"
        )
    if not c.reload_s > 0:
        raise ValueError(f"[tls] reload_s must be above 0, not {c.reload_s}")
    for domain in c.trust_domains:
        SpiffeId.parse(f"spiffe://{domain}")  # BadSpiffeId (a ValueError) names it
    settings = TlsSettings(
        Path(c.cert_file),
        Path(c.key_file),
        Path(c.client_ca_file) if c.client_ca_file else None,
        tuple(c.trust_domains),
        c.reload_s,
    )
    return ServerTls(settings)


def _audit_refused_handshakes(gateway: Gateway) -> Callable[[str | None, str], None]:
    """What records a TLS handshake a listener refused, as the gate's refusals are (gRPC's
    handshakes happen inside grpcio's core, which tells no one)."""
    audit = gateway.audit

    def refused(peer: str | None, why: str) -> None:
        audit.record("deny", ErrorCode.UNAUTHENTICATED.value, reason=why, origin=peer)

    return refused


def _jwks_of(gateway: Gateway) -> Jwks | None:
    """The key set of the gateway's JWT verifier, if it has one."""
    from airlane.security.jwt import JwtPolicy

    policy = gateway.security.policy
    if isinstance(policy, RbacPolicy):
        policy = policy.inner  # the policy file says what; the JWTs it wraps still say who
    return policy.verifier.jwks if isinstance(policy, JwtPolicy) else None


async def _refresh(jwks: Jwks) -> None:
    """Refresh the JWKS every ``refresh_s``, and sooner (rate-limited) once a token named a
    key id it does not hold, for as long as the server runs."""
    last = asyncio.get_running_loop().time()
    while True:
        await asyncio.sleep(1.0)
        now = asyncio.get_running_loop().time()
        if jwks.due(time.monotonic()) or now - last >= jwks.settings.refresh_s:
            last = now
            await jwks.refresh()


async def _watchers(
    config: ServerConfig, gateway: Gateway, tls: ServerTls | None
) -> list[asyncio.Task[None]]:
    """The tasks that keep the security material current while the server runs (the caller
    cancels them): certificate files, the JWKS (fetched once now, before listening, when it
    is a URL), the policy file."""
    watchers = []
    if tls is not None:
        watchers.append(asyncio.create_task(_reload(tls), name="TLS reload"))
    keys = _jwks_of(gateway)
    if keys is not None:
        if keys.settings.jwks_url is not None:
            await keys.refresh()  # a failure is logged
        watchers.append(asyncio.create_task(_refresh(keys), name="JWKS"))
    rbac = gateway.security.policy
    if isinstance(rbac, RbacPolicy):
        every_s = config.policy.reload_s
        watchers.append(asyncio.create_task(_reload_policy(rbac, every_s), name="policy reload"))
    return watchers


def _handoff(config: ServerConfig, app: AirlaneApp, tls: ServerTls | None) -> Handoff | None:
    """In a worker of ``airlane serve --workers`` whose hub names its processes: where it
    passes a stream's readers to the worker producing it and takes the readers of its own
    (`airlane.runtime.handoff`). Not with TLS: a TLS session cannot change processes."""
    name = app.gateway.hub.process
    if config.worker is None or config.workers_dir is None or name is None or tls is not None:
        return None
    handoff = Handoff(Path(config.workers_dir), name)
    if not handoff.usable:
        log.warning(
            "readers stay on the worker they reach: %s is too long a path for a Unix socket",
            handoff.path,
        )
        return None
    app.metrics.registry.register(HandoffMetrics(handoff))
    handoff.board = _board(config, app, handoff)
    return handoff


def _gc_turns(config: ServerConfig) -> GcTurns | None:
    """In a worker of ``airlane serve --workers``: the turn its full garbage-collector passes
    take with its siblings' (`airlane.server.gcturns`)."""
    if config.worker is None or config.workers_dir is None:
        return None
    try:
        return GcTurns(turns_path(Path(config.workers_dir)))
    except OSError as exc:
        log.warning("garbage-collector passes may overlap the other workers': %s", exc)
        return None


def _board(config: ServerConfig, app: AirlaneApp, handoff: Handoff) -> LoadBoard | None:
    """Where a worker that hands connections to its siblings compares the streams it
    produces with theirs, so that a new stream starts on the least loaded
    (`airlane.runtime.loadboard`)."""
    index = config.worker_index
    if config.workers_dir is None or index is None:
        return None
    try:
        return LoadBoard(Path(config.workers_dir), index, handoff.name, app.gateway.load)
    except ValueError as exc:  # a worker index or process name the board has no room for
        log.warning("new streams start on the worker they reach: %s", exc)
        return None


def _share_metrics(config: ServerConfig, app: AirlaneApp) -> list[asyncio.Task[None]]:
    """In a worker of ``airlane serve --workers``: the task that leaves this worker's metrics
    for its siblings, whose ``/metrics`` then show them (and this one theirs)."""
    if config.worker is None or config.workers_dir is None:
        return []
    shared = WorkerMetrics(Path(config.workers_dir), config.worker)
    app.metrics.workers = shared
    return [asyncio.create_task(shared.run(app.metrics.render_own), name="worker metrics")]


async def _reload_policy(rbac: RbacPolicy, every_s: float) -> None:
    """Read the policy file again when it changed, every ``every_s`` (while the server runs)."""
    while True:
        await asyncio.sleep(every_s)
        rbac.reload()


async def _reload(tls: ServerTls) -> None:
    """Read changed certificate files every ``reload_s`` (for as long as the server runs)."""
    while True:
        await asyncio.sleep(tls.settings.reload_s)
        tls.reload()


class _Listeners:
    """Every socket `serve` binds, and the AIRC/TCP and gRPC listeners beside HTTP."""

    def __init__(self, tls: ServerTls | None) -> None:
        self.tls = tls
        self.sockets: list[socket.socket] = []
        self.airc: AircTcpServer | None = None
        self.rsocket: RSocketTcpServer | None = None
        self.grpc: GrpcServer | None = None
        self.udp: socket.socket | None = None
        """HTTP/3's socket, bound before the HTTP server starts (its port goes in Alt-Svc)."""
        self.http3: Http3Server | None = None
        self.bridges: list[MqttBridge] = []
        """The MQTT bridges (`airlane.transports.mqtt`)."""
        self.waku: WakuNode | None = None
        """The Waku service node (`airlane.transports.waku`), when on."""

    def bind(self, listener: str, host: str, port: int, config: ServerConfig) -> socket.socket:
        """A listening socket for ``listener`` (closed by `aclose`)."""
        try:
            sock = bind_socket(host, port, config.tcp_keepalive_s, reuse_port=config.reuse_port)
        except OSError as exc:
            raise ListenerError.of(listener, host, port, exc) from exc
        self.sockets.append(sock)
        return sock

    async def start(
        self, app: AirlaneApp, config: ServerConfig, http_port: int, metrics: AcceptorMetrics
    ) -> None:
        """Bind and start AIRC/TCP and gRPC as configured (their ports follow the HTTP one)."""
        airc_sock = None
        if config.airc.enabled:
            airc_sock = self.bind("AIRC", config.host, airc_port(config, http_port), config)
        if config.grpc.enabled:
            port = grpc_port(config, http_port)
            self.grpc = await _start_grpc(app, config, port, self.tls)
            app.on_shutdown.append(self.grpc.aclose)
        rsocket_sock = None
        if config.rsocket.enabled:
            port = rsocket_port(config, http_port)
            rsocket_sock = self.bind("RSocket", config.host, port, config)
        if config.http3.enabled:
            self.udp = self._bind_http3(config, http_port)
        if airc_sock is not None:
            rtc = PeerSignalling(app.context)
            self.airc = AircTcpServer(
                app.gateway,
                config.airc,
                tls=self.tls,
                rtc=rtc,
                lanes=config.lanes,
                lane_flows=app.context.lane_flows,
            )
            await self.airc.start(airc_sock)
            metrics.watch("airc", self.airc.acceptor)
            # GOAWAY to every AIRC session before the hub closes under their streams.
            app.on_shutdown.append(self.airc.aclose)
        if rsocket_sock is not None:
            self.rsocket = RSocketTcpServer(app.gateway, config.rsocket, tls=self.tls)
            await self.rsocket.start(rsocket_sock)
            metrics.watch("rsocket", self.rsocket.acceptor)
            app.on_shutdown.append(self.rsocket.aclose)

    def http_settings(self, config: ServerConfig) -> ServerSettings:
        """The HTTP server's settings: ``[http]``'s, and the ``Alt-Svc`` that names HTTP/3's
        port where it is on (clients that speak HTTP/3 then move over by themselves)."""
        settings = ServerSettings.from_http(config.http)
        if self.udp is None:
            return settings
        return replace(settings, alt_svc=f'h3=":{self.udp.getsockname()[1]}"; ma=86400')

    def _bind_http3(self, config: ServerConfig, http_port: int) -> socket.socket | None:
        """HTTP/3's UDP socket: on the configured port, else the HTTP port's number (another
        free one if that is taken on UDP while the HTTP port was picked by the system). None
        under mutual TLS, which aioquic cannot ask of a client: HTTP/3 would let clients in
        without the certificate every other listener requires."""
        if self.tls is not None and self.tls.mutual:
            log.warning("HTTP/3 is off: it cannot require client certificates (mutual TLS)")
            return None
        host, port = config.host, config.http3.port
        try:
            return bind_udp(host, http_port if port is None else port, reuse_port=config.reuse_port)
        except OSError as exc:
            if port is None and not config.port:
                return bind_udp(host, 0)
            shown = http_port if port is None else port
            raise ListenerError.of("HTTP/3", host, shown, exc) from exc

    async def start_http3(
        self, app: AirlaneApp, config: ServerConfig, app_state: dict[str, Any]
    ) -> None:
        """Serve HTTP/3 on the bound UDP socket (after the HTTP server started the app)."""
        if self.udp is None:
            return
        self.http3 = Http3Server(
            app,
            config.http3,
            tls=self.tls,
            app_state=app_state,
            max_body_bytes=config.http.max_body_bytes,
            lanes=config.lanes,
        )
        await self.http3.start(self.udp)
        self.udp = None  # the server owns it now
        # Its connections close before the gateway does, as the other listeners' do.
        app.on_shutdown.append(self.http3.aclose)

    async def start_bridges(self, app: AirlaneApp, config: ServerConfig) -> None:
        """Start the MQTT bridges and the Waku node, once the gateway has started (a resumed
        session hands over queued messages at once, and they need the event logs). Each
        bridge connects in the background: a broker that is down does not stop Airlane from
        serving."""
        for bridge_config in config.mqtt:
            bridge = MqttBridge(app.gateway, bridge_config)
            await bridge.start()
            self.bridges.append(bridge)
            # Before the gateway closes under it: the bridge's last stores finish first.
            app.on_shutdown.insert(0, bridge.aclose)
        await self.start_waku(app, config)

    async def start_waku(self, app: AirlaneApp, config: ServerConfig) -> None:
        """Start the Waku service node, once the gateway has started (its filter readers
        and stores go through it)."""
        if not config.waku.enabled:
            return
        agent = f"airlane/{__version__}"
        node = WakuNode(app.gateway, config.waku, host=config.host, agent=agent)
        try:
            await node.start()
        except OSError as exc:
            await node.aclose()
            raise ListenerError.of("Waku", node.host, config.waku.port, exc) from exc
        self.waku = node
        app.metrics.registry.register(WakuMetrics(node))
        app.on_shutdown.insert(0, node.aclose)

    def listening(self, url: str, host: str) -> Listening:
        """The addresses, for ``on_ready``."""
        grpc = None if self.grpc is None else f"{_bracketed(host)}:{self.grpc.port}"
        http3 = None if self.http3 is None else f"udp://{_bracketed(host)}:{self.http3.port}"
        airc = None if self.airc is None else self.airc.url
        rsocket = None if self.rsocket is None else self.rsocket.url
        waku = None if self.waku is None else str(self.waku.multiaddrs[0])
        return Listening(url, airc, grpc, http3, rsocket, waku)

    async def aclose(self) -> None:
        """Stop AIRC and gRPC (idempotent: the lifespan's shutdown may have) and close every
        socket."""
        if self.airc is not None:
            await self.airc.aclose()
        if self.rsocket is not None:
            await self.rsocket.aclose()
        for bridge in self.bridges:
            await bridge.aclose()
        if self.waku is not None:
            await self.waku.aclose()
        if self.grpc is not None:
            await self.grpc.aclose()
        if self.http3 is not None:
            await self.http3.aclose()
        if self.udp is not None:
            self.udp.close()
        for sock in self.sockets:
            sock.close()


async def _start_grpc(
    app: AirlaneApp, config: ServerConfig, port: int, tls: ServerTls | None
) -> GrpcServer:
    """The gRPC server, listening on ``port`` of the configured host."""
    host = config.host
    if port and not config.reuse_port:
        # gRPC's C core reports a port it cannot bind on stderr itself, a line of its own, and
        # binds with SO_REUSEPORT (it would share a port that another such process holds):
        # a plain bind first says whether the port is free, in the gateway's own words.
        # (Workers share it on purpose: there the probe would find their siblings.)
        try:
            bind_socket(host, port, config.tcp_keepalive_s).close()
        except OSError as exc:
            raise ListenerError.of("gRPC", host, port, exc) from exc
    server = GrpcServer(app.gateway, config.grpc, tls=tls, forwarded=app.forwarded)
    try:
        bound = await server.start(host, port)
    except RuntimeError as exc:  # grpcio raises when it cannot bind (older ones return 0)
        await server.aclose()
        raise ListenerError("gRPC", host, port, "the port cannot be bound") from exc
    if not bound:
        await server.aclose()
        raise ListenerError("gRPC", host, port, "the port cannot be bound")
    return server


def _reason(exc: OSError) -> str:
    """``address already in use``, ``permission denied``: the system's words, as a clause."""
    text = exc.strerror or str(exc) or type(exc).__name__
    return text[:1].lower() + text[1:]


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


class _Signals:
    """SIGINT and SIGTERM while `serve` runs: during start-up the first cancels it; once
    serving, the first stops the gateway gracefully and a second cuts the grace short.
    `raise_again` gives the first its default handling back and raises it."""

    def __init__(self) -> None:
        self.caught: list[int] = []
        self._installed: dict[int, object] = {}  # each signal's handler before ours
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[object] | None = None
        self._server: HttpServer | None = None
        self._stop = asyncio.Event()

    def install(self) -> None:
        """Handle the signals on the running loop (where it can: the main thread)."""
        loop = self._loop = asyncio.get_running_loop()
        self._task = asyncio.current_task()
        for sig in _SIGNALS:
            before = signal.getsignal(sig)
            try:
                loop.add_signal_handler(sig, self._caught, sig)
            except (NotImplementedError, RuntimeError, ValueError):
                continue  # not the main thread, or a loop without signal handling
            self._installed[sig] = before

    def serving(self, server: HttpServer) -> asyncio.Event:
        """``server`` has started: a signal now stops it through the returned event."""
        self._server = server
        if self.caught:
            self._stop.set()
        return self._stop

    def restore(self) -> None:
        """Remove the handlers: each signal is handled as it was before `install`."""
        if self._loop is not None:
            for sig, before in self._installed.items():
                self._loop.remove_signal_handler(sig)
                if before is not None:  # None: set outside Python, left as the loop left it
                    signal.signal(sig, before)  # type: ignore[arg-type]
        self._installed = {}

    def raise_again(self) -> None:
        """Raise the first signal caught again, now that it is handled as before (Python's
        default for SIGINT is ``KeyboardInterrupt``; for SIGTERM, the end of the process)."""
        if self.caught:
            signal.raise_signal(self.caught[0])

    def _caught(self, sig: int) -> None:
        self.caught.append(sig)
        if len(self.caught) > 1:
            if self._server is not None:
                self._server.force()
            return
        log.info("stopping (%s)", signal.Signals(sig).name)
        if self._server is not None:
            self._stop.set()
        elif self._task is not None:
            self._task.cancel()


def _register_backend_metrics(app: AirlaneApp) -> None:
    """A backend with counters of its own (a local model's) shows them on ``/metrics``."""
    if callable(getattr(app.gateway.backend, "collect", None)):
        app.metrics.registry.register(app.gateway.backend)  # type: ignore[arg-type]
