"""The HTTP transport's one error table: every `ErrorCode` as an HTTP status and as the close
code of a WebSocket that a refusal ends.

Errors come from below as `AirlaneError`s that carry a code and no wire knowledge; this module
is the only place that knows what each looks like on this transport:

- an HTTP response: the status from `HTTP_STATUS` and an OpenAI-style JSON body
  ``{"error": {"message", "type", "param", "code", ...details}}``; ``type`` is
  ``server_error`` for a 5xx and ``invalid_request_error`` otherwise (what OpenAI's SDKs read),
  a 401 names its scheme (``WWW-Authenticate: Bearer``) and an error that knows when to try
  again says so (``Retry-After``, and ``x-should-retry: true`` for OpenAI's SDKs);
- a WebSocket refusal that ends the socket: the close code from `WS_CLOSE`, the message as the
  reason. One convention serves every endpoint (``/v1/ws``, rooms, Yjs): y-websocket's, where
  4400-4499 is a decision that reconnecting cannot change (4000 + the HTTP status) and every
  other code is transient (1001 going away, 1013 try again later, 4503 too slow);
- a refusal that keeps a ``/v1/ws`` socket open is an ``error`` message with the code itself.

``docs/errors.md`` prints these tables; ``tests/transports/test_error_tables.py`` checks that
every code has a row in each and walks every code through the wire.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import orjson

from airlane.core.errors import AirlaneError, ErrorCode

__all__ = [
    "HTTP_STATUS",
    "WS_CLOSE",
    "close_code",
    "close_reason",
    "error_json",
    "error_response",
    "http_status",
]

_C = ErrorCode

HTTP_STATUS: Mapping[ErrorCode, int] = {
    # the request itself
    _C.INVALID_REQUEST: 400,
    _C.INVALID_PARAMETER: 400,
    _C.INVALID_JSON: 400,
    _C.INVALID_MESSAGE: 400,
    _C.INVALID_EVENT: 400,
    _C.INVALID_METADATA: 400,
    _C.INVALID_STREAM_ID: 400,
    _C.BAD_RESUME_TOKEN: 400,
    _C.INVALID_RESUME: 416,
    _C.BODY_TOO_LARGE: 413,
    _C.NOT_FOUND: 404,
    _C.METHOD_NOT_ALLOWED: 405,
    _C.UNKNOWN_OP: 400,
    _C.UNSUPPORTED: 400,
    _C.UNSUPPORTED_SUBPROTOCOL: 400,
    _C.UNSUPPORTED_MEDIA_TYPE: 415,
    _C.CLIENT_DISCONNECTED: 499,  # nginx's: nobody reads it, the access log and metrics do
    # streams
    _C.STREAM_NOT_FOUND: 404,
    _C.STREAM_EXISTS: 409,
    _C.STREAM_ENDED: 409,
    _C.STREAM_TOO_LARGE: 413,
    _C.UNKNOWN_STREAM: 404,
    _C.ALREADY_SUBSCRIBED: 409,
    _C.NOT_SUBSCRIBED: 404,
    _C.TOO_MANY_SUBSCRIPTIONS: 429,
    _C.TOO_MANY_REQUESTS: 429,
    _C.TOO_SLOW: 429,
    _C.PRODUCER_LOST: 502,
    # capacity
    _C.OVERLOADED: 503,
    _C.HUB_FULL: 503,
    _C.HUB_UNAVAILABLE: 503,
    _C.HUB_ERROR: 500,
    _C.SHUTTING_DOWN: 503,
    # who is asking
    _C.UNAUTHENTICATED: 401,
    _C.PERMISSION_DENIED: 403,
    _C.QUOTA_EXCEEDED: 429,
    # backends (a non-streaming completion whose stream ended in an error)
    _C.BACKEND_ERROR: 502,
    _C.UPSTREAM_ERROR: 502,
    _C.UPSTREAM_HTTP_ERROR: 502,
    _C.UPSTREAM_UNAVAILABLE: 502,
    _C.UPSTREAM_TIMEOUT: 502,
    _C.UPSTREAM_CONNECTION_ERROR: 502,
    _C.UPSTREAM_PROTOCOL_ERROR: 502,
    # event logs
    _C.EVENT_LOG_ERROR: 500,
    _C.INVALID_LOG_NAME: 400,
    _C.LOG_NOT_FOUND: 404,
    _C.GROUP_NOT_FOUND: 404,
    _C.GROUP_SETTINGS_CONFLICT: 409,
    _C.LOG_EXISTS: 409,
    _C.EVENT_TOO_LARGE: 413,
    _C.CAPACITY_EXCEEDED: 503,
    _C.EVENT_LOG_UNAVAILABLE: 503,
    _C.BROKER_ERROR: 502,
    # the schema registry
    _C.REGISTRY_ERROR: 500,
    _C.INVALID_SUBJECT: 400,
    _C.INVALID_COMPATIBILITY: 400,
    _C.SUBJECT_NOT_FOUND: 404,
    _C.VERSION_NOT_FOUND: 404,
    _C.INCOMPATIBLE_SCHEMA: 409,
    _C.REGISTRATION_CONFLICT: 409,
    _C.INVALID_SCHEMA: 422,
    _C.SCHEMA_VIOLATION: 422,
    _C.UNKNOWN_EVENT_TYPE: 422,
    _C.REGISTRY_UNAVAILABLE: 503,
    # shared state
    _C.INVALID_ROOM: 400,
    _C.INVALID_ROOM_REQUEST: 400,
    _C.INVALID_SYNC_DATA: 400,
    _C.CLOCK_DRIFT: 400,
    _C.READ_ONLY: 403,
    _C.ROOM_UNAVAILABLE: 503,
    # artifacts
    _C.ARTIFACT_ERROR: 400,
    _C.MALFORMED_ARTIFACT: 422,
    _C.VERIFICATION_FAILED: 422,
    _C.BAD_SIGNATURE: 422,
    _C.DELTA_BASE_MISMATCH: 409,
    _C.RANGE_NOT_SATISFIABLE: 416,
    # this side
    _C.INTERNAL_ERROR: 500,
}
"""The HTTP status of each code."""

# WebSocket close codes (RFC 6455 7.4.1, and the IANA registry for 1012-1014).
_GOING_AWAY, _UNSUPPORTED_DATA, _TOO_BIG, _INTERNAL, _TRY_LATER = 1001, 1003, 1009, 1011, 1013
_PROTOCOL_ERROR = 1002
# y-websocket 3.x reconnects after any code outside 4400-4499; 4503 says "try again later".
_TOO_SLOW = 4503

WS_CLOSE: Mapping[ErrorCode, int] = {
    **{code: 4000 + status for code, status in HTTP_STATUS.items() if 400 <= status < 500},
    **{code: _TRY_LATER for code, status in HTTP_STATUS.items() if status in (502, 503)},
    **{code: _INTERNAL for code, status in HTTP_STATUS.items() if status == 500},
    # What RFC 6455 and y-websocket have codes of their own for:
    _C.UNSUPPORTED: _UNSUPPORTED_DATA,
    _C.UNSUPPORTED_SUBPROTOCOL: _PROTOCOL_ERROR,
    _C.BODY_TOO_LARGE: _TOO_BIG,
    _C.EVENT_TOO_LARGE: _TOO_BIG,
    _C.TOO_SLOW: _TOO_SLOW,
    _C.SHUTTING_DOWN: _GOING_AWAY,
}
"""The close code of a WebSocket ended by a refusal with each code: 4000 + the HTTP status
for the caller's mistakes, 1013 (try again later) where the HTTP status is 502 or 503, 1011
for this side's failures, and the codes RFC 6455 and y-websocket have for the rest."""


