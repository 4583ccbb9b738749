"""``airlane bench --compare --runs K``: every server measured K times, summarised.

On the VMs these benchmarks run on, the machine's speed changes from minute to minute, so a
ratio between two single runs minutes apart says as much about the machine as about the
servers. With K rounds, each round measures every server once, in alternating order
(`airlane.bench.compare.run_compare_rounds`), and a ratio is taken within a round, between
runs made minutes apart at most, then summarised over the rounds: median and range of the
per-round ratios (a paired comparison), beside each server's own medians and ranges
(`airlane.bench.rounds`). Only rounds where both runs were clean count towards a ratio.

`compare_rounds_table` prints it; `compare_rounds_document` is the JSON.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.table import Table

from airlane.bench.compare import RATIO_METRICS, ImplementationRun, ratios, round_order
from airlane.bench.compare_report import RATIO_LABELS, RATIO_LEGEND
from airlane.bench.config import BenchConfig
from airlane.bench.report import bench_document, workload_title
from airlane.bench.rounds import SUMMARY_METRICS, clean, spread, summarize_rounds

__all__ = [
    "compare_rounds_document",
    "compare_rounds_table",
    "ratio_summary",
    "server_summary",
]

Round = Sequence[ImplementationRun]
"""One round: every implementation's run, Airlane first, in the order they were given."""


def server_summary(rounds: Sequence[Round]) -> dict[str, dict[str, Any]]:
    """Each implementation that ran at least once: `airlane.bench.rounds.summarize_rounds`
    over its runs (per transport: clean runs, and each number's median and range)."""
    summary: dict[str, dict[str, Any]] = {}
    for position, run in enumerate(rounds[0]):
        ran = [round_[position].results for round_ in rounds if round_[position].status == "ran"]
        if ran:
            summary[run.name] = summarize_rounds(ran)
    return summary


def ratio_summary(rounds: Sequence[Round]) -> dict[str, dict[str, dict[str, Any]]]:
    """``{peer: {transport: {metric: stats}}}``: Airlane / peer taken within each round where
    both ran that transport cleanly, then ``{"median", "min", "max", "rounds"}`` over those
    rounds (None for a metric no such round has, such as kept-up in burst mode)."""
    found: dict[str, dict[str, dict[str, list[float]]]] = {}
    for round_ in rounds:
        airlane = round_[0]
        if airlane.status != "ran":
            continue
        for peer in round_[1:]:
            if peer.status != "ran":
                continue
            paired = ratios(_clean_only(airlane), _clean_only(peer))
            for transport, metrics in paired.items():
                into = found.setdefault(peer.name, {}).setdefault(transport, {})
                for metric, value in metrics.items():
                    values = into.setdefault(metric, [])
                    if value is not None:
                        values.append(value)
    return {
        peer: {
            transport: {metric: _stats(values) for metric, values in metrics.items()}
            for transport, metrics in transports.items()
        }
        for peer, transports in found.items()
    }


def _clean_only(run: ImplementationRun) -> ImplementationRun:
    """``run`` with its unclean results left out: their numbers measure something else."""
    results = [result for result in run.results if clean(result)]
    return ImplementationRun(run.implementation, run.status, run.reason, results=results)


def _stats(values: list[float]) -> dict[str, Any] | None:
    found = spread(values, digits=4)
    return None if found is None else {**found, "rounds": len(values)}


def compare_rounds_table(config: BenchConfig, rounds: Sequence[Round]) -> Table:
    """One column per implementation that ran, one section per transport: each number's
    median (range) over the rounds, then each peer's per-round ratios' median (range)."""
    servers = server_summary(rounds)
    peer_ratios = ratio_summary(rounds)
    names = list(servers)
    table = Table(
        title=f"airlane bench --compare: {workload_title(config)}, {len(rounds)} rounds",
        caption=f"median (range) over the rounds; {RATIO_LEGEND}, taken within each round",
    )
    table.add_column("median (range)")
    for name in names:
        table.add_column(name, justify="right")
    for index, transport in enumerate(config.transports):
        if index:
            table.add_section()
        table.add_row(f"[bold]{transport.upper()}[/bold]", *("" for _ in names))
        summaries = [servers[name].get(transport) for name in names]
        table.add_row(
            "clean runs",
            *("-" if s is None else f"{s['clean_runs']} of {s['runs']}" for s in summaries),
        )
        for key, label, _ in SUMMARY_METRICS:
            table.add_row(label, *("-" if s is None else _cell(s[key]) for s in summaries))
        for metric, label in RATIO_LABELS.items():
            cells = [
                _ratio_cell(peer_ratios.get(name, {}).get(transport, {}).get(metric))
                for name in names[1:]
            ]
            table.add_row(label, "", *cells)
    return table


def _cell(stats: dict[str, float] | None) -> str:
    if stats is None:
        return "-"
    return f"{stats['median']:,.1f} ({stats['min']:,.1f}-{stats['max']:,.1f})"


def _ratio_cell(stats: dict[str, Any] | None) -> str:
    if stats is None:
        return "-"
    return f"{stats['median']:.2f}x ({stats['min']:.2f}-{stats['max']:.2f})"


def compare_rounds_document(
    config: BenchConfig, rounds: Sequence[Round], *, pinning: dict[str, list[int]] | None
) -> dict[str, Any]:
    """The JSON of ``--compare --runs K``: ``airlane bench --runs K``'s document for Airlane
    (every run, numbered, and its ``summary``), plus ``compare``: each implementation with
    its run of every round, each one's summary, the order each round measured them in, and
    the ratios' summaries per peer."""
    airlane_runs = [round_[0] for round_ in rounds]
    results = [result for run in airlane_runs for result in run.results]
    document = bench_document(
        config, results, url=airlane_runs[0].url or "", spawned=True, pinning=pinning
    )
    document["config"]["runs"] = len(rounds)
    numbers = [number for number, run in enumerate(airlane_runs, 1) for _ in run.results]
    for entry, number in zip(document["results"], numbers, strict=True):
        entry["run"] = number
    document["summary"] = summarize_rounds([run.results for run in airlane_runs if run.results])
    names = [run.name for run in rounds[0]]
    document["compare"] = {
        "baseline": names[0],
        "rounds": len(rounds),
        "order": [[names[p] for p in round_order(len(names), i)] for i in range(len(rounds))],
        "implementations": [
            {
                "name": run.name,
                "description": run.implementation.description,
                "runs": [
                    {"round": number, **round_[position].to_dict()}
                    for number, round_ in enumerate(rounds, 1)
                ],
            }
            for position, run in enumerate(rounds[0])
        ],
        "summary": server_summary(rounds),
        "ratios": ratio_summary(rounds),
        "ratio_legend": RATIO_LEGEND,
        "ratio_metrics": list(RATIO_METRICS),
    }
    return document
