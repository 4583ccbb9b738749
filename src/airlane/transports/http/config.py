"""Configuration of the HTTP transport (OpenAI API, streams API, SSE, WebSocket)."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "DEFAULT_BATCH_LIMIT",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_WS_MESSAGE_BYTES",
    "DEFAULT_MAX_WS_SUBSCRIPTIONS",
    "DEFAULT_PING_S",
    "HttpConfig",
]

DEFAULT_PING_S = 30.0
"""The seed's application heartbeat: every 30 s (SSE comment; WebSocket ping)."""
DEFAULT_MAX_BODY_BYTES = 1 << 20
"""1 MiB: a long chat history fits; anything larger is refused with 413."""
DEFAULT_MAX_WS_MESSAGE_BYTES = 1 << 20
"""Largest WebSocket message a client may send."""
DEFAULT_MAX_WS_SUBSCRIPTIONS = 1024
"""Streams one WebSocket may carry at once."""
DEFAULT_BATCH_LIMIT = 64
"""Frames taken from a cursor per write: one write per batch keeps syscalls down."""


@dataclass(frozen=True, slots=True)
class HttpConfig:
    """Limits and timers of the HTTP transport."""

    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    """Largest request body accepted."""
    max_header_bytes: int = 65536
    """Most bytes of header names and values in one request (more: 431)."""
    max_headers: int = 128
    """Most header fields in one request (more: 431)."""
    keep_alive_s: float = 5.0
    """An idle connection is closed after this; a request's head must arrive within it."""
    body_timeout_s: float = 30.0
    """A request body of which nothing arrives for this long closes the connection."""
    sse_ping_s: float = DEFAULT_PING_S
    """Idle time after which an SSE response gets a ``: ping`` comment."""
    sse_retry_ms: int = 1000
    """The ``retry:`` hint sent to EventSource clients: reconnect after a second."""
    ws_ping_s: float = DEFAULT_PING_S
    """Period of the WebSocket protocol Ping frames the server sends (a connection that does
    not answer with a Pong within the same time is closed)."""
    ws_compression: bool = True
    """Accept permessage-deflate when a WebSocket client offers it (browsers do). It saves
    bandwidth on text streams but roughly doubles the gateway's CPU per message (14-16 -> 30-37 us
    per 1.2 KB chunk, ``benchmarks/ws_compression.py``); turn it off when the gateway's CPU is
    the limit."""
    max_ws_message_bytes: int = DEFAULT_MAX_WS_MESSAGE_BYTES
    """Largest WebSocket message accepted (larger: close 1009)."""
    max_ws_subscriptions: int = DEFAULT_MAX_WS_SUBSCRIPTIONS
    """Streams one WebSocket may carry at once."""
    batch_limit: int = DEFAULT_BATCH_LIMIT
    """Frames taken from a cursor per write."""
    query_tokens: bool = False
    """Accept an API key or JWT as ``?access_token=`` (off: URLs end up in logs; browsers get
    a ticket from ``POST /v1/tickets`` and pass ``?ticket=``)."""
    cors_origins: tuple[str, ...] = ()
    """Origins allowed to call from a browser page (``"*"`` for any); empty: no CORS, and
    pages of other origins may not change anything (`airlane.transports.http.browser`)."""
    allowed_hosts: tuple[str, ...] | None = None
    """Host names requests may name (``"*"``: any); None: ``localhost``, ``127.0.0.1`` and
    ``[::1]`` when the gateway listens on loopback, any otherwise."""
    models: tuple[str, ...] = ("airlane-synthetic",)
    """Model names listed by ``GET /v1/models``."""
    console: bool = True
    """Serve the web console at ``/console`` (docs/console.md)."""
    console_remote: bool = False
    """Serve it to clients not on this host too (off: only to loopback addresses; its pages
    then ask for an API key, which the API checks as always)."""
