"""Limits and timers of an AIRC connection; every buffer in it is bounded by one of these."""

from __future__ import annotations

from dataclasses import dataclass

from airlane.wire.airc.frame import MAX_PAYLOAD

__all__ = ["AircConfig"]


@dataclass(frozen=True, slots=True)
class AircConfig:
    """Settings of one `airlane.wire.airc.connection.AircConnection`."""

    max_frame_payload: int = 16 * 1024
    """Largest payload this side puts in one frame; longer messages are fragmented (EOM)."""
    max_receive_payload: int = MAX_PAYLOAD
    """Largest frame payload accepted from the peer."""
    max_message_size: int = 1 << 20
    """Largest reassembled message accepted from the peer."""
    send_window: int = 64
    """Unacknowledged frames per stream (the pending-ACK window)."""
    max_queued_bytes: int = 4 << 20
    """Bytes waiting for a send window, whole connection."""
    reorder_window: int = 64
    """Frames held ahead of a gap, per stream; frames further ahead are dropped (and resent)."""
    max_receive_buffer: int = 8 << 20
    """Bytes held for the peer, whole connection: frames ahead of gaps plus partial messages
    (the per-stream bounds alone would multiply by ``max_streams``)."""
    max_streams: int = 4096
    """Distinct StreamIDs one connection may use in each direction (signalling not counted).
    A StreamID's state lives as long as the connection, so that its seqs continue if it is
    used again; a session reuses freed StreamIDs."""
    ack_every: int = 16
    """An ACK goes out after this many frames on a stream ..."""
    ack_delay: float = 0.01
    """... or this many seconds after the first unacknowledged one, whichever comes first."""
    initial_rto: float = 1.0
    """Retransmission timeout before any round trip was measured (RFC 6298's 1 s)."""
    min_rto: float = 0.2
    """Lower bound of the retransmission timeout."""
    max_rto: float = 8.0
    """Upper bound of the retransmission timeout, backoff included."""
    max_retransmits: int = 6
    """Retransmissions of one frame before the peer is declared unresponsive."""

    def __post_init__(self) -> None:
        if not 1 <= self.max_frame_payload <= MAX_PAYLOAD:
            raise ValueError(f"max_frame_payload must be in 1..{MAX_PAYLOAD}")
        if not 0 <= self.max_receive_payload <= MAX_PAYLOAD:
            raise ValueError(f"max_receive_payload must be in 0..{MAX_PAYLOAD}")
        for name in (
            "send_window",
            "reorder_window",
            "max_streams",
            "ack_every",
            "max_receive_buffer",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1")
        if not 0 < self.min_rto <= self.initial_rto <= self.max_rto:
            raise ValueError("need 0 < min_rto <= initial_rto <= max_rto")
