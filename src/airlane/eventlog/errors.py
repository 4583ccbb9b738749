"""What an event log raises on purpose.

Every error is an `airlane.core.errors.AirlaneError` and carries its stable code (in
brackets); each transport reports it in its own way (``docs/errors.md``)::

    EventLogError               base of everything an event log raises on purpose
    │                           (event_log_error)
    ├── InvalidRequest          the caller passed something malformed (invalid_request; also a
    │   │                       ValueError)
    │   └── InvalidLogName      a log or group name outside [A-Za-z0-9._-]{1,200}
    │                           (invalid_log_name)
    ├── LogNotFound             no log by that name (log_not_found)
    ├── GroupNotFound           no consumer group by that name on that log (group_not_found)
    ├── GroupSettingsConflict   a join asked for settings other than the existing group's
    │                           (group_settings_conflict)
    ├── LogExists               create_log(exist_ok=False) on an existing log (log_exists)
    ├── EventTooLarge           one event is over the configured size bound (event_too_large)
    ├── CapacityExceeded        a configured bound on logs or groups was reached
    │                           (capacity_exceeded)
    ├── EventLogUnavailable     the broker did not answer after bounded retries
    │                           (event_log_unavailable)
    └── BrokerError             the broker refused a request for a reason not listed above
                                (broker_error)

Whose fault: `InvalidRequest` and `EventTooLarge` are the caller's; `EventLogUnavailable` and
`BrokerError` are the broker's; the rest describe the state of the logs. An exception raised
by a ``validate`` hook is none of these: it propagates unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airlane.core.errors import AirlaneError, ErrorCode

__all__ = [
    "BrokerError",
    "CapacityExceeded",
    "EventLogError",
    "EventLogUnavailable",
    "EventTooLarge",
    "GroupNotFound",
    "GroupSettingsConflict",
    "InvalidLogName",
    "InvalidRequest",
    "LogExists",
    "LogNotFound",
]


class EventLogError(AirlaneError):
    """Base class of the event log's own errors."""

    code = ErrorCode.EVENT_LOG_ERROR


class InvalidRequest(EventLogError, ValueError):
    """An argument is malformed: an event field, a limit, a read range, a fetch size."""

    code = ErrorCode.INVALID_REQUEST


class InvalidLogName(InvalidRequest):
    """A log or consumer group name does not match ``[A-Za-z0-9._-]{1,200}``."""

    code = ErrorCode.INVALID_LOG_NAME


class LogNotFound(EventLogError):
    """No log has that name (it was never created, or it was deleted)."""

    code = ErrorCode.LOG_NOT_FOUND


class GroupNotFound(EventLogError):
    """The log has no consumer group by that name (never created, or deleted)."""

    code = ErrorCode.GROUP_NOT_FOUND


class GroupSettingsConflict(EventLogError):
    """A join (`EventLog.consumer_group`, a fetch) asked for delivery settings other than
    the ones the existing group was created with. Joining never changes a group's settings;
    leave them out to join with the group's own.

    ``conflicts`` holds ``(setting, stored, asked)`` for each setting that differs, in the
    order ``ack_wait_s``, ``max_deliver``; ``None`` for ``max_deliver`` means no limit.
    """

    code = ErrorCode.GROUP_SETTINGS_CONFLICT

    def __init__(self, log: str, group: str, conflicts: Sequence[tuple[str, Any, Any]]) -> None:
        said = "; ".join(
            f"{setting} is {_shown(stored)}, this join asked for {_shown(asked)}"
            for setting, stored, asked in conflicts
        )
        super().__init__(
            f"group {group!r} on log {log!r} exists with other settings: {said}. Leave "
            "them out to join with the group's own (delete the group to change them)",
            param=conflicts[0][0] if conflicts else None,
        )
        self.conflicts = list(conflicts)

    def details(self) -> Mapping[str, Any]:
        """Each setting that differs, with the group's value and the asked one."""
        return {
            "conflicts": [
                {"setting": setting, "stored": stored, "asked": asked}
                for setting, stored, asked in self.conflicts
            ]
        }


def _shown(value: Any) -> str:
    return "None (no limit)" if value is None else repr(value)


class LogExists(EventLogError):
    """``create_log(..., exist_ok=False)`` found a log by that name."""

    code = ErrorCode.LOG_EXISTS


class EventTooLarge(EventLogError):
    """The event (data, type, content type and headers together) is over the size bound."""

    code = ErrorCode.EVENT_TOO_LARGE


class CapacityExceeded(EventLogError):
    """A configured bound on the number of logs or consumer groups was reached."""

    code = ErrorCode.CAPACITY_EXCEEDED


class EventLogUnavailable(EventLogError):
    """The broker did not answer after the bounded retries (down, restarting, unreachable)."""

    code = ErrorCode.EVENT_LOG_UNAVAILABLE


class BrokerError(EventLogError):
    """The broker answered with an error this library does not translate more precisely."""

    code = ErrorCode.BROKER_ERROR
