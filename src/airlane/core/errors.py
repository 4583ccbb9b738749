"""One error model: a stable code for every failure, and one root for every exception.

Every exception Airlane raises on purpose derives from `AirlaneError` and carries a `code`, a
member of `ErrorCode`: a short, stable, documented name (``stream_not_found``,
``overloaded``...) that clients can branch on. The layers below the transports raise them with
no wire knowledge at all: no HTTP status, no close code. Each transport has one table from code
to its own wire (an HTTP status and JSON body, a WebSocket close code, a gRPC status with the
code in the ``airlane-error-code`` trailer, an AIRC ``ERROR`` frame); ``docs/errors.md`` lists
them side by side, and a test walks every code through every transport.

The tree, by package (each subtree is documented in its own module)::

    AirlaneError                  root; ``code``, ``param``, ``retry_after_s``, ``details()``
    ├── BadRequest                the caller sent something malformed (``invalid_request``)
    ├── NotFound                  no such route or resource (``not_found``)
    ├── airlane.core              BadResumeToken, ResumeOutOfRange, StreamClosed
    ├── airlane.wire              WireError: bytes that do not decode, or values that do not
    │                             encode
    ├── airlane.hub               HubError: StreamNotFound, StreamEnded, HubFull...
    ├── airlane.security          SecurityError: Unauthenticated, PermissionDenied
    ├── airlane.runtime           Overloaded (set-up waited too long)
    ├── airlane.backends          BackendError, UpstreamHTTPError
    ├── airlane.gateway           InvalidChatRequest
    ├── airlane.eventlog          EventLogError: LogNotFound, EventTooLarge...
    ├── airlane.registry          RegistryError: SchemaViolation, IncompatibleSchema...
    ├── airlane.sync              SyncError, RoomError, YjsError
    └── airlane.artifacts         ArtifactError: VerificationError...

Two trees stand apart, on purpose: `airlane.client.ClientError`, raised in a client's process
(its ``RequestRejected.code`` is the gateway's code as received, a string, since a newer gateway
may send one this client does not know), and the benchmark's own failures (`airlane.bench`).
Neither is ever raised inside a gateway.

The same codes name what ended a stream: a stream's terminal ``error`` event carries one
(``producer_lost``, ``upstream_timeout``...), whichever wire delivers it.

A code names what went wrong, not whose class raised it: several classes may share one (every
"not there" of a route is ``not_found``). Codes are part of the API: a code is never renamed
or given another meaning; new failures get new codes.

This module is pure: no I/O, no clock.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

__all__ = ["AirlaneError", "BadRequest", "ErrorCode", "NotFound"]


class ErrorCode(enum.StrEnum):
    """Every failure Airlane reports, by its stable name (``docs/errors.md`` says what each
    means and how each wire reports it)."""

    # -- the request itself ------------------------------------------------------------------
    INVALID_REQUEST = "invalid_request"
    INVALID_PARAMETER = "invalid_parameter"
    INVALID_JSON = "invalid_json"
    INVALID_MESSAGE = "invalid_message"
    INVALID_EVENT = "invalid_event"
    INVALID_METADATA = "invalid_metadata"
    INVALID_STREAM_ID = "invalid_stream_id"
    BAD_RESUME_TOKEN = "bad_resume_token"
    INVALID_RESUME = "invalid_resume"
    BODY_TOO_LARGE = "body_too_large"
    NOT_FOUND = "not_found"
    METHOD_NOT_ALLOWED = "method_not_allowed"
    UNKNOWN_OP = "unknown_op"
    UNSUPPORTED = "unsupported"
    UNSUPPORTED_SUBPROTOCOL = "unsupported_subprotocol"
    UNSUPPORTED_MEDIA_TYPE = "unsupported_media_type"
    CLIENT_DISCONNECTED = "client_disconnected"
    # -- streams -----------------------------------------------------------------------------
    STREAM_NOT_FOUND = "stream_not_found"
    STREAM_EXISTS = "stream_exists"
    STREAM_ENDED = "stream_ended"
    STREAM_TOO_LARGE = "stream_too_large"
    UNKNOWN_STREAM = "unknown_stream"
    ALREADY_SUBSCRIBED = "already_subscribed"
    NOT_SUBSCRIBED = "not_subscribed"
    TOO_MANY_SUBSCRIPTIONS = "too_many_subscriptions"
    TOO_MANY_REQUESTS = "too_many_requests"
    TOO_SLOW = "too_slow"
    PRODUCER_LOST = "producer_lost"
    # -- capacity ----------------------------------------------------------------------------
    OVERLOADED = "overloaded"
    HUB_FULL = "hub_full"
    HUB_UNAVAILABLE = "hub_unavailable"
    HUB_ERROR = "hub_error"
    SHUTTING_DOWN = "shutting_down"
    # -- who is asking -----------------------------------------------------------------------
    UNAUTHENTICATED = "unauthenticated"
    PERMISSION_DENIED = "permission_denied"
    QUOTA_EXCEEDED = "quota_exceeded"
    # -- backends ----------------------------------------------------------------------------
    BACKEND_ERROR = "backend_error"
    UPSTREAM_ERROR = "upstream_error"
    UPSTREAM_HTTP_ERROR = "upstream_http_error"
    UPSTREAM_UNAVAILABLE = "upstream_unavailable"
    UPSTREAM_TIMEOUT = "upstream_timeout"
    UPSTREAM_CONNECTION_ERROR = "upstream_connection_error"
    UPSTREAM_PROTOCOL_ERROR = "upstream_protocol_error"
    # -- event logs --------------------------------------------------------------------------
    EVENT_LOG_ERROR = "event_log_error"
    INVALID_LOG_NAME = "invalid_log_name"
    LOG_NOT_FOUND = "log_not_found"
    GROUP_NOT_FOUND = "group_not_found"
    GROUP_SETTINGS_CONFLICT = "group_settings_conflict"
    LOG_EXISTS = "log_exists"
    EVENT_TOO_LARGE = "event_too_large"
    CAPACITY_EXCEEDED = "capacity_exceeded"
    EVENT_LOG_UNAVAILABLE = "event_log_unavailable"
    BROKER_ERROR = "broker_error"
    # -- the schema registry -----------------------------------------------------------------
    REGISTRY_ERROR = "registry_error"
    INVALID_SUBJECT = "invalid_subject"
    INVALID_COMPATIBILITY = "invalid_compatibility"
    SUBJECT_NOT_FOUND = "subject_not_found"
    VERSION_NOT_FOUND = "version_not_found"
    INCOMPATIBLE_SCHEMA = "incompatible_schema"
    REGISTRATION_CONFLICT = "registration_conflict"
    INVALID_SCHEMA = "invalid_schema"
    SCHEMA_VIOLATION = "schema_violation"
    UNKNOWN_EVENT_TYPE = "unknown_event_type"
    REGISTRY_UNAVAILABLE = "registry_unavailable"
    # -- shared state ------------------------------------------------------------------------
    INVALID_ROOM = "invalid_room"
    INVALID_ROOM_REQUEST = "invalid_room_request"
    INVALID_SYNC_DATA = "invalid_sync_data"
    CLOCK_DRIFT = "clock_drift"
    READ_ONLY = "read_only"
    ROOM_UNAVAILABLE = "room_unavailable"
    # -- artifacts ---------------------------------------------------------------------------
    ARTIFACT_ERROR = "artifact_error"
    MALFORMED_ARTIFACT = "malformed_artifact"
    VERIFICATION_FAILED = "verification_failed"
    BAD_SIGNATURE = "bad_signature"
    DELTA_BASE_MISMATCH = "delta_base_mismatch"
    RANGE_NOT_SATISFIABLE = "range_not_satisfiable"
    # -- this side ---------------------------------------------------------------------------
    INTERNAL_ERROR = "internal_error"


class AirlaneError(Exception):
    """Base of every exception Airlane raises on purpose; ``str()`` is the message a client
    is shown.

    ``code`` is the class's `ErrorCode` unless the raiser gives another (an upstream's
    refusal, a generic `BadRequest` about one parameter); ``param`` names the offending
    request parameter where there is one; ``retry_after_s`` is set where trying again later
    can succeed and the raiser knows when.
    """

    code: ErrorCode = ErrorCode.INTERNAL_ERROR
    param: str | None = None
    retry_after_s: float | None = None

    def __init__(
        self,
        message: str = "",
        *,
        code: ErrorCode | None = None,
        param: str | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        if param is not None:
            self.param = param
        if retry_after_s is not None:
            self.retry_after_s = retry_after_s

    def details(self) -> Mapping[str, Any]:
        """JSON-ready facts beyond the message that help the caller fix the request (the
        incompatibilities of a refused schema, say); empty by default."""
        return {}


class BadRequest(AirlaneError):
    """The caller sent something malformed; the message says what, ``param`` where."""

    code = ErrorCode.INVALID_REQUEST


class NotFound(AirlaneError):
    """No such route or resource."""

    code = ErrorCode.NOT_FOUND
