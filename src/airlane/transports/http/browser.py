"""What a web page on another site may make the gateway do: nothing, by default.

A gateway on a developer's laptop listens on loopback without keys; any page the developer
opens can send it requests, and browsers do not ask first for "simple" ones (a POST with
``Content-Type: text/plain``, a WebSocket handshake). Three checks close that:

- **Host**: a request must name a host the gateway serves (`HttpConfig.allowed_hosts`; on
  loopback by default only ``localhost``, ``127.0.0.1`` and ``[::1]``), so a page that rebinds
  its own name to 127.0.0.1 (DNS rebinding) is refused: 400 ``invalid_request``.
- **Origin**: a request that changes something (POST, PUT, PATCH, DELETE) or opens a
  WebSocket, sent by a page (it has an ``Origin`` header), must come from the gateway's own
  origin or one of `HttpConfig.cors_origins`: else 403 ``permission_denied``. Clients that are
  not browsers send no ``Origin`` and are not concerned.
- **JSON**: a request body sent to a JSON endpoint must say ``application/json`` (or
  ``+json``): else 415 ``unsupported_media_type``. A cross-site page cannot send that without
  a CORS preflight, which the gateway answers only for the allowed origins.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from airlane.core.errors import AirlaneError, BadRequest, ErrorCode
from airlane.transports.http.asgi import Request
from airlane.transports.http.config import HttpConfig

__all__ = ["LOOPBACK_HOSTS", "check_browser", "check_json_body"]

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]")
"""The host names a gateway listening on loopback answers to by default."""

_CHANGES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def check_browser(config: HttpConfig, request: Request, *, websocket: bool = False) -> None:
    """Refuse a request for a host the gateway does not serve, or one a page of a foreign
    origin sends to change something (see the module docstring)."""
    host = request.header(b"host")
    allowed = config.allowed_hosts
    if allowed and "*" not in allowed and _hostname(host) not in allowed:
        raise BadRequest(
            f"host {(host or '')[:100]!r} is not served here (add it to [http] allowed_hosts)"
        )
    origin = request.header(b"origin")
    if origin is None or not (websocket or request.method in _CHANGES):
        return
    origins = config.cors_origins
    if "*" in origins or origin in origins or _same_origin(origin, host):
        return
    raise AirlaneError(
        f"a page from {origin[:100]} may not call this gateway (add it to [http] cors_origins)",
        code=ErrorCode.PERMISSION_DENIED,
    )


_SIGNALLING = frozenset({"application/sdp", "application/trickle-ice-sdpfrag"})
"""WebRTC signalling bodies (``/v1/webrtc``): like JSON, not a type a page may send without a
CORS preflight, so a foreign page cannot send them unasked either."""


def check_json_body(request: Request) -> None:
    """Refuse a request that carries a body not declared as JSON (or, under ``/v1/webrtc``,
    as SDP)."""
    if request.method not in _CHANGES or not _has_body(request):
        return
    media = (request.header(b"content-type") or "").split(";", 1)[0].strip().lower()
    if media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    ):
        return
    if media in _SIGNALLING and request.path.startswith("/v1/webrtc"):
        return
    raise AirlaneError(
        f"send the body as JSON (Content-Type: application/json), not {media or 'untyped'}",
        code=ErrorCode.UNSUPPORTED_MEDIA_TYPE,
    )


def _has_body(request: Request) -> bool:
    length = request.header(b"content-length")
    if length is not None:
        return length.strip() not in ("", "0")
    return request.header(b"transfer-encoding") is not None


def _hostname(host: str | None) -> str:
    """The name in a ``Host`` header, without its port (``[::1]`` keeps its brackets)."""
    if not host:
        return ""
    host = host.strip().lower()
    if host.startswith("["):
        return host[: host.find("]") + 1] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _same_origin(origin: str, host: str | None) -> bool:
    """Whether a page's ``Origin`` is the gateway's own (the same host and port)."""
    try:
        netloc = urlsplit(origin).netloc.lower()
    except ValueError:
        return False
    return bool(host) and netloc == (host or "").strip().lower()
