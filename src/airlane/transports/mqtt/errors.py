"""The MQTT bridge's one error table: what it does with a message the gateway refuses.

A refusal that says the message itself cannot be stored (malformed, too large, against its
schema, not allowed) sends it to the dead-letter topic with the reason, and acknowledges it:
storing it again would fail again. A refusal that says "not now" (the hub is down or full,
the caller is over a quota) leaves it unacknowledged and the bridge tries again: the broker
keeps it meanwhile. Each code also has the MQTT 5 reason code the dead letter carries in its
``reason-code`` user property, for MQTT tools that know those codes.
"""

from __future__ import annotations

from collections.abc import Mapping

from airlane.core.errors import ErrorCode

__all__ = ["MQTT_REASON", "RETRIED", "ack_reason", "retried"]

RETRIED = frozenset(
    {
        ErrorCode.OVERLOADED,
        ErrorCode.HUB_FULL,
        ErrorCode.HUB_UNAVAILABLE,
        ErrorCode.HUB_ERROR,
        ErrorCode.SHUTTING_DOWN,
        ErrorCode.TOO_MANY_REQUESTS,
        ErrorCode.QUOTA_EXCEEDED,
        ErrorCode.CAPACITY_EXCEEDED,
        ErrorCode.EVENT_LOG_ERROR,
        ErrorCode.EVENT_LOG_UNAVAILABLE,
        ErrorCode.BROKER_ERROR,
        ErrorCode.REGISTRY_ERROR,
        ErrorCode.REGISTRY_UNAVAILABLE,
        ErrorCode.INTERNAL_ERROR,
    }
)
"""Codes after which the bridge keeps the message and stores it again later."""

_REASONS = {
    ErrorCode.UNAUTHENTICATED: 0x87,
    ErrorCode.PERMISSION_DENIED: 0x87,
    ErrorCode.EVENT_TOO_LARGE: 0x95,
    ErrorCode.BODY_TOO_LARGE: 0x95,
    ErrorCode.STREAM_TOO_LARGE: 0x97,
    ErrorCode.INVALID_JSON: 0x99,
    ErrorCode.SCHEMA_VIOLATION: 0x99,
    ErrorCode.UNKNOWN_EVENT_TYPE: 0x99,
    ErrorCode.INVALID_LOG_NAME: 0x90,
    ErrorCode.INVALID_STREAM_ID: 0x90,
}

MQTT_REASON: Mapping[ErrorCode, int] = {
    code: 0x97 if code in RETRIED else _REASONS.get(code, 0x83) for code in ErrorCode
}
"""The MQTT 5 reason code a dead letter names for each `ErrorCode` (0x83: implementation
specific error, for the codes MQTT has no word for)."""


_ACK_REASONS = frozenset({0x80, 0x83, 0x87, 0x90, 0x91, 0x97, 0x99})
"""The failure reason codes MQTT 5 allows in a PUBACK (section 3.4.2.1); any other is a
protocol error there."""


def ack_reason(code: ErrorCode) -> int:
    """The failure reason code the bridge refuses a QoS 1 message back to the broker with (in
    its PUBACK) when the message can be neither stored nor dead-lettered: `MQTT_REASON` where
    a PUBACK may carry it, else 0x83 (implementation specific error)."""
    reason = MQTT_REASON[code]
    return reason if reason in _ACK_REASONS else 0x83


def retried(code: ErrorCode) -> bool:
    """Whether a message refused with ``code`` is kept and stored again later."""
    return code in RETRIED
