"""Configuration of the RSocket transport (``[rsocket]``: its TCP listener and its sessions)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RSocketServerConfig"]


@dataclass(frozen=True, slots=True)
class RSocketServerConfig:
    """Limits of RSocket sessions, and where the TCP listener binds."""

    enabled: bool = True
    """Run the RSocket/TCP listener (RSocket over WebSocket on ``/v1/rsocket`` is always on)."""
    port: int | None = None
    """TCP port; None: the HTTP port + 3 (a free port when the HTTP port is 0)."""
    setup_timeout_s: float = 10.0
    """A connection that sends no SETUP within this is closed."""
    max_streams: int = 1024
    """Requests one connection may have open at once (more get ERROR REJECTED)."""
    max_channel_streams: int = 256
    """Airlane streams one agent session (request-channel) may follow at once."""
    max_frame: int = 1 << 20
    """The largest frame accepted or sent; longer payloads go out in fragments."""
    max_message: int = 4 << 20
    """The largest request (its fragments joined)."""
    batch_limit: int = 64
    """Events taken from a cursor at a time (never more than the client's credit)."""
    lease_ttl_ms: int = 30_000
    """For clients that ask for leases: how long each lease lasts (renewed at half of it)."""
    lease_requests: int = 10_000
    """For clients that ask for leases: requests each lease allows."""
    resume_keep_s: float = 60.0
    """How long a resumable session whose connection dropped waits for its RESUME."""
    resume_buffer_bytes: int = 4 << 20
    """Frames a resumable session keeps until the client acknowledges them (KEEPALIVE); past
    it the session can no longer resume (the client falls back to subscribing again)."""
    max_detached: int = 1000
    """Resumable sessions kept at once, per node, waiting for their RESUME."""
