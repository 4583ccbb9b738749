"""The usage ledger: what a stream cost and how it was delivered.

Every terminal event carries the ledger's report (docs/streams.md, "Usage ledger"):
prompt and completion tokens, tokens delivered to each subscriber, time to first token, and
the gateway's own added latency (from the moment the log accepted an event to the moment a
transport handed it to the socket), as a bounded histogram.
"""

from __future__ import annotations

import itertools
import math
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from typing import Any

__all__ = ["MAX_TRACKED_SUBSCRIBERS", "LatencyHistogram", "UsageLedger"]

MAX_TRACKED_SUBSCRIBERS = 256
"""Subscribers reported by name; later ones are summed under ``"others"`` to stay bounded."""

# Buckets: 8 per doubling of the latency in units of 1.024 us, from ~1 us to ~2^28 units
# (~275 s); bucket edges are 9% apart. observe() runs for every batch written.
_SUB_BITS = 3
_SUB = 1 << _SUB_BITS
_UNIT_SHIFT = 10
_OCTAVES = 28


def _upper_edge_ns(index: int) -> int:
    if index < _SUB:
        return (index + 1) << _UNIT_SHIFT
    width, sub = divmod(index + _SUB_BITS * _SUB, _SUB)
    return ((_SUB + sub + 1) << (width - _SUB_BITS - 1)) << _UNIT_SHIFT


# The first value of each bucket but the first: `bisect_right` over it finds a value's bucket
# (the top bucket takes everything above) with one C call instead of a dozen bytecodes.
_BUCKET_STARTS = [_upper_edge_ns(index) for index in range(_OCTAVES * _SUB - 1)]
# Each bucket's upper edge, looked up rather than computed when a report is made.
_UPPER_EDGES = [*_BUCKET_STARTS, _upper_edge_ns(_OCTAVES * _SUB - 1)]


@dataclass(slots=True)
class LatencyHistogram:
    """Log-bucketed latencies (1 us to minutes, 8 buckets per doubling): fixed memory, at most
    ~12% error on a quantile."""

    counts: list[int] = field(default_factory=lambda: [0] * (_OCTAVES * _SUB))
    total: int = 0
    sum_ns: int = 0
    max_ns: int = 0

    def observe(self, value_ns: int) -> None:
        """Record one latency in nanoseconds (negative values count as zero)."""
        value_ns = max(value_ns, 0)
        self.counts[bisect_right(_BUCKET_STARTS, value_ns)] += 1
        self.total += 1
        self.sum_ns += value_ns
        self.max_ns = max(self.max_ns, value_ns)

    def observe_n(self, value_ns: int, count: int) -> None:
        """Record ``count`` latencies of ``value_ns`` each (`observe` ``count`` times)."""
        if count <= 0:
            return
        if value_ns < 0:  # noqa: PLR1730 - a comparison is cheaper than max() here
            value_ns = 0
        self.counts[bisect_right(_BUCKET_STARTS, value_ns)] += count
        self.total += count
        self.sum_ns += value_ns * count
        if value_ns > self.max_ns:  # noqa: PLR1730
            self.max_ns = value_ns

    def observe_many(self, values_ns: list[int]) -> None:
        """Record several latencies at once (the same as `observe` for each, cheaper)."""
        counts = self.counts
        previous = index = -1
        for value in values_ns:
            if value < 0:  # noqa: PLR1730 - a comparison is cheaper than max() here
                value = 0  # noqa: PLW2901 - clamped like observe()
            # Events appended together and written together share one latency: one bucket.
            if value != previous:
                previous = value
                index = bisect_right(_BUCKET_STARTS, value)
                if value > self.max_ns:  # noqa: PLR1730
                    self.max_ns = value
            counts[index] += 1
            self.sum_ns += value
        self.total += len(values_ns)

    def quantile_ns(self, q: float) -> int:
        """The ``q`` quantile (0..1), as the upper edge of its bucket; 0 with no samples."""
        return self._quantiles_ns((q,))[0]

    def _quantiles_ns(self, qs: tuple[float, ...]) -> list[int]:
        if not self.total:
            return [0 for _ in qs]
        # No sample lies above max_ns's bucket: summing the counts up to it (typically half of
        # them) halves the cost of a report, which every stream pays when it ends.
        top = bisect_right(_BUCKET_STARTS, self.max_ns)
        cumulative = list(itertools.accumulate(self.counts[: top + 1]))
        out = []
        for q in qs:
            index = bisect_left(cumulative, max(1, math.ceil(q * self.total)))
            out.append(min(_UPPER_EDGES[index], self.max_ns))
        return out

    def summary_ms(self) -> dict[str, float]:
        """p50 / p99 / max / mean in milliseconds, rounded to microseconds."""
        if not self.total:  # a new stream's report: skip the arithmetic
            return {"p50": 0.0, "p99": 0.0, "max": 0.0, "mean": 0.0, "samples": 0}
        mean = self.sum_ns / self.total
        p50, p99 = self._quantiles_ns((0.50, 0.99))
        return {
            "p50": round(p50 / 1e6, 3),
            "p99": round(p99 / 1e6, 3),
            "max": round(self.max_ns / 1e6, 3),
            "mean": round(mean / 1e6, 3),
            "samples": self.total,
        }


