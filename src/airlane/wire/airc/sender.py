"""The sending half of one AIRC stream, and the round-trip estimator its timers use."""

from __future__ import annotations

from collections import deque

from airlane.wire.airc.errors import AircProtocolError, ErrorCode
from airlane.wire.airc.receiver import FIRST_SEQ
from airlane.wire.airc.serial import serial_add, serial_diff

__all__ = ["InFlight", "RttEstimator", "SendStream"]


class RttEstimator:
    """Smoothed round-trip time and the retransmission timeout (RFC 6298, section 2)."""

    __slots__ = ("max_rto", "min_rto", "rto", "rttvar", "srtt")

    def __init__(self, initial_rto: float, min_rto: float, max_rto: float) -> None:
        self.srtt: float | None = None
        self.rttvar = 0.0
        self.rto = initial_rto
        self.min_rto = min_rto
        self.max_rto = max_rto

    def observe(self, rtt: float) -> None:
        """Fold in one round trip measured on a frame sent once (Karn's rule)."""
        if self.srtt is None:
            self.srtt, self.rttvar = rtt, rtt / 2
        else:
            self.rttvar = 0.75 * self.rttvar + 0.25 * abs(self.srtt - rtt)
            self.srtt = 0.875 * self.srtt + 0.125 * rtt
        self.rto = min(self.max_rto, max(self.min_rto, self.srtt + 4 * self.rttvar))

    def backoff(self, retries: int) -> float:
        """The timeout after ``retries`` retransmissions of one frame (doubling, capped)."""
        return min(self.max_rto, self.rto * (1 << min(retries, 16)))


class InFlight:
    """A frame sent and not yet acknowledged: its bytes, for retransmission."""

    __slots__ = ("acknowledged", "data", "deadline", "retries", "sent_at", "seq")

    def __init__(self, seq: int, data: bytes, sent_at: float, deadline: float) -> None:
        self.seq = seq
        self.data = data
        self.sent_at = sent_at
        self.deadline = deadline
        self.retries = 0
        self.acknowledged = False


class SendStream:
    """Fragments waiting for the window, and frames waiting for their ACK, of one stream.

    At most ``window`` frames are in flight; the connection bounds the queued bytes.
    """

    __slots__ = ("dup_acks", "in_flight", "next_seq", "queue", "queued_bytes", "window")

    def __init__(self, window: int) -> None:
        self.window = window
        self.next_seq = FIRST_SEQ
        self.queue: deque[tuple[bytes, int]] = deque()  # (fragment, flag bits)
        self.queued_bytes = 0
        self.in_flight: deque[InFlight] = deque()
        self.dup_acks = 0

    @property
    def window_open(self) -> bool:
        """True if another frame may be sent now."""
        return len(self.in_flight) < self.window

    @property
    def last_sent(self) -> int:
        """The seq of the last frame sent (``FIRST_SEQ - 1`` before any)."""
        return serial_add(self.next_seq, -1)

    def take_seq(self) -> int:
        """The seq for the next frame sent."""
        seq = self.next_seq
        self.next_seq = serial_add(seq, 1)
        return seq

    def acknowledge(self, stream_id: int, ack: int) -> list[InFlight]:
        """Drop the frames ``ack`` covers and return them (oldest first); a repeated ACK
        returns nothing and counts toward a fast retransmit."""
        if serial_diff(ack, self.last_sent) > 0:
            raise AircProtocolError(
                ErrorCode.FLOW_CONTROL,
                f"ACK of seq {ack} on stream {stream_id}, but only {self.last_sent} was sent",
            )
        acked: list[InFlight] = []
        in_flight = self.in_flight
        while in_flight and serial_diff(in_flight[0].seq, ack) <= 0:
            frame = in_flight.popleft()
            frame.acknowledged = True
            acked.append(frame)
        if acked:
            self.dup_acks = 0
        elif in_flight:
            self.dup_acks += 1
        return acked
