"""The event log's public surface is deliberate."""

from __future__ import annotations

import importlib

import pytest

import airlane.eventlog
from airlane.core.errors import AirlaneError, ErrorCode

MODULES = [
    "airlane.eventlog",
    "airlane.eventlog.base",
    "airlane.eventlog.checks",
    "airlane.eventlog.errors",
    "airlane.eventlog.jetstream",
    "airlane.eventlog.jetstream_group",
    "airlane.eventlog.jetstream_pull",
    "airlane.eventlog.memory",
    "airlane.eventlog.memory_group",
    "airlane.eventlog.memory_log",
    "airlane.eventlog.nats_codec",
    "airlane.eventlog.nats_retry",
]


@pytest.mark.parametrize("name", MODULES)
def test_every_exported_name_exists_and_is_documented(name):
    module = importlib.import_module(name)
    assert module.__doc__
    for attr in module.__all__:
        value = getattr(module, attr)
        if callable(value):
            assert value.__doc__, f"{name}.{attr} has no docstring"


def test_package_exports():
    assert set(airlane.eventlog.__all__) == {
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
    }


def test_errors_carry_a_code_and_no_wire_knowledge():
    for name in airlane.eventlog.__all__:
        value = getattr(airlane.eventlog, name)
        if isinstance(value, type) and issubclass(value, airlane.eventlog.EventLogError):
            assert issubclass(value, AirlaneError) and isinstance(value.code, ErrorCode)
            assert not hasattr(value, "status")
