"""The Waku node's one error table: the status code a light push (or any Waku request) gets
when the gateway refuses. "Not now" refusals are 503 (the client may try again or another
node), quota and rate refusals 429, size refusals 413, everything else 400; the status
description carries the gateway's code and message.
"""

from __future__ import annotations

from collections.abc import Mapping

from airlane.core.errors import ErrorCode
from airlane.wire.waku import Status

__all__ = ["WAKU_STATUS"]

_UNAVAILABLE = {
    ErrorCode.OVERLOADED,
    ErrorCode.HUB_FULL,
    ErrorCode.HUB_UNAVAILABLE,
    ErrorCode.HUB_ERROR,
    ErrorCode.SHUTTING_DOWN,
    ErrorCode.CAPACITY_EXCEEDED,
    ErrorCode.INTERNAL_ERROR,
}
_OTHER = {
    ErrorCode.TOO_MANY_REQUESTS: Status.TOO_MANY_REQUESTS,
    ErrorCode.QUOTA_EXCEEDED: Status.TOO_MANY_REQUESTS,
    ErrorCode.EVENT_TOO_LARGE: Status.PAYLOAD_TOO_LARGE,
    ErrorCode.BODY_TOO_LARGE: Status.PAYLOAD_TOO_LARGE,
    ErrorCode.STREAM_TOO_LARGE: Status.PAYLOAD_TOO_LARGE,
}
WAKU_STATUS: Mapping[ErrorCode, int] = {
    code: Status.SERVICE_UNAVAILABLE
    if code in _UNAVAILABLE
    else _OTHER.get(code, Status.BAD_REQUEST)
    for code in ErrorCode
}
"""The Waku status code for each `ErrorCode`."""
