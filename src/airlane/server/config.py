"""`ServerConfig`: everything ``airlane serve`` can be told, from its flags and a TOML file
(`load_config`)."""

from __future__ import annotations

import tomllib
import types
import typing
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from airlane.artifacts.config import ArtifactsConfig
from airlane.backends.local.config import LocalConfig
from airlane.backends.offload_rule import OffloadConfig
from airlane.backends.synthetic import SyntheticConfig
from airlane.core import OrphanMode, OrphanPolicy, Retention
from airlane.gateway.authguard import AuthGuardConfig
from airlane.gateway.eventsourcing import EventSourcingConfig
from airlane.gateway.quotas import QuotaConfig
from airlane.gateway.rules import RulesConfig
from airlane.gateway.tickets import TicketConfig
from airlane.hub import MemoryHubConfig
from airlane.hub.jetstream import JetStreamHubConfig
from airlane.runtime.admission import AdmissionConfig
from airlane.runtime.socket_lanes import LanesConfig
from airlane.security.audit import AuditConfig
from airlane.server.address import DEFAULT_HOST, DEFAULT_PORT
from airlane.server.fdtable import DEFAULT_RESERVED_FDS
from airlane.server.gcpacer import GcConfig
from airlane.transports.airc import AircServerConfig
from airlane.transports.grpc import GrpcServerConfig
from airlane.transports.http import HttpConfig
from airlane.transports.http.h3 import Http3Config
from airlane.transports.http.webrtc import WebRtcConfig
from airlane.transports.mqtt import DataClass, InboundRoute, MqttBridgeConfig, OutboundRoute
from airlane.transports.rsocket import RSocketServerConfig
from airlane.transports.waku.config import LogRoute as WakuLogRoute
from airlane.transports.waku.config import WakuConfig
from airlane.wire.airc import AircConfig

__all__ = [
    "DEFAULT_TCP_KEEPALIVE_S",
    "ConfigError",
    "JwtConfig",
    "ServerConfig",
    "TlsConfig",
    "load_config",
]

DEFAULT_TCP_KEEPALIVE_S = 45
"""The seed's TCP keepalive on accepted sockets."""


@dataclass(frozen=True, slots=True)
class TlsConfig:
    """``[tls]``: TLS on every listener (HTTP and WebSocket, gRPC, AIRC/TCP) once ``cert_file``
    is set; mutual TLS once ``client_ca_file`` is set too (docs/security.md)."""

    cert_file: str | None = None
    """The listeners' certificate chain (PEM)."""
    key_file: str | None = None
    """Its private key (PEM)."""
    client_ca_file: str | None = None
    """CA bundle client certificates must chain to; set, every client must show one."""
    trust_domains: tuple[str, ...] = ()
    """SPIFFE trust domains a client certificate's ID may come from (empty: any)."""
    reload_s: float = 10.0
    """How often the files are checked for changes (a changed file applies to connections
    made after it is read, without a restart)."""

    @property
    def enabled(self) -> bool:
        """Whether the listeners speak TLS."""
        return self.cert_file is not None


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    """``[policy]``: role-based access control from a policy file (docs/security.md); set,
    what no rule allows is denied."""

    file: str | None = None
    """The policy file (TOML); unset: every authenticated principal may act in its tenant."""
    reload_s: float = 2.0
    """How often the file is checked for changes (a new version applies to the requests after
    it is read; one that does not load is logged and the previous stays)."""


@dataclass(frozen=True, slots=True)
class JwtConfig:
    """``[jwt]``: bearer JWTs verified against a JWKS (a file or a URL), beside any API keys
    (docs/security.md)."""

    jwks_file: str | None = None
    jwks_url: str | None = None
    audience: str | None = None
    """The ``aud`` tokens must carry (unset: not checked)."""
    issuer: str | None = None
    """The ``iss`` tokens must carry (unset: not checked)."""
    algorithms: tuple[str, ...] = ("RS256", "ES256", "EdDSA")
    leeway_s: float = 30.0
    """Clock skew allowed on ``exp``, ``nbf``, ``iat``."""
    name_claim: str = "sub"
    tenant_claim: str = "tenant"
    roles_claim: str = "roles"
    refresh_s: float = 300.0
    """How often the JWKS is fetched again (or its file checked)."""

    @property
    def enabled(self) -> bool:
        """Whether bearer JWTs are accepted."""
        return self.jwks_file is not None or self.jwks_url is not None


