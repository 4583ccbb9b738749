"""The receiving half of one AIRC stream: ordering, duplicates, gaps and reassembly."""

from __future__ import annotations

from airlane.wire.airc.errors import AircProtocolError, ErrorCode
from airlane.wire.airc.frame import EOM_BIT, PRIORITY_BIT, Frame
from airlane.wire.airc.serial import serial_add, serial_diff

__all__ = ["FIRST_SEQ", "Arrival", "ReceiveStream"]

FIRST_SEQ = 1
"""The seq of the first frame on every stream (an ACK of 0 acknowledges nothing)."""


class Arrival:
    """How `ReceiveStream.accept` classified a frame."""

    IN_ORDER = 0
    """Delivered (with any held frames it unblocked)."""
    DUPLICATE = 1
    """Already seen: dropped."""
    AHEAD = 2
    """Held until the gap before it fills."""
    BEYOND_WINDOW = 3
    """Too far ahead to hold: dropped; the sender will retransmit it."""


class ReceiveStream:
    """Frames of one stream in, whole messages out, in seq order, each exactly once.

    Holds at most ``window`` frames ahead of a gap and one partial message of at most
    ``max_message`` bytes.
    """

    __slots__ = (
        "_held",
        "_partial",
        "_partial_priority",
        "buffered",
        "expected",
        "max_message",
        "since_ack",
        "window",
    )

    def __init__(self, window: int, max_message: int) -> None:
        self.window = window
        self.max_message = max_message
        self.expected = FIRST_SEQ
        """The next seq to deliver; ``expected - 1`` is the cumulative ACK."""
        self.since_ack = 0
        """Frames delivered since the last ACK went out (the connection resets it)."""
        self.buffered = 0
        """Payload bytes held: frames ahead of a gap plus the partial message."""
        self._held: dict[int, Frame] = {}
        self._partial = bytearray()
        self._partial_priority = False

    @property
    def cumulative_ack(self) -> int:
        """The highest seq up to which everything has arrived."""
        return serial_add(self.expected, -1)

    @property
    def held(self) -> int:
        """Frames waiting for a gap to fill."""
        return len(self._held)

    def accept(self, frame: Frame, out: list[tuple[bytes, int, bool]]) -> int:
        """Take ``frame``; append each message it completes to ``out`` as
        ``(data, timestamp, priority)``; return its `Arrival` class."""
        ahead = serial_diff(frame.seq, self.expected)
        if ahead < 0 or frame.seq in self._held:
            return Arrival.DUPLICATE
        if ahead >= self.window:
            return Arrival.BEYOND_WINDOW
        if ahead > 0:
            self._held[frame.seq] = frame
            self.buffered += len(frame.payload)
            return Arrival.AHEAD
        self._deliver(frame, out)
        held = self._held
        while held:
            following = held.pop(self.expected, None)
            if following is None:
                break
            self.buffered -= len(following.payload)
            self._deliver(following, out)
        return Arrival.IN_ORDER

    def _deliver(self, frame: Frame, out: list[tuple[bytes, int, bool]]) -> None:
        self.expected = serial_add(self.expected, 1)
        self.since_ack += 1
        partial = self._partial
        if len(partial) + len(frame.payload) > self.max_message:
            raise AircProtocolError(
                ErrorCode.MESSAGE_TOO_LARGE,
                f"message on stream {frame.stream_id} exceeds {self.max_message} bytes",
            )
        priority = bool(frame.flags & PRIORITY_BIT) or self._partial_priority
        if not frame.flags & EOM_BIT:
            partial += frame.payload
            self.buffered += len(frame.payload)
            self._partial_priority = priority
            return
        if partial:
            data = bytes(partial + frame.payload)
            self.buffered -= len(partial)
            partial.clear()
            self._partial_priority = False
        else:
            data = frame.payload
        out.append((data, frame.timestamp, priority))
