"""Small raw-ASGI helpers shared by the HTTP handlers: requests, JSON and error responses.
The SSE response pump is `airlane.transports.http.sse_pump`; what an error looks like on this
transport is `airlane.transports.http.errors`.

Raw ASGI messages, not a framework: the streaming paths are hot and the surface is small.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

import orjson

from airlane.core.errors import AirlaneError, BadRequest, ErrorCode
from airlane.core.numbers import decimal
from airlane.transports.http.errors import error_response
from airlane.wire.compression import (
    CompressionChoice,
    classify_client,
    negotiate,
)
from airlane.wire.limits import MAX_BODY_DEPTH, json_depth

if TYPE_CHECKING:
    from airlane.gateway import PeerIdentity

__all__ = [
    "FLUSHED_EXTENSION",
    "HANDED_OVER",
    "HAND_OVER_EXTENSION",
    "LANE_EXTENSION",
    "PEER_EXTENSION",
    "PLACE_EXTENSION",
    "SOCKET_EXTENSION",
    "ASGIApp",
    "HttpError",
    "Receive",
    "Request",
    "Scope",
    "Send",
    "allow_methods",
    "read_json",
    "scope_peer",
    "send_error",
    "send_json",
]

PEER_EXTENSION = "airlane.peer"
"""Scope extension: the client's `airlane.gateway.PeerIdentity` (from its TLS certificate, or
forwarded by a trusted proxy), or None."""


def scope_peer(scope: Scope) -> PeerIdentity | None:
    """The client's `PEER_EXTENSION` in ``scope`` (None: no certificate, or no TLS)."""
    extensions = scope.get("extensions")
    peer: PeerIdentity | None = (
        extensions.get(PEER_EXTENSION) if isinstance(extensions, dict) else None
    )
    return peer


SOCKET_EXTENSION = "airlane.socket"
"""Scope extension: the connection's socket (what asyncio's transport hands out), for marking
it with a lane (`airlane.runtime.socket_lanes`); absent where the server has none to give."""

HAND_OVER_EXTENSION = "airlane.hand_over"
"""Scope extension: ``await pass_to(sibling) -> bool``, which hands the connection, with the
request just read, to a sibling process (`airlane.runtime.handoff`) that then answers it; False
where it stays (a response begun, the body read or cut short, the sibling gone...). A request
with a body goes with it, once all of it has arrived (the call waits for that), so it must be
called before the body is read. Offered only by a server whose process has siblings, on plain
connections, for requests without a body or with a small one of known length (not the request
a sibling handed in: it is answered here). Once it returned True the scope's `HANDED_OVER` key
is True: the request is the sibling's to answer, and to count."""

PLACE_EXTENSION = "airlane.place"
"""Scope extension, offered beside `HAND_OVER_EXTENSION` where the server's process shares a
`airlane.runtime.loadboard.LoadBoard` with its siblings: ``await place() -> bool`` hands the
request, as ``pass_to`` does, to the sibling producing clearly fewer streams, if one does. For
a request that starts a stream, so that streams spread over the workers whichever connection
they arrive on."""

HANDED_OVER = "airlane.handed_over"
"""Scope key set (True) by the server once the request went to a sibling with its connection."""

LANE_EXTENSION = "airlane.lane"
"""Scope extension: what marks the connection with a lane when the server marks it other than
by its socket (HTTP/3 marks each datagram: `airlane.runtime.datagram_lanes.DatagramLane`);
absent elsewhere."""

FLUSHED_EXTENSION = "airlane.flushed"
"""Scope extension of an HTTP/3 request: an async callable that returns once the client has
acknowledged every byte of the response sent so far (or the connection is gone)."""

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class HttpError(AirlaneError):
    """A refusal by the HTTP transport itself whose response needs headers of its own
    (``Allow`` with a 405, ``Content-Range`` with a 416); its status comes from its code, as
    every error's does."""

    def __init__(
        self,
        message: str,
        *,
        code: ErrorCode,
        param: str | None = None,
        headers: Iterable[tuple[bytes, bytes]] = (),
    ) -> None:
        super().__init__(message, code=code, param=param)
        self.headers = list(headers)


def _parse_query(raw: str) -> dict[str, str]:
    """``parse_qsl`` into a dict (last value wins), without its per-field unquoting when
    nothing is quoted: a request's setup is on the path to its first chunk."""
    if "%" in raw or "+" in raw:
        return dict(parse_qsl(raw))
    query = {}
    for field in raw.split("&"):
        name, _, value = field.partition("=")
        if value:  # like parse_qsl, blank values are dropped
            query[name] = value
    return query