def http_status(code: ErrorCode) -> int:
    """The HTTP status of ``code``."""
    return HTTP_STATUS[code]


def close_code(code: ErrorCode) -> int:
    """The WebSocket close code of a refusal with ``code``."""
    return WS_CLOSE[code]


def close_reason(message: str) -> str:
    """``message`` cut to fit a close frame (123 bytes of UTF-8, RFC 6455 5.5), at a
    character boundary."""
    data = message.encode()
    if len(data) <= 123:
        return message
    return data[:120].decode(errors="ignore") + "..."


def error_json(exc: AirlaneError, *, status: int | None = None) -> bytes:
    """The OpenAI-style JSON body of ``exc``."""
    status = http_status(exc.code) if status is None else status
    error = {
        "message": str(exc),
        "type": "server_error" if status >= 500 else "invalid_request_error",
        "param": exc.param,
        "code": exc.code.value,
        **exc.details(),
    }
    return orjson.dumps({"error": error})


def error_response(
    exc: AirlaneError, extra_headers: Iterable[tuple[bytes, bytes]] = ()
) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """``(status, headers, body)`` of the response that reports ``exc``."""
    status = http_status(exc.code)
    body = error_json(exc, status=status)
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", b"%d" % len(body)),
        *extra_headers,
    ]
    if status == 401:  # RFC 9110 11.6.1: a 401 names the scheme the client should use
        headers.append((b"www-authenticate", b"Bearer"))
    if exc.retry_after_s is not None:
        # Nothing was started, so the request may be sent again: say when (whole seconds,
        # RFC 9110 10.2.3), and say so in the header OpenAI's SDKs read.
        seconds = max(0, math.ceil(exc.retry_after_s))
        headers += [(b"retry-after", b"%d" % seconds), (b"x-should-retry", b"true")]
    return status, headers, body
