"""The composition root: configuration -> hub + backend + security -> gateway -> the HTTP app.

Nothing else in Airlane chooses implementations: the gateway, the hub and the transports are
handed what they use here.
"""

from __future__ import annotations

import ipaddress
from dataclasses import replace
from pathlib import Path

from airlane.backends.base import Backend
from airlane.backends.offload import OffloadBackend
from airlane.backends.offload_rule import OffloadRouter
from airlane.backends.openai import OpenAIUpstreamBackend
from airlane.backends.synthetic import SyntheticBackend
from airlane.gateway import ForwardedIdentity, Gateway, GatewayConfig
from airlane.gateway.authguard import AuthGuard
from airlane.gateway.eventsourcing import EventSourcing
from airlane.gateway.quotas import Quotas
from airlane.gateway.tickets import Tickets
from airlane.hub import Hub, MemoryHub
from airlane.runtime.lane_flows import LaneFlows, ShapingCounters
from airlane.security import AllowAll, ApiKeyPolicy, SecurityPolicy
from airlane.security.audit import AuditLog
from airlane.server.config import ServerConfig
from airlane.transports.airc import AIRC_SUBPROTOCOL, AircWebSocketHandler
from airlane.transports.grpc.web import GRPC_WEB_PREFIX, grpc_web_app
from airlane.transports.http import AirlaneApp
from airlane.transports.http.asgi import scope_peer
from airlane.transports.http.browser import LOOPBACK_HOSTS
from airlane.transports.http.webrtc.signalling import PeerSignalling
from airlane.transports.rsocket import RSOCKET_WS_PATH, RSocketWebSocketHandler

__all__ = ["build_app", "build_backend", "build_event_sourcing", "build_hub", "nats_servers"]


def build_backend(config: ServerConfig) -> Backend:
    """The synthetic backend, the upstream one when ``upstream`` is set, the offload router
    between two of them when ``[offload]`` names an edge and a cloud, or a local model when
    ``[local] model_dir`` (``--model-dir``) names one (loaded here: a directory that does not
    load is a `ValueError`, a start-up failure)."""
    local = config.local
    if local.model_dir is not None:
        from airlane.backends.local import LocalModelBackend, load_model  # torch: only here

        loaded = load_model(Path(local.model_dir), threads=local.threads)
        return LocalModelBackend(
            loaded,
            max_queued=local.max_queued,
            max_ahead=local.max_ahead,
            default_max_tokens=local.default_max_tokens,
        )
    offload = config.offload
    if offload.enabled:
        assert offload.edge_url is not None and offload.cloud_url is not None
        edge = _side(config, offload.edge_url, offload.edge_api_key, offload.edge_model)
        cloud = _side(config, offload.cloud_url, offload.cloud_api_key, offload.cloud_model)
        return OffloadBackend(edge, cloud, OffloadRouter(offload))
    if config.upstream:
        return OpenAIUpstreamBackend(config.upstream, config.upstream_api_key, model=config.model)
    return SyntheticBackend(config.synthetic)


def _side(config: ServerConfig, url: str, api_key: str | None, model: str | None) -> Backend:
    """One side of the offload router: ``synthetic``, or an OpenAI-compatible upstream."""
    if url == "synthetic":
        return SyntheticBackend(config.synthetic)
    return OpenAIUpstreamBackend(url, api_key, model=model)


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
    local = replace(config.streams, retention=config.retention)
    servers = nats_servers(config)
    if not servers:
        return MemoryHub(local)
    from airlane.hub.jetstream import jetstream_hub

    return jetstream_hub(replace(config.jetstream, servers=servers, local=local))


def build_event_sourcing(config: ServerConfig) -> EventSourcing:
    """Event logs and the registry: in JetStream beside the hub, or in memory."""
    return EventSourcing(
        config.eventsourcing,
        servers=nats_servers(config),
        prefix=config.jetstream.prefix,
        replicas=config.jetstream.replicas,
    )


def build_security(config: ServerConfig) -> SecurityPolicy:
    """The security gate: who asks from JWTs and/or API keys as configured (else everyone is
    anonymous), and what they may do from the policy file when one is set (`ValueError`
    naming what is wrong with it). A JWKS file is read now (`ValueError`/`OSError` naming it
    if it cannot be used); a JWKS URL is fetched by ``airlane serve`` before it listens."""
    identify = _authentication(config)
    if config.policy.file is None:
        return identify
    from airlane.security.rbac import RbacPolicy

    if not config.policy.reload_s > 0:
        raise ValueError(f"[policy] reload_s must be above 0, not {config.policy.reload_s}")
    return RbacPolicy(identify, Path(config.policy.file))


