"""Event logs for event sourcing: typed events appended to named logs, replayed from a
sequence or a time, consumed by durable consumer groups with explicit acks and redelivery.

`MemoryEventLog` is the embedded default (one process); `JetStreamEventLog` shares logs
between processes and survives broker restarts. Both pass one contract suite.
"""

from airlane.eventlog.base import (
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
    InvalidLogName,
    InvalidRequest,
    LogExists,
    LogNotFound,
)
from airlane.eventlog.jetstream import JetStreamEventLog, JetStreamEventLogConfig
from airlane.eventlog.memory import MemoryEventLog, MemoryEventLogConfig
from airlane.eventlog.nats_retry import RetryPolicy

__all__ = [
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
