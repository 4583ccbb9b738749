"""The RSocket transport's one error table: every `ErrorCode` as the ERROR frame that ends a
refused request.

A request the gateway refuses ends its stream with an ERROR frame whose code is RSocket's
(``INVALID`` for a malformed request, ``REJECTED`` for one the server would not take now or
from this caller, ``APPLICATION_ERROR`` for the rest) and whose message is Airlane's code, the
offending parameter where there is one, and the text: ``not_found: no stream 'x'``. The
connection stays open; only a protocol violation ends it (an ERROR on stream 0).
"""

from __future__ import annotations

from collections.abc import Mapping

from airlane.core.errors import AirlaneError, ErrorCode
from airlane.wire.rsocket import ErrorCode as RSocketCode

__all__ = ["MAX_MESSAGE_CHARS", "RSOCKET_ERROR", "error_message"]

MAX_MESSAGE_CHARS = 1000
"""The longest message an ERROR frame carries (cut beyond)."""

_REJECTED = {
    ErrorCode.UNAUTHENTICATED,
    ErrorCode.PERMISSION_DENIED,
    ErrorCode.QUOTA_EXCEEDED,
    ErrorCode.TOO_MANY_REQUESTS,
    ErrorCode.TOO_MANY_SUBSCRIPTIONS,
    ErrorCode.ALREADY_SUBSCRIBED,
    ErrorCode.OVERLOADED,
    ErrorCode.HUB_FULL,
    ErrorCode.HUB_UNAVAILABLE,
    ErrorCode.CAPACITY_EXCEEDED,
    ErrorCode.SHUTTING_DOWN,
    ErrorCode.READ_ONLY,
}
_INVALID = {
    ErrorCode.BAD_RESUME_TOKEN,
    ErrorCode.BODY_TOO_LARGE,
    ErrorCode.UNKNOWN_OP,
    ErrorCode.UNSUPPORTED,
    ErrorCode.UNSUPPORTED_MEDIA_TYPE,
    ErrorCode.EVENT_TOO_LARGE,
    ErrorCode.SCHEMA_VIOLATION,
    ErrorCode.INCOMPATIBLE_SCHEMA,
    ErrorCode.UNKNOWN_EVENT_TYPE,
    ErrorCode.CLOCK_DRIFT,
}


def _rsocket_code(code: ErrorCode) -> RSocketCode:
    if code in _REJECTED:
        return RSocketCode.REJECTED
    if code in _INVALID or code.value.startswith("invalid"):
        return RSocketCode.INVALID
    return RSocketCode.APPLICATION_ERROR


RSOCKET_ERROR: Mapping[ErrorCode, RSocketCode] = {code: _rsocket_code(code) for code in ErrorCode}
"""The ERROR frame code for each `ErrorCode`."""


def error_message(exc: AirlaneError) -> tuple[RSocketCode, str]:
    """The ERROR frame's code and message for a request refused with ``exc``."""
    text = f"{exc.param}: {exc}" if exc.param else str(exc)
    return RSOCKET_ERROR[exc.code], f"{exc.code.value}: {text}"[:MAX_MESSAGE_CHARS]
