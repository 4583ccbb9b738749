"""Repeated runs of one workload, summarised: ``airlane bench --runs K``.

On the VMs these benchmarks run on, one run of a workload can differ from the next by a
third or more (docs/performance.md, Method): the machine's speed changes within seconds. K
runs against the same gateway, one after the other, and the median of each number with its
range say more than any one of them. A run with errors, chunks missing or chunks out of order
is counted apart and left out of the medians: its numbers measure something else.

`summarize_rounds` gives the numbers (the JSON's ``summary``); `rounds_table` the table.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from typing import Any

from rich.table import Table

from airlane.bench.config import BenchConfig
from airlane.bench.report import workload_title
from airlane.bench.stats import TransportResult

__all__ = ["SUMMARY_METRICS", "clean", "rounds_table", "spread", "summarize_rounds"]


def _number(value: float | None) -> float | None:
    return None if value is None or math.isnan(value) else value


SUMMARY_METRICS: tuple[tuple[str, str, Callable[[TransportResult], float | None]], ...] = (
    ("payload_mb_s", "payload MB/s", lambda r: r.payload_mb_s),
    ("ttfc_p99_ms", "TTFC p99 (ms)", lambda r: _number(r.ttfc_ms.p99)),
    ("lag_p99_ms", "delivery lag p99 (ms)", lambda r: _number(r.lag_ms.p99)),
    (
        "steady_lag_p99_ms",
        "  while all streams ran",
        lambda r: None if r.steady_lag_ms is None else _number(r.steady_lag_ms.p99),
    ),
    ("kept_up_pct", "kept up (paced, %)", lambda r: r.kept_up_pct),
    ("server_cpu_pct", "server CPU (%)", lambda r: r.server_cpu.mean_pct if r.server_cpu else None),
    ("steal_pct", "VM steal (%)", lambda r: r.steal_pct),
    ("python_op_ns", "Python step (ns)", lambda r: r.python_op_ns),
)
"""What the summary gives for each transport: a JSON key, a row label, and the number."""


def spread(values: Sequence[float], digits: int = 3) -> dict[str, float] | None:
    """``{"median", "min", "max"}`` of ``values``, rounded to ``digits``; None if empty."""
    if not values:
        return None
    return {
        "median": round(statistics.median(values), digits),
        "min": round(min(values), digits),
        "max": round(max(values), digits),
    }


def clean(result: TransportResult) -> bool:
    """True if a run's numbers can be trusted: no errors, every chunk, in order."""
    return (
        result.errors == 0
        and result.out_of_order == 0
        and result.chunks_received == result.chunks_expected
    )


def summarize_rounds(rounds: Sequence[Sequence[TransportResult]]) -> dict[str, Any]:
    """Per transport: how many runs were clean, and for each of `SUMMARY_METRICS` the median,
    lowest and highest over the clean runs (None where no clean run has the number)."""
    by_transport: dict[str, list[TransportResult]] = {}
    for results in rounds:
        for result in results:
            by_transport.setdefault(result.transport, []).append(result)
    summary: dict[str, Any] = {}
    for transport, results in by_transport.items():
        kept = [r for r in results if clean(r)]
        metrics: dict[str, dict[str, float] | None] = {}
        for key, _, value in SUMMARY_METRICS:
            values = [v for v in (value(r) for r in kept) if v is not None]
            metrics[key] = spread(values)
        summary[transport] = {"runs": len(results), "clean_runs": len(kept), **metrics}
    return summary


def rounds_table(config: BenchConfig, rounds: Sequence[Sequence[TransportResult]]) -> Table:
    """The summary as a table: one column per transport, "median (lowest-highest)" cells."""
    summary = summarize_rounds(rounds)
    table = Table(title=f"airlane bench: {workload_title(config)}, {len(rounds)} runs")
    table.add_column("median (range)")
    for transport in summary:
        table.add_column(transport, justify="right")
    table.add_row("clean runs", *(f"{s['clean_runs']} of {s['runs']}" for s in summary.values()))
    for key, label, _ in SUMMARY_METRICS:
        table.add_row(label, *(_cell(s[key]) for s in summary.values()))
    return table


def _cell(stats: dict[str, float] | None) -> str:
    if stats is None:
        return "-"
    return f"{stats['median']:,.1f} ({stats['min']:,.1f}-{stats['max']:,.1f})"
