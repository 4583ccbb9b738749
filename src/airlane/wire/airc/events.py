"""What `airlane.wire.airc.connection.AircConnection` reports to its transport."""

from __future__ import annotations

from dataclasses import dataclass

from airlane.wire.airc.errors import ErrorCode
from airlane.wire.airc.signalling import SignalMessage

__all__ = [
    "Acknowledged",
    "AircEvent",
    "ClockUpdated",
    "ConnectionClosed",
    "GapDetected",
    "MessageReceived",
    "SignalReceived",
]


@dataclass(frozen=True, slots=True)
class MessageReceived:
    """A whole message (all its fragments, in order) arrived on a data stream."""

    stream_id: int
    data: bytes
    timestamp: int
    """The sender's clock (us since its session start, wrapping) on the message's last frame."""
    priority: bool


@dataclass(frozen=True, slots=True)
class SignalReceived:
    """A signalling message arrived on stream 255 (time and ``GOAWAY`` are handled inside)."""

    message: SignalMessage
    timestamp: int
    """The sender's clock on the message's last frame (``t1`` of a clock exchange)."""
    received_at: int
    """Our clock when it arrived (``t2``)."""


@dataclass(frozen=True, slots=True)
class GapDetected:
    """A frame arrived ahead of ``expected``: some frames are missing or reordered. They are
    held (within the reorder window) and the sender is told at once with a repeated ACK."""

    stream_id: int
    expected: int
    received: int


@dataclass(frozen=True, slots=True)
class Acknowledged:
    """The peer acknowledged ``stream_id`` up to ``seq``: the send window has room again."""

    stream_id: int
    seq: int


@dataclass(frozen=True, slots=True)
class ClockUpdated:
    """A clock exchange finished: the peer's clock is ours plus ``offset_us`` (best sample)."""

    offset_us: float
    delay_us: int


@dataclass(frozen=True, slots=True)
class ConnectionClosed:
    """The connection is over: by the peer's ``GOAWAY`` or by our own verdict on its input."""

    code: ErrorCode
    reason: str
    by_peer: bool


AircEvent = (
    MessageReceived | SignalReceived | GapDetected | Acknowledged | ClockUpdated | ConnectionClosed
)
"""Any of the above."""
