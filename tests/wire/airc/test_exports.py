"""The public surface of airlane.wire.airc is deliberate: this list changes only on purpose."""

from __future__ import annotations

import airlane.wire.airc


def test_package_exports() -> None:
    assert sorted(airlane.wire.airc.__all__) == sorted(
        [
            *("AIRC_SUBPROTOCOL", "ANY_STREAM", "AUDIO_STREAMS", "HEADER_SIZE"),
            *("LOADTEST_ENCODER", "MAGIC", "MAX_PAYLOAD"),
            *("SIGNALLING_STREAM", "VERSION", "VIDEO_STREAMS"),
            *("Acknowledged", "AircConfig", "AircConnection", "AircError", "AircEvent"),
            *("AircProtocolError", "Auth", "Authenticated", "Cancel", "CancelStream"),
            *("Cancelled", "LaneSet", "SetLane"),
            *("ClockEstimator", "ClockSample", "ClockUpdated", "Close", "ConnectionClosed"),
            *("ConnectionStats", "Error", "ErrorCode", "Flags", "Frame", "FrameDecoder"),
            *("GapDetected", "GenAck", "GenRequest", "GoAway", "MessageReceived", "Open"),
            *("Opened", "RtcAnswer", "RtcCandidates", "RtcClose", "RtcOffer"),
            *("SendQueueFull", "SignalMessage", "SignalReceived", "SignalType"),
            *("TimeRequest", "TimeResponse", "clock_sample", "crc16", "decode_signal"),
            *("encode_frame", "encode_signal", "serial_add", "serial_diff", "serial_lt"),
        ]
    )
    for name in airlane.wire.airc.__all__:
        assert hasattr(airlane.wire.airc, name), name


def test_the_wire_package_stays_sans_io() -> None:
    """ARCHITECTURE.md: no asyncio, sockets or clocks in airlane.wire.airc."""
    import pathlib

    source = pathlib.Path(airlane.wire.airc.__file__).parent
    for path in source.glob("*.py"):
        text = path.read_text()
        for forbidden in ("import asyncio", "import socket", "import time", "monotonic("):
            assert forbidden not in text, f"{path.name} uses {forbidden}"
