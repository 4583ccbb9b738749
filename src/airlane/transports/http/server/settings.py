"""`ServerSettings`: the limits and timers of Airlane's HTTP/1.1 and WebSocket server.

Every buffer the server keeps for a connection is bounded by one of these (or by one read of
the socket on top of one of these), and every timer a connection arms is one of these.
"""

from __future__ import annotations

from dataclasses import dataclass

from airlane.transports.http.config import HttpConfig

__all__ = ["ServerSettings"]


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """What `airlane.transports.http.server.HttpServer` is told (`from_http` fills the
    WebSocket part from the app's `HttpConfig`)."""

    max_target_bytes: int = 8192
    """Longest request target (path and query) accepted; longer: 414."""
    max_header_bytes: int = 65536
    """Most bytes of header names and values in one request; more: 431."""
    max_headers: int = 128
    """Most header fields in one request; more: 431."""
    body_high_water: int = 65536
    """Request body bytes buffered for an application that has not read them before the
    connection stops reading (it reads again once the application does)."""
    max_pipelined: int = 16
    """Requests read ahead of the one being answered (HTTP pipelining); past this, the
    connection answers those and closes."""
    keep_alive_s: float = 5.0
    """An idle connection (no request in flight, none being read) is closed after this; a
    request's head must be complete within it too."""
    body_timeout_s: float = 30.0
    """A request body of which nothing arrives for this long closes the connection."""
    disconnect_grace_s: float = 2.0
    """A request's or WebSocket's task, told that its client has gone, is cancelled if it is
    still running this long after."""
    graceful_s: float = 5.0
    """On shutdown, how long requests and WebSockets in flight may take to finish before
    they are cancelled."""
    ws_ping_s: float | None = 30.0
    """Period of the WebSocket Ping frames the server sends, and how long a Pong may take
    (a connection that does not answer is closed with 1011); None: no pings."""
    ws_max_message_bytes: int | None = 1 << 20
    """Largest WebSocket message accepted (larger: close 1009); None: no limit."""
    ws_compression: bool = True
    """Accept permessage-deflate when the client offers it."""
    ws_close_timeout_s: float = 10.0
    """How long the server waits for the peer's Close frame after sending its own before it
    drops the connection."""
    ws_max_queued: int = 16
    """WebSocket messages received but not yet read by the application before the
    connection stops reading."""
    root_path: str = ""
    """The ASGI ``root_path`` (the prefix the application is mounted under)."""
    alt_svc: str | None = None
    """An ``Alt-Svc`` value every response carries (``h3=":8420"; ma=86400`` where HTTP/3
    serves the same application); None: none."""

    @classmethod
    def from_http(cls, http: HttpConfig, **changes: object) -> ServerSettings:
        """Settings whose limits are ``http``'s (header bounds, keep-alive and body timeouts,
        WebSocket ping period, message size and compression), with ``changes`` applied."""
        values: dict[str, object] = {
            "ws_ping_s": http.ws_ping_s if http.ws_ping_s > 0 else None,
            "ws_max_message_bytes": http.max_ws_message_bytes,
            "ws_compression": http.ws_compression,
            "max_header_bytes": http.max_header_bytes,
            "max_headers": http.max_headers,
            "keep_alive_s": http.keep_alive_s,
            "body_timeout_s": http.body_timeout_s,
        }
        values.update(changes)
        return cls(**values)  # type: ignore[arg-type]
