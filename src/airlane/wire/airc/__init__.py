"""AIRC v1.2: Airlane's compact binary frame protocol, sans-I/O (see docs/airc.md).

- `airlane.wire.airc.frame`: the 20-byte header, CRC-16/CCITT-FALSE, encoder and decoder;
- `airlane.wire.airc.signalling`: the messages of stream 255 (GEN_REQ, GEN_ACK, OPEN, ...);
- `airlane.wire.airc.connection`: `AircConnection`, the state machine (ordering, ACKs,
  retransmission, fragmentation, priority, clock offset);
- `airlane.wire.airc.serial` and `airlane.wire.airc.clock`: wrapping u32 arithmetic and
  NTP-style clock offsets.
"""

from airlane.wire.airc.clock import ClockEstimator, ClockSample, clock_sample
from airlane.wire.airc.config import AircConfig
from airlane.wire.airc.connection import AircConnection, ConnectionStats, SendQueueFull
from airlane.wire.airc.errors import AircError, AircProtocolError, ErrorCode
from airlane.wire.airc.events import (
    Acknowledged,
    AircEvent,
    ClockUpdated,
    ConnectionClosed,
    GapDetected,
    MessageReceived,
    SignalReceived,
)
from airlane.wire.airc.frame import (
    AIRC_SUBPROTOCOL,
    ANY_STREAM,
    AUDIO_STREAMS,
    HEADER_SIZE,
    LOADTEST_ENCODER,
    MAGIC,
    MAX_PAYLOAD,
    SIGNALLING_STREAM,
    VERSION,
    VIDEO_STREAMS,
    Flags,
    Frame,
    FrameDecoder,
    crc16,
    encode_frame,
)
from airlane.wire.airc.serial import serial_add, serial_diff, serial_lt
from airlane.wire.airc.signalling import (
    Auth,
    Authenticated,
    Cancel,
    Cancelled,
    Close,
    Error,
    GenAck,
    GenRequest,
    GoAway,
    Open,
    Opened,
    SignalMessage,
    SignalType,
    TimeRequest,
    TimeResponse,
    decode_signal,
    encode_signal,
)

__all__ = [
    "AIRC_SUBPROTOCOL",
    "ANY_STREAM",
    "AUDIO_STREAMS",
    "HEADER_SIZE",
    "LOADTEST_ENCODER",
    "MAGIC",
    "MAX_PAYLOAD",
    "SIGNALLING_STREAM",
    "VERSION",
    "VIDEO_STREAMS",
    "Acknowledged",
    "AircConfig",
    "AircConnection",
    "AircError",
    "AircEvent",
    "AircProtocolError",
    "Auth",
    "Authenticated",
    "Cancel",
    "Cancelled",
    "ClockEstimator",
    "ClockSample",
    "ClockUpdated",
    "Close",
    "ConnectionClosed",
    "ConnectionStats",
    "Error",
    "ErrorCode",
    "Flags",
    "Frame",
    "FrameDecoder",
    "GapDetected",
    "GenAck",
    "GenRequest",
    "GoAway",
    "MessageReceived",
    "Open",
    "Opened",
    "SendQueueFull",
    "SignalMessage",
    "SignalReceived",
    "SignalType",
    "TimeRequest",
    "TimeResponse",
    "clock_sample",
    "crc16",
    "decode_signal",
    "encode_frame",
    "encode_signal",
    "serial_add",
    "serial_diff",
    "serial_lt",
]
