"""Reproducible load benchmarks of a gateway: ``airlane bench``.

The pieces: `BenchConfig` (the workload), lean load clients for SSE (`airlane.bench.sse_load`,
an asyncio ``Protocol`` with a sans-I/O parser), WebSocket (`airlane.bench.ws_load`) and AIRC
over TCP or WebSocket (`airlane.bench.airc_load`),
`run_bench` (each transport in turn, CPU sampled around it), `TransportResult` (the numbers),
and the report: `results_table`, `bench_document` (JSON) and `write_plot` (PNG).
`LocalGateway` starts a gateway subprocess to measure.

``airlane bench --compare`` runs the same workload against reference servers too: the servers
are in `airlane.bench.peers`, the runs in `airlane.bench.compare`, the table and JSON in
`airlane.bench.compare_report` (imported from there, not re-exported here).
"""

from airlane.bench.config import BenchConfig, loopback_address
from airlane.bench.plot import write_plot
from airlane.bench.report import bench_document, client_bound, results_table
from airlane.bench.runner import gateway_pid, run_bench, run_transport
from airlane.bench.spawn import GatewayStartError, LocalGateway, pin_process, pinning_plan
from airlane.bench.stats import Percentiles, TransportResult

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
