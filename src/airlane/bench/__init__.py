"""Reproducible load benchmarks of a gateway: ``airlane bench``.

The pieces: `BenchConfig` (the workload), lean load clients for SSE (`airlane.bench.sse_load`,
an asyncio ``Protocol`` with a sans-I/O parser), WebSocket (`airlane.bench.ws_load`) and AIRC
over TCP or WebSocket (`airlane.bench.airc_load`),
`run_bench` (each transport in turn, CPU sampled around it), `TransportResult` (the numbers),
and the report: `results_table`, `bench_document` (JSON) and `write_plot` (PNG).
`LocalGateway` starts a gateway subprocess to measure.

``airlane bench --compare`` runs the same workload against reference servers too: the servers
are in `airlane.bench.peers`, the runs in `airlane.bench.compare`, the table and JSON in
`airlane.bench.compare_report`, and with ``--runs K`` in `airlane.bench.compare_rounds`
(imported from there, not re-exported here).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airlane.runtime.lazy import lazy_exports

if TYPE_CHECKING:
    from airlane.bench.config import BenchConfig, loopback_address
    from airlane.bench.plot import write_plot
    from airlane.bench.report import bench_document, client_bound, results_table
    from airlane.bench.runner import gateway_pid, run_bench, run_transport
    from airlane.bench.spawn import GatewayStartError, LocalGateway, pin_process, pinning_plan
    from airlane.bench.stats import Percentiles, TransportResult

# Imported on first use: the command line's other commands, and the light modules here
# (`airlane.bench.config`, `airlane.bench.peers`), do not load the load clients.
_HOMES = {
    "airlane.bench.config": ("BenchConfig", "loopback_address"),
    "airlane.bench.plot": ("write_plot",),
    "airlane.bench.report": ("bench_document", "client_bound", "results_table"),
    "airlane.bench.runner": ("gateway_pid", "run_bench", "run_transport"),
    "airlane.bench.spawn": ("GatewayStartError", "LocalGateway", "pin_process", "pinning_plan"),
    "airlane.bench.stats": ("Percentiles", "TransportResult"),
}

__all__ = [
    "BenchConfig",
    "GatewayStartError",
    "LocalGateway",
    "Percentiles",
    "TransportResult",
    "bench_document",
    "client_bound",
    "gateway_pid",
    "loopback_address",
    "pin_process",
    "pinning_plan",
    "results_table",
    "run_bench",
    "run_transport",
    "write_plot",
]

__getattr__, __dir__ = lazy_exports(__name__, _HOMES, __all__)
