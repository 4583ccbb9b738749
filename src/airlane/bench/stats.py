"""From per-stream tallies to one `TransportResult` per transport.

Definitions (all times on CLOCK_MONOTONIC, client and gateway on the same machine):

- time to first chunk (TTFC): first chunk received - request started (before connecting);
- payload MB/s: chunk JSON bytes received / wall time of the run, 1 MB = 10^6 bytes;
- delivery lag: chunk received - the chunk's ``ts`` (its scheduled send time in paced mode,
  its creation time in burst mode);
- kept up (paced mode): the delivered chunk rate as a percentage of the target rate, summed
  over streams: ``sum(received - 1) * interval / sum(last received - first ts)``. A gateway
  that keeps pace scores just under 100 % (the last chunk's lag is in the denominator); one
  that falls behind scores proportionally less. Streams with fewer than two chunks have no
  rate and are left out: lost chunks and streams are reported as errors.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from airlane.bench.config import BenchConfig
from airlane.bench.cpu import CpuUsage
from airlane.bench.tally import StreamTally

__all__ = [
    "MAX_ERROR_SAMPLES",
    "Percentiles",
    "TransportResult",
    "percentile",
    "steady_window",
    "summarize",
]

MAX_ERROR_SAMPLES = 5
"""Distinct error messages kept in a result."""


def percentile(ordered: Sequence[float], q: float) -> float:
    """The nearest-rank ``q``-th percentile of ascending ``ordered``; NaN if it is empty."""
    if not ordered:
        return math.nan
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return float(ordered[min(rank, len(ordered)) - 1])


@dataclass(frozen=True, slots=True)
class Percentiles:
    """A distribution summarised, in milliseconds."""

    p50: float
    p95: float
    p99: float
    max: float
    count: int

    @classmethod
    def of(cls, ordered: Sequence[float]) -> Percentiles:
        """Summarise ascending values."""
        top = float(ordered[-1]) if ordered else math.nan
        p50, p95, p99 = (percentile(ordered, q) for q in (50, 95, 99))
        return cls(p50, p95, p99, top, len(ordered))

    def to_dict(self) -> dict[str, float | int | None]:
        """JSON form (NaN becomes null)."""
        values = {"p50": self.p50, "p95": self.p95, "p99": self.p99, "max": self.max}
        out: dict[str, float | int | None] = {
            k: None if math.isnan(v) else round(v, 3) for k, v in values.items()
        }
        out["count"] = self.count
        return out


@dataclass(slots=True)
class TransportResult:
    """What one transport's run measured."""

    transport: str
    config: BenchConfig
    wall_s: float
    chunks_expected: int
    chunks_received: int
    streams_completed: int
    errors: int
    error_samples: list[str]
    out_of_order: int
    payload_bytes: int
    ttfc_ms: Percentiles
    lag_ms: Percentiles
    kept_up_pct: float | None
    server_cpu: CpuUsage | None = None
    client_cpu: CpuUsage | None = None
    steady_lag_ms: Percentiles | None = None
    """Delivery lag of the chunks that arrived while every stream was running (after the
    last stream's first chunk, before the first stream's last): the run without its start and
    end. None when no chunk arrived in that window."""
    steal_pct: float | None = None
    """The virtual machine's steal over the run, in per cent of all its CPU time
    (`airlane.bench.cpu.CpuSampler.steal_pct`); None where it is not reported."""
    python_op_ns: float | None = None
    """How fast the machine ran Python just before the run: `airlane.bench.speed`'s probe,
    nanoseconds per step on the client's core (lower is faster); None if not taken."""
    ttfc_samples_ms: list[float] = field(default_factory=list, repr=False)
    lag_samples_ms: list[float] = field(default_factory=list, repr=False)

    @property
    def payload_mb_s(self) -> float:
        """Chunk bytes per second of wall time, in 10^6 bytes."""
        return self.payload_bytes / 1e6 / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def chunks_per_s(self) -> float:
        """Chunks per second of wall time."""
        return self.chunks_received / self.wall_s if self.wall_s > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON form (samples left out; percentiles in)."""
        return {
            "transport": self.transport,
            "streams": self.config.streams,
            "chunks_per_stream": self.config.chunks,
            "mode": self.config.mode,
            "interval_ms": self.config.interval_ms,
            "wall_s": round(self.wall_s, 4),
            "chunks_expected": self.chunks_expected,
            "chunks_received": self.chunks_received,
            "streams_completed": self.streams_completed,
            "errors": self.errors,
            "error_samples": self.error_samples,
            "out_of_order": self.out_of_order,
            "payload_bytes": self.payload_bytes,
            "payload_mb_s": round(self.payload_mb_s, 3),
            "chunks_per_s": round(self.chunks_per_s, 1),
            "ttfc_ms": self.ttfc_ms.to_dict(),
            "lag_ms": self.lag_ms.to_dict(),
            "steady_lag_ms": None if self.steady_lag_ms is None else self.steady_lag_ms.to_dict(),
            "kept_up_pct": None if self.kept_up_pct is None else round(self.kept_up_pct, 2),
            "server_cpu": self.server_cpu.to_dict() if self.server_cpu else None,
            "client_cpu": self.client_cpu.to_dict() if self.client_cpu else None,
            "steal_pct": None if self.steal_pct is None else round(self.steal_pct, 2),
            "python_op_ns": None if self.python_op_ns is None else round(self.python_op_ns, 1),
        }


def summarize(
    transport: str,
    config: BenchConfig,
    tallies: Sequence[StreamTally],
    lags_ns: array[int],
    wall_ns: int,
) -> TransportResult:
    """Fold one run's tallies into a result (CPU use is filled in by the caller)."""
    ttfc = sorted((t.first_ns - t.start_ns) / 1e6 for t in tallies if t.first_ns)
    lags = sorted(lag / 1e6 for lag in lags_ns)
    failed = [t for t in tallies if t.error is not None or t.received != config.chunks]
    samples: list[str] = []
    for tally in failed:
        message = tally.error or f"stream ended after {tally.received} of {config.chunks} chunks"
        if message not in samples and len(samples) < MAX_ERROR_SAMPLES:
            samples.append(message)
    return TransportResult(
        transport=transport,
        config=config,
        wall_s=wall_ns / 1e9,
        chunks_expected=config.expected_chunks,
        chunks_received=sum(t.received for t in tallies),
        streams_completed=sum(1 for t in tallies if t.finished and t.received == config.chunks),
        errors=len(failed),
        error_samples=samples,
        out_of_order=sum(t.disorder for t in tallies),
        payload_bytes=sum(t.payload_bytes for t in tallies),
        ttfc_ms=Percentiles.of(ttfc),
        lag_ms=Percentiles.of(lags),
        kept_up_pct=_kept_up(config, tallies),
        steady_lag_ms=_steady_lag(tallies, lags_ns),
        ttfc_samples_ms=ttfc,
        lag_samples_ms=lags,
    )


def steady_window(tallies: Sequence[StreamTally]) -> tuple[int, int] | None:
    """The slice of the shared lag samples taken while every stream was running: from the
    last stream's first chunks to the first stream's last ones (the sink is filled in arrival
    order). None if some stream got nothing, or the streams never all ran at once."""
    if not tallies or any(t.first_index < 0 for t in tallies):
        return None
    start = max(t.first_index for t in tallies)
    end = min(t.last_index for t in tallies)
    return (start, end) if end > start else None


def _steady_lag(tallies: Sequence[StreamTally], lags_ns: array[int]) -> Percentiles | None:
    window = steady_window(tallies)
    if window is None:
        return None
    start, end = window
    return Percentiles.of(sorted(lag / 1e6 for lag in lags_ns[start:end]))


def _kept_up(config: BenchConfig, tallies: Sequence[StreamTally]) -> float | None:
    if config.mode != "paced":
        return None
    delivered = sum(t.received - 1 for t in tallies if t.received > 1)
    spent_ns = sum(t.last_ns - t.first_ts for t in tallies if t.received > 1)
    if spent_ns <= 0:
        return None
    return 100.0 * delivered * config.interval_ms * 1e6 / spent_ns
