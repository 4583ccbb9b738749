"""Presenting ``airlane bench --compare``: one table with a column per implementation, and the
JSON document (``airlane bench``'s, for Airlane, plus every implementation and the ratios)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.table import Table

from airlane.bench.compare import ImplementationRun, Ratios, ratios
from airlane.bench.config import BenchConfig
from airlane.bench.report import METRIC_ROWS, bench_document, workload_title

__all__ = ["RATIO_LABELS", "RATIO_LEGEND", "compare_document", "compare_table"]

RATIO_LABELS = {
    "payload_mb_s": "airlane/peer: payload MB/s",
    "ttfc_p99_ms": "airlane/peer: TTFC p99",
    "lag_p99_ms": "airlane/peer: lag p99",
    "kept_up_pct": "airlane/peer: kept up",
}
"""The table's label of each of `airlane.bench.compare.RATIO_METRICS`."""

RATIO_LEGEND = (
    "ratios are airlane / peer: above 1 favours airlane for MB/s and kept up, below 1 for "
    "TTFC and lag"
)
"""The table's caption."""


def compare_table(config: BenchConfig, runs: Sequence[ImplementationRun]) -> Table:
    """The implementations that ran side by side, one section per transport; the first run is
    Airlane, whose numbers each peer's ratios are taken against."""
    ran = [run for run in runs if run.status == "ran"]
    table = Table(title=f"airlane bench --compare: {workload_title(config)}", caption=RATIO_LEGEND)
    table.add_column("metric")
    for run in ran:
        table.add_column(run.name, justify="right")
    airlane = runs[0]
    peer_ratios = [ratios(airlane, run) for run in ran[1:]]
    for index, transport in enumerate(config.transports):
        if index:
            table.add_section()
        table.add_row(f"[bold]{transport.upper()}[/bold]", *("" for _ in ran))
        results = [run.result(transport) for run in ran]
        for label, cell in METRIC_ROWS:
            table.add_row(label, *(cell(r) if r is not None else "-" for r in results))
        for metric, label in RATIO_LABELS.items():
            cells = [_ratio(found.get(transport, {}).get(metric)) for found in peer_ratios]
            table.add_row(label, "", *cells)
    return table


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def compare_document(
    config: BenchConfig, runs: Sequence[ImplementationRun], *, pinning: dict[str, list[int]] | None
) -> dict[str, Any]:
    """The JSON written by ``--compare --json``: ``airlane bench``'s document for Airlane (the
    first run), plus ``compare``: every implementation's run and the ratios per peer."""
    airlane = runs[0]
    document = bench_document(
        config, airlane.results, url=airlane.url or "", spawned=True, pinning=pinning
    )
    document["compare"] = {
        "baseline": airlane.name,
        "implementations": [run.to_dict() for run in runs],
        "ratios": {
            run.name: _rounded(ratios(airlane, run)) for run in runs[1:] if run.status == "ran"
        },
        "ratio_legend": RATIO_LEGEND,
    }
    return document


def _rounded(found: Ratios) -> Ratios:
    return {
        transport: {k: None if v is None else round(v, 4) for k, v in metrics.items()}
        for transport, metrics in found.items()
    }
