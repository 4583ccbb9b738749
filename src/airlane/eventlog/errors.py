"""What an event log raises on purpose.

Every error carries ``status`` (the HTTP status the HTTP, CLI and gRPC surfaces map it to) and
``code`` (a stable machine-readable string)::

    EventLogError               base of everything an event log raises on purpose (500)
    ├── InvalidRequest          the caller passed something malformed (400; also a ValueError)
    │   └── InvalidLogName      a log or group name outside [A-Za-z0-9._-]{1,200} (400)
    ├── LogNotFound             no log by that name (404)
    ├── GroupNotFound           no consumer group by that name on that log (404)
    ├── LogExists               create_log(exist_ok=False) on an existing log (409)
    ├── EventTooLarge           one event is over the configured size bound (413)
    ├── CapacityExceeded        a configured bound on logs or groups was reached (503)
    ├── EventLogUnavailable     the broker did not answer after bounded retries (503)
    └── BrokerError             the broker refused a request for a reason not listed above (502)

Whose fault: `InvalidRequest` and `EventTooLarge` are the caller's; `EventLogUnavailable` and
`BrokerError` are the broker's; the rest describe the state of the logs. An exception raised
by a ``validate`` hook is none of these: it propagates unchanged.
"""

from __future__ import annotations

__all__ = [
    "BrokerError",
    "CapacityExceeded",
    "EventLogError",
    "EventLogUnavailable",
    "EventTooLarge",
    "GroupNotFound",
    "InvalidLogName",
    "InvalidRequest",
    "LogExists",
    "LogNotFound",
]


class EventLogError(Exception):
    """Base class of the event log's own errors; ``status`` is the matching HTTP status."""

    status = 500
    code = "event_log_error"


class InvalidRequest(EventLogError, ValueError):
    """An argument is malformed: an event field, a limit, a read range, a fetch size."""

    status = 400
    code = "invalid_request"


class InvalidLogName(InvalidRequest):
    """A log or consumer group name does not match ``[A-Za-z0-9._-]{1,200}``."""

    status = 400
    code = "invalid_log_name"


class LogNotFound(EventLogError):
    """No log has that name (it was never created, or it was deleted)."""

    status = 404
    code = "log_not_found"


class GroupNotFound(EventLogError):
    """The log has no consumer group by that name (never created, or deleted)."""

    status = 404
    code = "group_not_found"


class LogExists(EventLogError):
    """``create_log(..., exist_ok=False)`` found a log by that name."""

    status = 409
    code = "log_exists"


class EventTooLarge(EventLogError):
    """The event (data, type, content type and headers together) is over the size bound."""

    status = 413
    code = "event_too_large"


class CapacityExceeded(EventLogError):
    """A configured bound on the number of logs or consumer groups was reached."""

    status = 503
    code = "capacity_exceeded"


class EventLogUnavailable(EventLogError):
    """The broker did not answer after the bounded retries (down, restarting, unreachable)."""

    status = 503
    code = "event_log_unavailable"


class BrokerError(EventLogError):
    """The broker answered with an error this library does not translate more precisely."""

    status = 502
    code = "broker_error"