DEFAULT_RULES_DIR = ".airlane/rules"
"""Where ``airlane serve`` keeps its rules unless ``[rules] dir`` says otherwise."""


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
    local: LocalConfig = field(default_factory=LocalConfig)
    """A model from a local directory as the backend (``[local]``, ``--model-dir``,
    docs/backends.md); ``model_dir`` set, it replaces the synthetic backend and ``upstream``."""
    offload: OffloadConfig = field(default_factory=OffloadConfig)
    """Generations routed between an edge and a cloud backend (``[offload]``, docs/edge.md);
    set, it replaces ``upstream``."""
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
    http3: Http3Config = field(default_factory=Http3Config)
    """HTTP/3 over QUIC on UDP beside the HTTP port (``[http3]``)."""
    rsocket: RSocketServerConfig = field(default_factory=RSocketServerConfig)
    """The RSocket transport: its TCP listener and session limits (``[rsocket]``)."""
    webrtc: WebRtcConfig = field(default_factory=WebRtcConfig)
    """WebRTC data channels: ICE servers, TURN secret, bounds (``[webrtc]``, docs/webrtc.md)."""
    lanes: LanesConfig = field(default_factory=LanesConfig)
    """How connections that declare a lane are marked on the wire (``[lanes]``,
    docs/lanes.md)."""
    rules: RulesConfig = field(default_factory=lambda: RulesConfig(dir=DEFAULT_RULES_DIR))
    """Streaming SQL rules: where they are kept, their bounds (``[rules]``, docs/edge.md)."""
    mqtt: tuple[MqttBridgeConfig, ...] = ()
    """MQTT brokers to bridge to (``[[mqtt]]``, or ``--mqtt URL``; docs/edge.md)."""
    waku: WakuConfig = field(default_factory=WakuConfig)
    """The Waku service node for js-waku and other Waku nodes (``[waku]``, ``--waku``;
    docs/waku.md)."""
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
    """How the garbage collector is scheduled (``[gc]``, `airlane.server.gcpacer`)."""
    admission: AdmissionConfig = field(default_factory=AdmissionConfig)
    """How long and how many new streams may wait to be set up (``[admission]``,
    `airlane.runtime.admission`)."""
    tls: TlsConfig = field(default_factory=TlsConfig)
    """TLS and client certificates on every listener (``[tls]``)."""
    quotas: QuotaConfig = field(default_factory=QuotaConfig)
    """Per principal and tenant limits (``[quotas]``)."""
    auth_guard: AuthGuardConfig = field(default_factory=AuthGuardConfig)
    """Failed authentications allowed per client address (``[auth_guard]``)."""
    streams: MemoryHubConfig = field(default_factory=MemoryHubConfig)
    """How many streams and readers the hub holds and how long idle and ended streams stay
    (``[streams]``; in a cluster, each node's replicas). Its retention is ``[retention]``."""
    tickets: TicketConfig = field(default_factory=TicketConfig)
    """Short-lived credentials for URLs, signed with a secret the nodes share (``[tickets]``)."""
    audit: AuditConfig = field(default_factory=AuditConfig)
    """The audit log (``[audit]``)."""
    jwt: JwtConfig = field(default_factory=JwtConfig)
    """Bearer JWTs (``[jwt]``)."""
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    """Role-based access control from a policy file (``[policy]``)."""
    trusted_proxies: tuple[str, ...] = ()
    """Addresses or networks (``10.0.0.0/8``) of proxies whose ``x-forwarded-client-cert``
    names the client (a mesh in front); from anyone else the header is ignored."""
    reserved_fds: int = DEFAULT_RESERVED_FDS
    """Descriptor slots made at start (at most the soft ``RLIMIT_NOFILE``), so that taking
    connections never waits for the kernel to grow the table (`airlane.server.fdtable`); 0: none."""
    reuse_port: bool = False
    """Bind every listener with ``SO_REUSEPORT``, so that several processes share its port
    and the kernel spreads connections over them (what ``airlane serve --workers`` sets)."""
    worker: str | None = None
    """This process's name among the workers of ``airlane serve --workers`` (None: it is
    not one); its node id on the hub, and its ``worker`` label on the shared ``/metrics``."""
    workers_dir: str | None = None
    """Where the workers of one ``airlane serve --workers`` leave their metrics for each
    other (a directory of the supervisor's); None outside workers."""
    worker_stall_s: float = 30.0
    """``airlane serve --workers``: a worker whose event loop has not run for this long (its
    metrics file, renewed every second, was not) is killed and started again, as one that
    died (stopped or stuck, it would keep the connections the kernel gives it waiting); far
    above the longest garbage-collector pass. 0: never."""

    def __post_init__(self) -> None:
        if self.worker_stall_s < 0:
            raise ValueError("worker_stall_s must be 0 (never) or more")

    @property
    def worker_index(self) -> int | None:
        """This worker's place among the workers (its name is ``w<index>``); None outside
        workers."""
        name = self.worker
        if name is None or not name.startswith("w") or not name[1:].isdigit():
            return None
        return int(name[1:])


