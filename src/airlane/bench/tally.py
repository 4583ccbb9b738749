"""`StreamTally`: what the load client records per stream, cheaply, on the hot path.

The parsers hand over each received buffer's chunks at once (`StreamTally.record`): a burst
delivers tens of chunks per read, and per-chunk Python calls would cost more than the gateway
spends sending them. The per-chunk work left (seq and ts to ``int``, the order check, the lags)
runs inside ``map``, list comparison and ``array.extend``.
"""

from __future__ import annotations

from array import array
from itertools import repeat
from operator import sub

__all__ = ["MAX_LAG_SAMPLES", "StreamTally", "lag_sampling_stride"]

MAX_LAG_SAMPLES = 2_000_000
"""Lag samples kept per run (16 MB): beyond that, every k-th chunk of each stream is sampled."""


_DIGITS_CACHED = 1 << 17
"""Seqs below this have their ASCII digits cached (7 MB when full; a stream has at most 100000
chunks, `airlane.bench.config.MAX_CHUNKS`)."""
_digits: list[bytes] = []


def _seq_digits(first: int, stop: int) -> list[bytes] | None:
    """``b"%d" % n`` for n in ``range(first, stop)``, or None past the cache. Comparing a
    buffer's seqs with these is cheaper than converting each seq to ``int``."""
    if stop > _DIGITS_CACHED:
        return None
    if stop > len(_digits):
        grown = min(_DIGITS_CACHED, max(stop, 2 * len(_digits)))
        _digits.extend(b"%d" % n for n in range(len(_digits), grown))
    return _digits[first:stop]


def lag_sampling_stride(expected_chunks: int) -> int:
    """Sample every k-th chunk so that a run keeps at most `MAX_LAG_SAMPLES` lags."""
    return max(1, -(-expected_chunks // MAX_LAG_SAMPLES))


class StreamTally:
    """Counters of one stream; times are ``time.monotonic_ns()`` values."""

    __slots__ = (
        "disorder",
        "error",
        "finished",
        "first_index",
        "first_ns",
        "first_ts",
        "lags",
        "last_index",
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
        self.first_index = -1
        """How many lags the shared sink held when this stream's first chunks arrived (-1
        until then): with `last_index`, where the samples taken while every stream was
        running begin and end (`airlane.bench.stats.steady_window`)."""
        self.last_index = 0
        """How many lags the shared sink held when this stream's latest chunks arrived."""
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

    def record(
        self, seqs: list[bytes], stamps: list[bytes], payload_bytes: int, now_ns: int
    ) -> None:
        """Record chunks that arrived together at ``now_ns``, in arrival order.

        ``seqs`` and ``stamps`` are the chunks' ``seq`` and ``ts`` as ASCII digits (at most
        `airlane.bench.chunk.MAX_DIGITS` each, as the parsers guarantee); ``payload_bytes``
        is their JSON size in all.
        """
        count = len(seqs)
        if not count:
            return
        expected = self.next_seq
        self.received += count
        self.payload_bytes += payload_bytes
        lags = self.lags
        self.last_index = len(lags)
        if not self.first_ns:
            self.first_ns, self.first_ts = now_ns, int(stamps[0])
            self.first_index = self.last_index
        self.last_ns, self.last_ts = now_ns, int(stamps[-1])
        stride = self.stride
        if _seq_digits(expected, expected + count) == seqs:
            self.next_seq = expected + count
            # In order, the chunks whose seq is a multiple of stride are every stride-th one.
            sampled = stamps if stride == 1 else stamps[-expected % stride :: stride]
        else:
            sampled = self._check_order(list(map(int, seqs)), stamps)
        lags.extend(map(sub, repeat(now_ns), map(int, sampled)))

    def _check_order(self, numbers: list[int], stamps: list[bytes]) -> list[bytes]:
        """Count out-of-order chunks one by one (as `chunk` does); the stamps to sample."""
        expected, stride, sampled = self.next_seq, self.stride, []
        for number, stamp in zip(numbers, stamps, strict=True):
            if number != expected:
                self.disorder += 1
            expected = number + 1
            if number % stride == 0:
                sampled.append(stamp)
        self.next_seq = expected
        return sampled

    def chunk(self, seq: int, ts: int, size: int, now_ns: int) -> None:
        """Record one chunk of ``size`` bytes, numbered ``seq``, scheduled at ``ts``."""
        self.received += 1
        self.payload_bytes += size
        if seq != self.next_seq:
            self.disorder += 1
        self.next_seq = seq + 1
        self.last_index = len(self.lags)
        if not self.first_ns:
            self.first_ns, self.first_ts = now_ns, ts
            self.first_index = self.last_index
        self.last_ns, self.last_ts = now_ns, ts
        if seq % self.stride == 0:
            self.lags.append(now_ns - ts)