def _authentication(config: ServerConfig) -> SecurityPolicy:
    """API keys and/or JWTs as configured, else `AllowAll`."""
    keys = ApiKeyPolicy(config.api_keys) if config.api_keys else None
    c = config.jwt
    if not c.enabled:
        return keys or AllowAll()
    from airlane.security.jwt import JwtPolicy, JwtSettings, JwtVerifier

    if c.jwks_url is not None and not c.jwks_url.startswith(("https://", "http://")):
        raise ValueError(f"[jwt] jwks_url {c.jwks_url!r} is not an http(s) URL")
    verifier = JwtVerifier(
        JwtSettings(
            jwks_file=Path(c.jwks_file) if c.jwks_file else None,
            jwks_url=c.jwks_url,
            audience=c.audience,
            issuer=c.issuer,
            algorithms=tuple(c.algorithms),
            leeway_s=c.leeway_s,
            name_claim=c.name_claim,
            tenant_claim=c.tenant_claim,
            roles_claim=c.roles_claim,
            refresh_s=c.refresh_s,
        )
    )
    if c.jwks_file is not None:
        verifier.jwks.load_file()
    return JwtPolicy(verifier, keys)


def _loopback(host: str) -> bool:
    """Whether ``host`` (what the server binds) is a loopback address or name."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def build_app(config: ServerConfig) -> AirlaneApp:
    """Gateway and HTTP app for ``config`` (the gateway starts on ASGI lifespan startup)."""
    security = build_security(config)
    audit = AuditLog(config.audit)  # opens the file now: an unwritable path stops the start
    gateway = Gateway(
        build_hub(config),
        build_backend(config),
        security=security,
        audit=audit,
        quotas=Quotas(config.quotas),
        auth_guard=AuthGuard(config.auth_guard),
        tickets=Tickets(config.tickets),
        config=GatewayConfig(orphan=config.orphan, retention=config.retention),
        events=build_event_sourcing(config),
        rules=config.rules,
    )
    if config.artifacts.dir is not None:
        from airlane.artifacts.service import ArtifactService  # numpy and hashes: only here

        service = ArtifactService(
            Path(config.artifacts.dir),
            gateway.hub,
            scan_interval_s=config.artifacts.scan_interval_s,
        )
        gateway.artifacts.serve(service)
    http = config.http
    if config.model and config.model not in http.models:
        http = replace(http, models=(config.model, *http.models))
    if http.allowed_hosts is None:  # by default: the loopback names, on loopback only
        http = replace(http, allowed_hosts=LOOPBACK_HOSTS if _loopback(config.host) else ("*",))
    airc = AircWebSocketHandler(gateway, config.airc)
    # gRPC-Web and Connect for browsers, on the HTTP port (native gRPC has its own listener).
    rpc = grpc_web_app(gateway, config.grpc, peer=scope_peer)
    forwarded = None
    if config.trusted_proxies:
        forwarded = ForwardedIdentity(config.trusted_proxies, config.tls.trust_domains)
    rsocket = RSocketWebSocketHandler(gateway, config.rsocket)
    app = AirlaneApp(
        gateway,
        http,
        subprotocols={AIRC_SUBPROTOCOL: airc},
        websockets={RSOCKET_WS_PATH: rsocket},
        mounts={GRPC_WEB_PREFIX: rpc},
        forwarded=forwarded,
        webrtc=config.webrtc,
        lanes=config.lanes,
        # The shaping classifier's maps, opened when first used (docs/lanes.md).
        lane_flows=LaneFlows(config.lanes.bpf_dir) if config.lanes.classifier else None,
        shaping=ShapingCounters(config.lanes.bpf_dir),
    )
    # AIRC over WebSocket carries WebRTC signalling too (RTC_OFFER...), to the app's peers.
    airc.rtc = PeerSignalling(app.context)
    # Resumable RSocket sessions waiting for a RESUME end before the gateway does.
    app.on_shutdown.append(rsocket.aclose)
    return app
