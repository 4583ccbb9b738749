"""`GrpcServer`: the ``airlane.v1.Airlane`` and ``airlane.v1.EventLogs`` services on grpcio's
asyncio server, with standard health checking (``grpc.health.v1``), server reflection,
keepalive settings that accept clients pinging every 10 s, and message size limits."""

from __future__ import annotations

import logging

from grpc import aio
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from airlane.gateway import ForwardedIdentity, Gateway, ServerTls
from airlane.transports.grpc.config import GrpcServerConfig
from airlane.transports.grpc.context import MetadataInterceptor
from airlane.transports.grpc.eventlog import EventLogService
from airlane.transports.grpc.handlers import add_service
from airlane.transports.grpc.service import AirlaneService
from airlane.transports.grpc.tls import server_credentials
from airlane.v1 import eventlog_pb2, eventlog_pb2_grpc, service_pb2

__all__ = ["EVENT_LOGS_NAME", "SERVICE_NAME", "GrpcServer"]

log = logging.getLogger("airlane.grpc")

SERVICE_NAME = service_pb2.DESCRIPTOR.services_by_name["Airlane"].full_name
"""``airlane.v1.Airlane``."""
EVENT_LOGS_NAME = eventlog_pb2.DESCRIPTOR.services_by_name["EventLogs"].full_name
"""``airlane.v1.EventLogs``."""


def server_options(config: GrpcServerConfig) -> list[tuple[str, int]]:
    """grpcio channel arguments for ``config``."""
    ping_ms = int(config.keepalive_min_ping_s * 1000)
    return [
        ("grpc.max_receive_message_length", config.max_message_bytes),
        ("grpc.max_send_message_length", config.max_message_bytes),
        ("grpc.max_concurrent_streams", config.max_concurrent_streams),
        ("grpc.keepalive_time_ms", int(config.keepalive_s * 1000)),
        ("grpc.keepalive_timeout_ms", int(config.keepalive_timeout_s * 1000)),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_ping_interval_without_data_ms", ping_ms),
        ("grpc.http2.min_recv_ping_interval_without_data_ms", ping_ms),
        ("grpc.http2.max_ping_strikes", 2),
    ]


class GrpcServer:
    """The gRPC listener; `start` binds it, `aclose` stops it (in-flight calls get a grace
    period, then are cancelled)."""

    def __init__(
        self,
        gateway: Gateway,
        config: GrpcServerConfig | None = None,
        *,
        tls: ServerTls | None = None,
        forwarded: ForwardedIdentity | None = None,
    ) -> None:
        self.gateway = gateway
        self.config = config or GrpcServerConfig()
        self.tls = tls
        self.forwarded = forwarded
        """Caller identities forwarded by trusted proxies (``x-forwarded-client-cert``)."""
        """TLS for the listener (client certificates when it asks for them); None: plain."""
        self.port: int | None = None
        """The bound port, once started."""
        self.health = health.aio.HealthServicer()
        """Standard health checking: SERVING for ``""`` and ``airlane.v1.Airlane``."""
        self._server: aio.Server | None = None
        self._event_logs = EventLogService(gateway, tls, forwarded)

    async def start(self, host: str, port: int) -> int:
        """Listen on ``host:port`` (0: a free port); return the port."""
        server = aio.server(
            interceptors=[MetadataInterceptor()], options=server_options(self.config)
        )
        add_service(AirlaneService(self.gateway, self.config, self.tls, self.forwarded), server)
        eventlog_pb2_grpc.add_EventLogsServicer_to_server(  # type: ignore[no-untyped-call]
            self._event_logs, server
        )
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        names = (SERVICE_NAME, EVENT_LOGS_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME)
        reflection.enable_server_reflection(names, server)
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        if self.tls is None:
            self.port = server.add_insecure_port(address)
        else:
            self.port = server.add_secure_port(address, server_credentials(self.tls))
        await server.start()
        for name in ("", SERVICE_NAME, EVENT_LOGS_NAME):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        self._server = server
        return self.port

    async def aclose(self, grace_s: float = 2.0) -> None:
        """Say NOT_SERVING, then stop."""
        if self._server is None:
            return
        await self.health.enter_graceful_shutdown()
        await self._server.stop(grace_s)
        self._server = None
