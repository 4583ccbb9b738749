"""The gRPC transport's one error table: every `ErrorCode` as a gRPC status.

A refused call ends with the status `GRPC_STATUS` gives its code, the message as the status
details (with the offending parameter in front when there is one), and the code itself in the
``airlane-error-code`` trailing metadata (`ERROR_CODE_METADATA`), so that a client can tell
apart refusals that share a status (``stream_not_found`` and ``log_not_found`` are both
NOT_FOUND). gRPC-Web and Connect (`airlane.transports.grpc.web`) report the same status from
the same table. A refusal inside a ``Session`` call is a ``SessionError`` message carrying the
code; the call goes on.

The statuses follow what each means in ``grpc/status.proto``: the caller's mistakes are
INVALID_ARGUMENT (or NOT_FOUND, ALREADY_EXISTS, OUT_OF_RANGE, FAILED_PRECONDITION where those
say more), bounds are RESOURCE_EXHAUSTED, what may work later is UNAVAILABLE (the status gRPC
clients retry), a backend's timeout is DEADLINE_EXCEEDED, this side's bugs are INTERNAL.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NoReturn

import grpc
from grpc import aio

from airlane.core.errors import AirlaneError, ErrorCode
from airlane.wire.proto import ERROR_CODE_METADATA

__all__ = ["ERROR_CODE_METADATA", "GRPC_STATUS", "abort", "message_of", "status_of"]

_C, _S = ErrorCode, grpc.StatusCode

GRPC_STATUS: Mapping[ErrorCode, grpc.StatusCode] = {
    # the request itself
    _C.INVALID_REQUEST: _S.INVALID_ARGUMENT,
    _C.INVALID_PARAMETER: _S.INVALID_ARGUMENT,
    _C.INVALID_JSON: _S.INVALID_ARGUMENT,
    _C.INVALID_MESSAGE: _S.INVALID_ARGUMENT,
    _C.INVALID_EVENT: _S.INVALID_ARGUMENT,
    _C.INVALID_METADATA: _S.INVALID_ARGUMENT,
    _C.INVALID_STREAM_ID: _S.INVALID_ARGUMENT,
    _C.BAD_RESUME_TOKEN: _S.INVALID_ARGUMENT,
    _C.INVALID_RESUME: _S.OUT_OF_RANGE,
    _C.BODY_TOO_LARGE: _S.RESOURCE_EXHAUSTED,
    _C.NOT_FOUND: _S.NOT_FOUND,
    _C.METHOD_NOT_ALLOWED: _S.UNIMPLEMENTED,
    _C.UNKNOWN_OP: _S.INVALID_ARGUMENT,
    _C.UNSUPPORTED: _S.INVALID_ARGUMENT,
    _C.UNSUPPORTED_SUBPROTOCOL: _S.INVALID_ARGUMENT,
    _C.UNSUPPORTED_MEDIA_TYPE: _S.INVALID_ARGUMENT,
    _C.CLIENT_DISCONNECTED: _S.CANCELLED,
    # streams
    _C.STREAM_NOT_FOUND: _S.NOT_FOUND,
    _C.STREAM_EXISTS: _S.ALREADY_EXISTS,
    _C.STREAM_ENDED: _S.FAILED_PRECONDITION,
    _C.STREAM_TOO_LARGE: _S.FAILED_PRECONDITION,
    _C.UNKNOWN_STREAM: _S.NOT_FOUND,
    _C.ALREADY_SUBSCRIBED: _S.ALREADY_EXISTS,
    _C.NOT_SUBSCRIBED: _S.NOT_FOUND,
    _C.TOO_MANY_SUBSCRIPTIONS: _S.RESOURCE_EXHAUSTED,
    _C.TOO_MANY_REQUESTS: _S.RESOURCE_EXHAUSTED,
    _C.TOO_SLOW: _S.RESOURCE_EXHAUSTED,
    _C.PRODUCER_LOST: _S.ABORTED,
    # capacity
    _C.OVERLOADED: _S.UNAVAILABLE,
    _C.HUB_FULL: _S.RESOURCE_EXHAUSTED,
    _C.HUB_UNAVAILABLE: _S.UNAVAILABLE,
    _C.HUB_ERROR: _S.INTERNAL,
    _C.SHUTTING_DOWN: _S.UNAVAILABLE,
    # who is asking
    _C.UNAUTHENTICATED: _S.UNAUTHENTICATED,
    _C.PERMISSION_DENIED: _S.PERMISSION_DENIED,
    _C.QUOTA_EXCEEDED: _S.RESOURCE_EXHAUSTED,
    # backends
    _C.BACKEND_ERROR: _S.UNAVAILABLE,
    _C.UPSTREAM_ERROR: _S.UNAVAILABLE,
    _C.UPSTREAM_HTTP_ERROR: _S.UNAVAILABLE,
    _C.UPSTREAM_UNAVAILABLE: _S.UNAVAILABLE,
    _C.UPSTREAM_TIMEOUT: _S.DEADLINE_EXCEEDED,
    _C.UPSTREAM_CONNECTION_ERROR: _S.UNAVAILABLE,
    _C.UPSTREAM_PROTOCOL_ERROR: _S.UNAVAILABLE,
    # event logs
    _C.EVENT_LOG_ERROR: _S.INTERNAL,
    _C.INVALID_LOG_NAME: _S.INVALID_ARGUMENT,
    _C.LOG_NOT_FOUND: _S.NOT_FOUND,
    _C.GROUP_NOT_FOUND: _S.NOT_FOUND,
    _C.GROUP_SETTINGS_CONFLICT: _S.FAILED_PRECONDITION,
    _C.LOG_EXISTS: _S.ALREADY_EXISTS,
    _C.EVENT_TOO_LARGE: _S.RESOURCE_EXHAUSTED,
    _C.CAPACITY_EXCEEDED: _S.RESOURCE_EXHAUSTED,
    _C.EVENT_LOG_UNAVAILABLE: _S.UNAVAILABLE,
    _C.BROKER_ERROR: _S.UNAVAILABLE,
    # the schema registry
    _C.REGISTRY_ERROR: _S.INTERNAL,
    _C.INVALID_SUBJECT: _S.INVALID_ARGUMENT,
    _C.INVALID_COMPATIBILITY: _S.INVALID_ARGUMENT,
    _C.SUBJECT_NOT_FOUND: _S.NOT_FOUND,
    _C.VERSION_NOT_FOUND: _S.NOT_FOUND,
    _C.INCOMPATIBLE_SCHEMA: _S.FAILED_PRECONDITION,
    _C.REGISTRATION_CONFLICT: _S.ABORTED,
    _C.INVALID_SCHEMA: _S.INVALID_ARGUMENT,
    _C.SCHEMA_VIOLATION: _S.INVALID_ARGUMENT,
    _C.UNKNOWN_EVENT_TYPE: _S.INVALID_ARGUMENT,
    _C.REGISTRY_UNAVAILABLE: _S.UNAVAILABLE,
    # shared state
    _C.INVALID_ROOM: _S.INVALID_ARGUMENT,
    _C.INVALID_ROOM_REQUEST: _S.INVALID_ARGUMENT,
    _C.INVALID_SYNC_DATA: _S.INVALID_ARGUMENT,
    _C.CLOCK_DRIFT: _S.INVALID_ARGUMENT,
    _C.READ_ONLY: _S.PERMISSION_DENIED,
    _C.ROOM_UNAVAILABLE: _S.UNAVAILABLE,
    # artifacts
    _C.ARTIFACT_ERROR: _S.INVALID_ARGUMENT,
    _C.MALFORMED_ARTIFACT: _S.INVALID_ARGUMENT,
    _C.VERIFICATION_FAILED: _S.DATA_LOSS,
    _C.BAD_SIGNATURE: _S.DATA_LOSS,
    _C.DELTA_BASE_MISMATCH: _S.FAILED_PRECONDITION,
    _C.RANGE_NOT_SATISFIABLE: _S.OUT_OF_RANGE,
    # this side
    _C.INTERNAL_ERROR: _S.INTERNAL,
}
"""The gRPC status of each code."""


def status_of(exc: AirlaneError) -> grpc.StatusCode:
    """The status a call refused with ``exc`` ends with."""
    return GRPC_STATUS[exc.code]


def message_of(exc: AirlaneError) -> str:
    """The status details: the message, after the offending parameter when there is one."""
    return f"{exc.param}: {exc}" if exc.param else str(exc)


async def abort(
    context: aio.ServicerContext, exc: AirlaneError, message: str | None = None
) -> NoReturn:
    """End the call for ``exc``: its status, ``message`` (default `message_of`) and the code
    in the ``airlane-error-code`` trailer."""
    trailer = ((ERROR_CODE_METADATA, exc.code.value),)
    await context.abort(status_of(exc), message or message_of(exc), trailing_metadata=trailer)
    raise AssertionError("abort returns by raising")  # pragma: no cover
