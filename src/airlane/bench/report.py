"""Presenting results: a rich table (one column per transport) and a JSON document.

``--compare`` lays the same rows out per implementation (`airlane.bench.compare_report`).
"""

from __future__ import annotations

import math
import os
import platform
import sys
from collections.abc import Callable, Sequence
from typing import Any

from rich.table import Table

from airlane.bench.config import BenchConfig
from airlane.bench.cpu import CpuUsage
from airlane.bench.memory import describe_python
from airlane.bench.stats import TransportResult

__all__ = [
    "CLIENT_BOUND_PCT",
    "METRIC_ROWS",
    "bench_document",
    "client_bound",
    "results_table",
    "workload_title",
]

CLIENT_BOUND_PCT = 90.0
"""Client CPU (mean, % of one core) above which the client may be what limits the run."""


def client_bound(result: TransportResult) -> bool:
    """True if the load client was near a full core: the numbers may measure the client."""
    return result.client_cpu is not None and result.client_cpu.mean_pct >= CLIENT_BOUND_PCT


def results_table(config: BenchConfig, results: Sequence[TransportResult]) -> Table:
    """The results side by side."""
    table = Table(title=f"airlane bench: {workload_title(config)}")
    table.add_column("metric")
    for result in results:
        table.add_column(result.transport, justify="right")
    for label, cell in METRIC_ROWS:
        table.add_row(label, *(cell(r) for r in results))
    return table


def workload_title(config: BenchConfig) -> str:
    """``N streams x M chunks, mode`` (with the interval when paced)."""
    detail = f" every {config.interval_ms:g} ms" if config.mode == "paced" else ""
    return f"{config.streams} streams x {config.chunks} chunks, {config.mode}{detail}"


def _ms(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:,.2f}"


def _cpu(usage: CpuUsage | None) -> str:
    return "-" if usage is None else f"{usage.mean_pct:.0f} % (max {usage.max_pct:.0f})"


def _chunks(r: TransportResult) -> str:
    mark = "" if r.chunks_received == r.chunks_expected else " !"
    return f"{r.chunks_received:,} / {r.chunks_expected:,}{mark}"


def _kept_up(r: TransportResult) -> str:
    return "-" if r.kept_up_pct is None else f"{r.kept_up_pct:.1f} %"


MIN_CPU_WALL_S = 1.0
"""Runs shorter than this show no CPU figures: the kernel counts CPU time in 10 ms ticks, so a
run of milliseconds reads as 0 % (or 300 %)."""


def _measurable_cpu(r: TransportResult, usage: CpuUsage | None) -> str:
    return "-" if r.wall_s < MIN_CPU_WALL_S else _cpu(usage)


def _client(r: TransportResult) -> str:
    if r.wall_s < MIN_CPU_WALL_S:
        return "-"
    return _cpu(r.client_cpu) + (" (client-bound?)" if client_bound(r) else "")


METRIC_ROWS: list[tuple[str, Callable[[TransportResult], str]]] = [
    ("chunks received / expected", _chunks),
    ("errors", lambda r: f"{r.errors}" + (f" ({r.error_samples[0]})" if r.error_samples else "")),
    ("out-of-order chunks", lambda r: f"{r.out_of_order}"),
    ("TTFC p50 (ms)", lambda r: _ms(r.ttfc_ms.p50)),
    ("TTFC p95 (ms)", lambda r: _ms(r.ttfc_ms.p95)),
    ("TTFC p99 (ms)", lambda r: _ms(r.ttfc_ms.p99)),
    ("payload MB/s", lambda r: f"{r.payload_mb_s:,.1f}"),
    ("chunks/s", lambda r: f"{r.chunks_per_s:,.0f}"),
    ("delivery lag p50 (ms)", lambda r: _ms(r.lag_ms.p50)),
    ("delivery lag p99 (ms)", lambda r: _ms(r.lag_ms.p99)),
    (
        "  while all streams ran",
        lambda r: "-" if r.steady_lag_ms is None else _ms(r.steady_lag_ms.p99),
    ),
    ("kept up (paced)", _kept_up),
    ("server CPU", lambda r: _measurable_cpu(r, r.server_cpu)),
    ("client CPU", _client),
    ("VM steal", lambda r: "-" if r.steal_pct is None else f"{r.steal_pct:.1f} %"),
    ("Python step (ns)", lambda r: "-" if r.python_op_ns is None else f"{r.python_op_ns:.0f}"),
    ("wall time (s)", lambda r: f"{r.wall_s:.2f}"),
]
"""The table's rows: a label and how to render one result's cell."""


def bench_document(
    config: BenchConfig,
    results: Sequence[TransportResult],
    *,
    url: str,
    spawned: bool,
    pinning: dict[str, list[int]] | None,
) -> dict[str, Any]:
    """The JSON written by ``--json``."""
    from airlane import __version__

    return {
        "airlane_version": __version__,
        "url": url,
        "spawned": spawned,
        "cpu_pinning": pinning,
        "host": {
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            "python_build": describe_python(),
            "platform": platform.platform(),
        },
        "config": {
            "streams": config.streams,
            "chunks": config.chunks,
            "mode": config.mode,
            "interval_ms": config.interval_ms,
            "transports": list(config.transports),
            "timeout_s": config.timeout_s,
        },
        "results": [result.to_dict() for result in results],
    }
