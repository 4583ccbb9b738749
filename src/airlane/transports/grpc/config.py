"""Configuration of the gRPC transport."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GrpcServerConfig"]


@dataclass(frozen=True, slots=True)
class GrpcServerConfig:
    """Where the gRPC listener binds, and its limits."""

    enabled: bool = True
    """Run the gRPC listener."""
    port: int | None = None
    """TCP port; None: the HTTP port + 2 (or a free port when the HTTP port is 0)."""
    max_message_bytes: int = 4 << 20
    """Largest message received or sent; a larger one fails with RESOURCE_EXHAUSTED."""
    max_concurrent_streams: int = 1024
    """HTTP/2 streams (calls) one connection may have open."""
    keepalive_min_ping_s: float = 5.0
    """Clients may ping this often (the grpcio default of 300 s answers a client pinging
    every 10 s with GOAWAY ``too_many_pings``)."""
    keepalive_s: float = 30.0
    """The server pings an idle connection this often ..."""
    keepalive_timeout_s: float = 20.0
    """... and closes it if the ping is not answered in this time."""
    batch_limit: int = 64
    """Events taken from a cursor at a time."""
    default_credit: int = 64
    """Session: events a subscription may receive before the client grants more."""
    max_session_streams: int = 1024
    """Session: streams one call may carry at once."""
    session_outbox: int = 256
    """Session: responses queued for the call before its pumps wait."""