class ConfigError(ValueError):
    """A configuration file that cannot be read, is not TOML, or holds a setting that does not
    exist or a value of the wrong type; the text names the file and the setting."""


def load_config(path: Path, base: ServerConfig | None = None) -> ServerConfig:
    """Read a TOML file: top-level keys of `ServerConfig`, plus ``[synthetic]``, ``[http]``,
    ``[orphan]``, ``[retention]``, ``[airc]``, ``[grpc]``, ``[http3]``, ``[rsocket]``,
    ``[jetstream]``,
    ``[eventsourcing]``,
    ``[artifacts]``, ``[gc]``, ``[admission]``, ``[tls]``, ``[jwt]``, ``[policy]``, ``[audit]``,
    ``[auth_guard]``, ``[quotas]``, ``[tickets]``, ``[streams]``, ``[rules]``, ``[webrtc]``,
    ``[lanes]``, ``[waku]`` and
    ``[api_keys]`` tables, and ``[[mqtt]]`` bridges (added to those already configured). An
    unreadable file, one that is not TOML, an unknown key and a value of the wrong type are a
    `ConfigError` (a `ValueError`); so is a value the setting itself refuses."""
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        reason = (exc.strerror or str(exc)).lower()
        raise ConfigError(f"cannot read the configuration file {path}: {reason}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}") from exc
    try:
        return _settings(path, data, base or ServerConfig())
    except ConfigError:
        raise
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"{path}: {exc}") from exc


def _settings(path: Path, data: dict[str, Any], config: ServerConfig) -> ServerConfig:
    """``config`` with ``data`` (a parsed file) applied."""
    nested: dict[str, Any] = {
        "synthetic": (SyntheticConfig, config.synthetic),
        "local": (LocalConfig, config.local),
        "offload": (OffloadConfig, config.offload),
        "rules": (RulesConfig, config.rules),
        "webrtc": (WebRtcConfig, config.webrtc),
        "lanes": (LanesConfig, config.lanes),
        "http": (HttpConfig, config.http),
        "orphan": (OrphanPolicy, config.orphan),
        "retention": (Retention, config.retention),
        "airc": (AircServerConfig, config.airc),
        "grpc": (GrpcServerConfig, config.grpc),
        "http3": (Http3Config, config.http3),
        "rsocket": (RSocketServerConfig, config.rsocket),
        "jetstream": (JetStreamHubConfig, config.jetstream),
        "eventsourcing": (EventSourcingConfig, config.eventsourcing),
        "artifacts": (ArtifactsConfig, config.artifacts),
        "gc": (GcConfig, config.gc),
        "admission": (AdmissionConfig, config.admission),
        "tls": (TlsConfig, config.tls),
        "jwt": (JwtConfig, config.jwt),
        "policy": (PolicyConfig, config.policy),
        "audit": (AuditConfig, config.audit),
        "quotas": (QuotaConfig, config.quotas),
        "auth_guard": (AuthGuardConfig, config.auth_guard),
        "tickets": (TicketConfig, config.tickets),
        "streams": (MemoryHubConfig, config.streams),
        "waku": (WakuConfig, config.waku),
    }
    changes: dict[str, Any] = {}
    allowed = {f.name for f in fields(ServerConfig)}
    _check_types(path, ServerConfig, "", {k: v for k, v in data.items() if k not in nested})
    for key, value in data.items():
        if key not in allowed:
            raise ConfigError(f"{path}: unknown setting {key!r}")
        if key == "mqtt":
            changes[key] = config.mqtt + _bridges(path, value)
            continue
        if key not in nested:
            changes[key] = tuple(value) if key == "trusted_proxies" else value
            continue
        cls, current = nested[key]
        if not isinstance(value, dict):
            raise ConfigError(f"{path}: {key} must be a table ([{key}]), not {value!r}")
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
        if key == "streams" and "retention" in section:
            raise ConfigError(f"{path}: a stream's retention is [retention], not [streams]")
        for name in ("models", "cors_origins", "allowed_hosts"):
            if key == "http" and name in section:
                section[name] = tuple(section[name])
        for name in ("stun", "turn"):
            if key == "webrtc" and isinstance(section.get(name), list):
                section[name] = tuple(section[name])
        for name in ("shards", "rln_shards", "peers"):
            if key == "waku" and isinstance(section.get(name), list):
                section[name] = tuple(section[name])
        if key == "waku" and "logs" in section:
            section["logs"] = _waku_logs(path, section["logs"])
        if key == "tls" and isinstance(section.get("trust_domains"), list):
            section["trust_domains"] = tuple(section["trust_domains"])
        if key == "jwt" and isinstance(section.get("algorithms"), list):
            section["algorithms"] = tuple(section["algorithms"])
        unknown = set(section) - {f.name for f in fields(cls)}
        if unknown:
            raise ConfigError(f"{path}: unknown [{key}] settings {sorted(unknown)}")
        _check_types(path, cls, f"[{key}] ", section)
        changes[key] = replace(current, **section)
    return replace(config, **changes)


