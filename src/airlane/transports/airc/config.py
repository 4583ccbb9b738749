"""Configuration of the AIRC transport (its TCP listener and its sessions)."""

from __future__ import annotations

from dataclasses import dataclass, field

from airlane.wire.airc import AIRC_SUBPROTOCOL, AircConfig

__all__ = ["AIRC_SUBPROTOCOL", "AircServerConfig"]


@dataclass(frozen=True, slots=True)
class AircServerConfig:
    """Limits of AIRC sessions, and where the TCP listener binds."""

    enabled: bool = True
    """Run the AIRC/TCP listener (AIRC over WebSocket is always on with ``/v1/ws``)."""
    port: int | None = None
    """TCP port; None: the HTTP port + 1 (or a free port when the HTTP port is 0)."""
    max_subscriptions: int = 1024
    """Airlane streams one AIRC connection may carry at once."""
    max_requests: int = 64
    """Signalling requests one connection may have in progress at once."""
    batch_limit: int = 64
    """Events taken from a cursor at a time (never more than the send window has room for)."""
    jitter_buffer_us: int = 60_000
    """The jitter-buffer threshold announced in ``GEN_ACK``."""
    connection: AircConfig = field(default_factory=AircConfig)
    """The protocol's own windows and timers."""
