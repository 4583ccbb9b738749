"""`StreamTally`: what the load client records per stream, cheaply, on the hot path."""

from __future__ import annotations

from array import array

__all__ = ["MAX_LAG_SAMPLES", "StreamTally", "lag_sampling_stride"]

MAX_LAG_SAMPLES = 2_000_000
"""Lag samples kept per run (16 MB): beyond that, every k-th chunk of each stream is sampled."""


def lag_sampling_stride(expected_chunks: int) -> int:
    """Sample every k-th chunk so that a run keeps at most `MAX_LAG_SAMPLES` lags."""
    return max(1, -(-expected_chunks // MAX_LAG_SAMPLES))


class StreamTally:
    """Counters of one stream; times are ``time.monotonic_ns()`` values."""

    __slots__ = (
        "disorder",
        "error",
        "finished",
        "first_ns",
        "first_ts",
        "lags",
        "last_ns",
        "last_ts",
        "next_seq",
        "payload_bytes",
        "received",
        "start_ns",
        "stride",
    )

    def __init__(self, lags: array[int], stride: int = 1) -> None:
        self.lags = lags
        """Shared sink of delivery lags (receive time - scheduled time), in ns."""
        self.stride = stride
        """Record the lag of every ``stride``-th chunk."""
        self.start_ns = 0
        """When the request was started (before connecting)."""
        self.first_ns = 0
        """When the first chunk arrived; 0 until then."""
        self.first_ts = 0
        """The first chunk's scheduled time."""
        self.last_ns = 0
        """When the latest chunk arrived."""
        self.last_ts = 0
        """The latest chunk's scheduled time."""
        self.received = 0
        """Chunks received."""
        self.payload_bytes = 0
        """Chunk JSON bytes received (without SSE or WebSocket framing)."""
        self.next_seq = 1
        """The seq expected next."""
        self.disorder = 0
        """Chunks whose seq was not the one expected (gaps, repeats, reordering)."""
        self.finished = False
        """True once the stream ended cleanly."""
        self.error: str | None = None
        """Why the stream failed, if it did."""

    def chunk(self, seq: int, ts: int, size: int, now_ns: int) -> None:
        """Record one chunk of ``size`` bytes, numbered ``seq``, scheduled at ``ts``."""
        self.received += 1
        self.payload_bytes += size
        if seq != self.next_seq:
            self.disorder += 1
        self.next_seq = seq + 1
        if not self.first_ns:
            self.first_ns, self.first_ts = now_ns, ts
        self.last_ns, self.last_ts = now_ns, ts
        if seq % self.stride == 0:
            self.lags.append(now_ns - ts)
