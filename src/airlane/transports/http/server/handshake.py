"""A WebSocket handshake request as ``websockets`` takes it, made from what httptools parsed.

`upgrade_to_websocket` (`airlane.transports.http.ws_protocol`) gives ``websockets``'
`ServerProtocol.accept` a `Request` built here from the request target and header fields the
HTTP parser read, rather than the request's bytes to parse again. What ``websockets``' own
parser would have refused before ``accept`` (a method other than GET, a version other than
HTTP/1.1, a body) is refused here the same way (`refusal_before_handshake`); the header
count and line lengths it bounds are bounded by the HTTP parser already (`ServerSettings`).
"""

from __future__ import annotations

from websockets.datastructures import Headers
from websockets.http11 import Request

__all__ = ["handshake_request", "offered_subprotocols", "refusal_before_handshake"]

# Request headers that mean a body, which a WebSocket handshake may not have.
_BODY_HEADERS = frozenset((b"content-length", b"transfer-encoding"))


def refusal_before_handshake(
    method: str, http_version: str, headers: list[tuple[bytes, bytes]]
) -> tuple[int, str, bytes] | None:
    """``(status, text, extra header lines)`` for an upgrade request that cannot be a
    WebSocket handshake, or None."""
    if method != "GET":
        return 405, "a WebSocket handshake is a GET request", b"allow: GET\r\n"
    if http_version != "1.1":
        return 505, "a WebSocket handshake is an HTTP/1.1 request", b""
    for name, _ in headers:
        if name in _BODY_HEADERS:
            return 400, "a WebSocket handshake has no body", b""
    return None


def handshake_request(
    raw_path: bytes, query_string: bytes, headers: list[tuple[bytes, bytes]]
) -> Request:
    """The `Request` for ``websockets``: the target and the header fields (names lower-cased,
    as the HTTP parser handed them on; ``websockets`` reads them case-insensitively).
    Raises ``InvalidHeaderValue`` for a value ``websockets`` would not take."""
    parsed = Headers()
    for name, value in headers:
        parsed[name.decode("ascii")] = value.decode("latin-1")
    target = raw_path + b"?" + query_string if query_string else raw_path
    return Request(target.decode("latin-1"), parsed)


def offered_subprotocols(headers: list[tuple[bytes, bytes]]) -> list[str]:
    """The subprotocols the client offers (``Sec-WebSocket-Protocol``), in its order."""
    offered: list[str] = []
    for name, value in headers:
        if name == b"sec-websocket-protocol":
            offered += (
                token.strip() for token in value.decode("latin-1").split(",") if token.strip()
            )
    return offered