@dataclass(slots=True)
class UsageLedger:
    """Token and latency accounting for one stream; all times are monotonic ns passed in."""

    created_ns: int
    """When the stream was created (the request arrived)."""
    prompt_tokens: int = 0
    """As reported by the backend."""
    completion_tokens: int = 0
    """As reported by the backend, or counted from appended events when it reports none."""
    first_token_ns: int | None = None
    """When the first text-carrying event was appended."""
    reported: bool = False
    """True once a backend reported its own token counts."""
    delivered: dict[str, int] = field(default_factory=dict)
    """Tokens each subscriber received live, as they were produced (bounded, see
    `MAX_TRACKED_SUBSCRIBERS`)."""
    replayed: dict[str, int] = field(default_factory=dict)
    """Tokens each subscriber read again from history (a resume, a late join)."""
    replayed_events: int = 0
    """Events written to readers from history (not counted as gateway latency)."""
    gateway_latency: LatencyHistogram = field(default_factory=LatencyHistogram)
    """Time events spent inside the gateway between being appended and a transport writing
    them to a reader that was there live (history replayed later is not latency)."""
    routing: dict[str, Any] | None = None
    """Where the generation ran and why, when a backend chose between several (the offload
    router, `airlane.backends.offload`)."""

    def on_append(self, tokens: int, now_ns: int) -> None:
        """Account for an appended event carrying ``tokens`` completion tokens."""
        if tokens and self.first_token_ns is None:
            self.first_token_ns = now_ns
        if not self.reported:
            self.completion_tokens += tokens

    def on_backend_usage(self, prompt_tokens: int, completion_tokens: int) -> None:
        """The backend's own counts replace the gateway's estimate."""
        self.prompt_tokens = prompt_tokens
        self.completion_tokens = completion_tokens
        self.reported = True

    def on_delivered(self, subscriber: str, tokens: int) -> None:
        """``tokens`` more tokens reached ``subscriber`` live."""
        _count(self.delivered, subscriber, tokens)

    def on_replayed(self, subscriber: str, tokens: int) -> None:
        """``subscriber`` read ``tokens`` more tokens again from history."""
        _count(self.replayed, subscriber, tokens)

    def report(self) -> dict[str, Any]:
        """The ledger as a JSON-compatible dict (OpenAI usage field names where they exist)."""
        ttft = None
        if self.first_token_ns is not None:
            ttft = round((self.first_token_ns - self.created_ns) / 1e6, 3)
        report: dict[str, Any] = {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "time_to_first_token_ms": ttft,
            "delivered_tokens": dict(self.delivered),
            "replayed_tokens": dict(self.replayed),
            "replayed_events": self.replayed_events,
            "gateway_latency_ms": self.gateway_latency.summary_ms(),
        }
        if self.routing is not None:
            report["routing"] = self.routing
        return report


def _count(counts: dict[str, int], subscriber: str, tokens: int) -> None:
    """Add ``tokens`` to ``subscriber``'s count (bounded: later ones go to ``others``)."""
    if subscriber in counts or len(counts) < MAX_TRACKED_SUBSCRIBERS:
        counts[subscriber] = counts.get(subscriber, 0) + tokens
    else:
        counts["others"] = counts.get("others", 0) + tokens