def _waku_logs(path: Path, value: object) -> tuple[WakuLogRoute, ...]:
    """``[[waku.logs]]`` tables: content topics kept in event logs."""
    if not isinstance(value, list) or not all(isinstance(route, dict) for route in value):
        raise ConfigError(f"{path}: waku.logs is an array of tables ([[waku.logs]])")
    names = {f.name for f in fields(WakuLogRoute)}
    routes = []
    for route in value:
        if set(route) != names:
            raise ConfigError(f"{path}: each [[waku.logs]] has content_topic and log, nothing else")
        _check_types(path, WakuLogRoute, "[[waku.logs]] ", route)
        routes.append(WakuLogRoute(**route))
    return tuple(routes)


def _bridges(path: Path, value: object) -> tuple[MqttBridgeConfig, ...]:
    """``[[mqtt]]`` tables: each a bridge, with its ``[[mqtt.inbound]]`` and
    ``[[mqtt.outbound]]`` routes."""
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise ConfigError(f"{path}: mqtt is an array of tables ([[mqtt]])")
    bridges = []
    allowed = {f.name for f in fields(MqttBridgeConfig) if f.init}
    for index, table in enumerate(value):
        section = dict(table)
        unknown = set(section) - allowed
        if unknown:
            raise ConfigError(f"{path}: unknown [[mqtt]] settings {sorted(unknown)}")
        if "url" not in section:
            raise ConfigError(f"{path}: [[mqtt]] number {index + 1} has no url")
        for key, cls in (
            ("inbound", InboundRoute),
            ("outbound", OutboundRoute),
            ("classes", DataClass),
        ):
            if key not in section:
                continue
            routes = section[key]
            if not isinstance(routes, list) or not all(isinstance(r, dict) for r in routes):
                raise ConfigError(f"{path}: mqtt.{key} is an array of tables ([[mqtt.{key}]])")
            names = {f.name for f in fields(cls)}
            for route in routes:
                if set(route) - names:
                    raise ConfigError(
                        f"{path}: unknown [[mqtt.{key}]] settings {sorted(set(route) - names)}"
                    )
                _check_types(path, cls, f"[[mqtt.{key}]] ", route)
            section[key] = tuple(cls(**route) for route in routes)
        if "classes" in section:
            # Named like a default: replaces it; a new name: added to them.
            given = {c.name: c for c in section["classes"]}
            defaults = MqttBridgeConfig("mqtt://default").classes
            kept = tuple(c for c in defaults if c.name not in given)
            section["classes"] = kept + tuple(given.values())
        _check_types(path, MqttBridgeConfig, "[[mqtt]] ", section)
        section.setdefault("name", f"mqtt{index + 1}" if len(value) > 1 else "mqtt")
        bridges.append(MqttBridgeConfig(**section))
    return tuple(bridges)


_KINDS: dict[object, str] = {
    bool: "true or false",
    int: "an integer",
    float: "a number",
    str: "a string",
}


def _check_types(path: Path, cls: type, where: str, values: dict[str, Any]) -> None:
    """A `ConfigError` for the first of ``values`` whose type its field of ``cls`` does not
    take (only plain types are checked: numbers, strings, booleans, arrays, tables)."""
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # a hint that cannot be resolved here: nothing is checked
        return
    for name, value in values.items():
        hint = hints.get(name)
        if hint is not None and _takes(hint, value) is False:
            raise ConfigError(f"{path}: {where}{name} must be {_kind(hint)}, not {value!r}")


def _takes(hint: Any, value: Any) -> bool | None:
    """Whether a field typed ``hint`` takes ``value`` from TOML; None when not checked."""
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        answers = [_takes(arg, value) for arg in typing.get_args(hint)]
        return True if True in answers else (None if None in answers else False)
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if origin in (tuple, list, frozenset, set):
        return isinstance(value, list | tuple)
    if origin is dict:
        return isinstance(value, dict)
    return None


def _kind(hint: Any) -> str:
    args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
    if args and typing.get_origin(hint) in (typing.Union, types.UnionType):
        hint = args[0]
    origin = typing.get_origin(hint)
    if origin in (tuple, list, frozenset, set):
        return "an array"
    if origin is dict:
        return "a table"
    return _KINDS.get(hint, "of another type")
