"""A plot for docs/performance.md from `cluster_fanout.py` reports (``--json FILE``).

    .venv/bin/python benchmarks/plot_cluster.py node.json stream.json --out cluster.png

For each report: server CPU per 1000 delivered chunks of every run in it (one gateway on the
in-memory hub, two nodes on the JetStream hub, ``--workers``), stacked by process (gateways,
broker), with the ratio to the single node of the same report above each bar; and the readers'
delivery lag p99 per node. Reports are labelled with their layout (``stream`` or ``node``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.patches import Patch

RUNS = (("memory", "one node"), ("jetstream", "two nodes"), ("workers", "--workers 2"))
BROKER = "nats-server"
GATEWAYS_COLOUR = "#4c72b0"
BROKER_COLOUR = "#dd8452"


Bar = tuple[str, dict[str, float], float, dict[str, float]]


def bars(reports: list[dict[str, Any]]) -> list[Bar]:
    """``(label, CPU per process, ratio to the single node, lag p99 per node)`` per bar."""
    rows = []
    for report in reports:
        layout = report["workload"].get("layout", "stream")
        single = sum(report["memory"]["cpu_ms_per_1000_chunks"].values())
        for key, name in RUNS:
            run = report.get(key)
            if run is None or (key == "memory" and rows and rows[0][0] == name):
                continue
            cpu = run["cpu_ms_per_1000_chunks"]
            label = name if key == "memory" else f"{name}\n({layout} layout)"
            lag = {node: stats["p99"] for node, stats in run["lag_ms"].items()}
            rows.append((label, cpu, sum(cpu.values()) / single, lag))
    return rows


def plot(reports: list[dict[str, Any]], out: Path) -> None:
    rows = bars(reports)
    workload = reports[0]["workload"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for index, (_, cpu, ratio, _) in enumerate(rows):
        gateways = sum(value for name, value in cpu.items() if name != BROKER)
        broker = cpu.get(BROKER, 0.0)
        left.bar(index, gateways, color=GATEWAYS_COLOUR)
        left.bar(index, broker, bottom=gateways, color=BROKER_COLOUR)
        left.text(index, gateways + broker + 0.5, f"{ratio:.2f}x", ha="center", fontsize=9)
    left.set_xticks(range(len(rows)), [row[0] for row in rows], fontsize=8)
    left.set_ylabel("server CPU, ms per 1000 chunks delivered")
    left.set_title("CPU (ratio to one node in the same run)", fontsize=10)
    left.legend(
        [Patch(color=GATEWAYS_COLOUR), Patch(color=BROKER_COLOUR)],
        ["gateway processes", "broker"],
        fontsize=8,
    )
    for index, (_, _, _, lag) in enumerate(rows):
        worst = max(lag.values()) if lag else 0.0
        right.bar(index, worst, color="#55a868")
        right.text(index, worst * 1.02, f"{worst:.0f}", ha="center", fontsize=9)
    right.set_xticks(range(len(rows)), [row[0] for row in rows], fontsize=8)
    right.set_ylabel("delivery lag p99, ms (worst node)")
    right.set_title("lag", fontsize=10)
    fig.suptitle(
        f"{workload['streams']} streams x {workload['chunks']} chunks, {workload['mode']}, "
        f"{workload['readers_per_stream']} readers each (one reader per stream on node B)",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    plot([json.loads(path.read_text()) for path in args.reports], args.out)


if __name__ == "__main__":
    main()