@dataclass(slots=True)
class Request:
    """The parts of an ASGI scope the handlers use."""

    scope: Scope
    method: str
    path: str
    query: dict[str, str]
    headers: dict[bytes, bytes]

    @classmethod
    def from_scope(cls, scope: Scope) -> Request:
        """Parse method, path, query string and headers (last value of a repeated header)."""
        raw_query = scope.get("query_string", b"").decode("latin-1")
        query = _parse_query(raw_query) if raw_query else {}
        headers = {name.lower(): value for name, value in scope.get("headers", [])}
        return cls(scope, scope.get("method", "GET"), scope["path"], query, headers)

    def extension(self, name: str) -> Any:
        """The server's value for the scope extension ``name``, or None if it offers none."""
        extensions = self.scope.get("extensions")
        return extensions.get(name) if isinstance(extensions, dict) else None

    async def placed_elsewhere(self) -> bool:
        """Whether the server handed this request, one that starts a stream, with its
        connection to a sibling process producing fewer (`PLACE_EXTENSION`: ``airlane serve
        --workers``); the sibling answers it. Call before reading the body."""
        place = self.extension(PLACE_EXTENSION)
        return place is not None and bool(await place())

    def header(self, name: bytes) -> str | None:
        """A header's value as text, or None."""
        value = self.headers.get(name)
        return None if value is None else value.decode("latin-1")

    @property
    def peer(self) -> PeerIdentity | None:
        """Who the connection's TLS client certificate says it is (None: none, or no TLS)."""
        return scope_peer(self.scope)

    @property
    def bearer(self) -> str | None:
        """The token of an ``Authorization: Bearer`` header."""
        value = self.header(b"authorization")
        if value and value[:7].lower() == "bearer ":
            return value[7:].strip()
        return None

    def compression(self) -> CompressionChoice:
        """The SSE compression for this client: its explicit choice (``?compress=`` or the
        ``x-airlane-compression`` header), else the seed's default for its client class
        (intranet: none, desktop browser: brotli 3, mobile: lz4) if ``Accept-Encoding`` allows
        it (`airlane.wire.compression.negotiate`)."""
        override = self.query.get("compress") or self.header(b"x-airlane-compression")
        client = classify_client(self.header(b"user-agent"), self.client_host)
        return negotiate(self.header(b"accept-encoding"), client, override)

    @property
    def client_host(self) -> str | None:
        """The peer's address."""
        client = self.scope.get("client")
        return client[0] if client else None

    def query_int(self, name: str, default: int, low: int, high: int) -> int:
        """An integer query parameter within ``[low, high]``, or a 400 that says why."""
        raw = self.query.get(name)
        if raw is None:
            return default
        value = decimal(raw.removeprefix("-"))
        if value is None:
            raise BadRequest(f"query parameter {name!r} must be an integer", param=name)
        if raw.startswith("-"):
            value = -value
        if not low <= value <= high:
            raise BadRequest(
                f"query parameter {name!r} must be between {low} and {high}", param=name
            )
        return value


async def read_body(receive: Receive, limit: int) -> bytes:
    """The whole request body, refusing (413) anything larger than ``limit`` bytes."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise AirlaneError("client disconnected", code=ErrorCode.CLIENT_DISCONNECTED)
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise AirlaneError(f"request body exceeds {limit} bytes", code=ErrorCode.BODY_TOO_LARGE)
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def read_json(receive: Receive, limit: int) -> Any:
    """The request body parsed as JSON, or a 400 that says what is wrong."""
    body = await read_body(receive, limit)
    if not body:
        raise BadRequest("request body is empty; send a JSON object")
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadRequest(
            f"request body is not valid JSON: {exc}", code=ErrorCode.INVALID_JSON
        ) from None
    if json_depth(obj, MAX_BODY_DEPTH) > MAX_BODY_DEPTH:
        raise BadRequest(
            f"request body nests deeper than {MAX_BODY_DEPTH} levels", code=ErrorCode.INVALID_JSON
        )
    return obj


async def send_body(
    send: Send,
    status: int,
    body: bytes,
    content_type: bytes,
    headers: Iterable[tuple[bytes, bytes]] = (),
) -> None:
    """A complete response."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def send_json(
    send: Send, status: int, obj: Any, headers: Iterable[tuple[bytes, bytes]] = ()
) -> None:
    """A JSON response."""
    await send_body(send, status, orjson.dumps(obj), b"application/json", headers)


async def send_error(
    send: Send, error: AirlaneError, headers: Iterable[tuple[bytes, bytes]] = ()
) -> int:
    """The response that reports ``error`` (`airlane.transports.http.errors`); its status."""
    if isinstance(error, HttpError):
        headers = [*headers, *error.headers]
    status, all_headers, body = error_response(error, headers)
    await send({"type": "http.response.start", "status": status, "headers": all_headers})
    await send({"type": "http.response.body", "body": body})
    return status


def allow_methods(method: str, allowed: str) -> None:
    """A 405 with an ``Allow`` header unless ``method`` is one of ``allowed``
    (``"GET, POST"``)."""
    if method not in allowed.split(", "):
        raise HttpError(
            f"{method} is not supported here; use {allowed}",
            code=ErrorCode.METHOD_NOT_ALLOWED,
            headers=[(b"allow", allowed.encode())],
        )
