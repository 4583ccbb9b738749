"""Event logs for event sourcing: typed events appended to named logs, replayed from a
sequence or a time, consumed by durable consumer groups with explicit acks and redelivery.

`MemoryEventLog` is the embedded default (one process); `JetStreamEventLog` shares logs
between processes and survives broker restarts. Both pass one contract suite.
"""

from airlane.eventlog.base import (
    DEFAULT_ACK_WAIT_S,
    DEFAULT_MAX_EVENT_BYTES,
    JSON,
    MAX_BATCH_EVENTS,
    MAX_FETCH_EVENTS,
    MAX_READ_BYTES,
    MAX_READ_LIMIT,
    MAX_WAIT_S,
    ConsumerGroup,
    Delivery,
    EventLog,
    GroupInfo,
    LogInfo,
    LogLimits,
    NewEvent,
    Record,
    Validator,
    is_json_content_type,
)
from airlane.eventlog.errors import (
    BrokerError,
    CapacityExceeded,
    EventLogError,
    EventLogUnavailable,
    EventTooLarge,
    GroupNotFound,
    GroupSettingsConflict,
    InvalidLogName,
    InvalidRequest,
    LogExists,
    LogNotFound,
)
from airlane.eventlog.memory import MemoryEventLog, MemoryEventLogConfig

__all__ = [
    "DEFAULT_ACK_WAIT_S",
    "DEFAULT_MAX_EVENT_BYTES",
    "JSON",
    "MAX_BATCH_EVENTS",
    "MAX_FETCH_EVENTS",
    "MAX_READ_BYTES",
    "MAX_READ_LIMIT",
    "MAX_WAIT_S",
    "BrokerError",
    "CapacityExceeded",
    "ConsumerGroup",
    "Delivery",
    "EventLog",
    "EventLogError",
    "EventLogUnavailable",
    "EventTooLarge",
    "GroupInfo",
    "GroupNotFound",
    "GroupSettingsConflict",
    "InvalidLogName",
    "InvalidRequest",
    "JetStreamEventLog",
    "JetStreamEventLogConfig",
    "LogExists",
    "LogInfo",
    "LogLimits",
    "LogNotFound",
    "MemoryEventLog",
    "MemoryEventLogConfig",
    "NewEvent",
    "Record",
    "RetryPolicy",
    "Validator",
    "is_json_content_type",
]

_NATS_BACKED = {
    "JetStreamEventLog": "airlane.eventlog.jetstream",
    "JetStreamEventLogConfig": "airlane.eventlog.jetstream",
    "RetryPolicy": "airlane.eventlog.nats_retry",
}


def __getattr__(name: str) -> object:
    # These need the NATS client: imported when first asked for, so that the in-memory
    # default (and `import airlane`) does not load it.
    module = _NATS_BACKED.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
