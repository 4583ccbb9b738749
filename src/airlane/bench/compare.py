"""``airlane bench --compare``: one workload against Airlane and each reference peer in turn.

For each `Implementation` (Airlane first): start its server fresh, pin it to the server core
(the one the gateway gets with ``--spawn``), read its pid from ``/healthz`` for CPU sampling,
run every transport of the workload, stop it. A peer that cannot run on this machine is
recorded as skipped, with the reason; one that does not start, as failed. `ratios` then
relates Airlane's numbers to each peer's. `run_compare_rounds` does it K times, in
alternating order (``--compare --runs K``, summarised by `airlane.bench.compare_rounds`).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from airlane.bench.config import BenchConfig
from airlane.bench.peers import Implementation
from airlane.bench.runner import gateway_pid, run_bench
from airlane.bench.spawn import GatewayStartError, pin_process
from airlane.bench.stats import TransportResult

__all__ = [
    "RATIO_METRICS",
    "ImplementationRun",
    "Measure",
    "Ratios",
    "RunStatus",
    "ratio",
    "ratios",
    "round_order",
    "run_compare",
    "run_compare_rounds",
    "run_implementation",
]

RunStatus = Literal["ran", "skipped", "failed"]
"""``ran``; ``skipped``: its runtime is missing here; ``failed``: it did not start."""

Measure = Callable[[str, str, int | None, BenchConfig], Awaitable[list[TransportResult]]]
"""``measure(name, url, server_pid, config)``: run ``config`` (the workload, narrowed to the
transports the server speaks) against the server at ``url``."""

RATIO_METRICS: dict[str, Callable[[TransportResult], float | None]] = {
    "payload_mb_s": lambda r: r.payload_mb_s,
    "ttfc_p99_ms": lambda r: r.ttfc_ms.p99,
    "lag_p99_ms": lambda r: r.lag_ms.p99,
    "kept_up_pct": lambda r: r.kept_up_pct,
}
"""The metrics compared as Airlane / peer. Above 1 favours Airlane for MB/s and kept-up,
below 1 for TTFC and lag."""

Ratios = dict[str, dict[str, float | None]]
"""``{transport: {metric: Airlane / peer, or None}}``."""


@dataclass(slots=True)
class ImplementationRun:
    """What happened when one implementation was measured."""

    implementation: Implementation
    status: RunStatus
    reason: str | None = None
    """Why it was skipped or failed."""
    url: str | None = None
    server_pid: int | None = None
    results: list[TransportResult] = field(default_factory=list)
    """One per transport, in the workload's order (empty unless it ran)."""

    @property
    def name(self) -> str:
        """The implementation's name."""
        return self.implementation.name

    def result(self, transport: str) -> TransportResult | None:
        """The result of ``transport``, if it ran."""
        return next((r for r in self.results if r.transport == transport), None)

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "name": self.name,
            "description": self.implementation.description,
            "status": self.status,
            "reason": self.reason,
            "url": self.url,
            "server_pid": self.server_pid,
            "results": [result.to_dict() for result in self.results],
        }


def ratio(ours: float | None, theirs: float | None) -> float | None:
    """``ours / theirs``, or None where it means nothing (a value missing, NaN or not
    positive)."""
    if ours is None or theirs is None or not (math.isfinite(ours) and math.isfinite(theirs)):
        return None
    if ours < 0 or theirs <= 0:
        return None
    return ours / theirs


def ratios(airlane: ImplementationRun, peer: ImplementationRun) -> Ratios:
    """Airlane / peer for each of `RATIO_METRICS`, per transport both ran."""
    out: Ratios = {}
    for ours in airlane.results:
        theirs = peer.result(ours.transport)
        if theirs is not None:
            out[ours.transport] = {
                name: ratio(metric(ours), metric(theirs)) for name, metric in RATIO_METRICS.items()
            }
    return out


async def run_compare(
    config: BenchConfig,
    implementations: Sequence[Implementation],
    *,
    server_cpus: set[int] | None = None,
    measure: Measure | None = None,
) -> list[ImplementationRun]:
    """Measure each implementation in turn (see the module docstring). ``measure`` defaults to
    `run_bench` without progress reports."""
    [runs] = await run_compare_rounds(
        config, implementations, 1, server_cpus=server_cpus, measure=measure
    )
    return runs


def round_order(count: int, index: int) -> list[int]:
    """The positions of ``count`` implementations in the order round ``index`` (from 0)
    measures them: as given in even rounds, reversed in odd ones, so that on a machine whose
    speed drifts no implementation is always measured first."""
    positions = list(range(count))
    return positions if index % 2 == 0 else positions[::-1]


async def run_compare_rounds(
    config: BenchConfig,
    implementations: Sequence[Implementation],
    rounds: int,
    *,
    server_cpus: set[int] | None = None,
    measure: Measure | None = None,
    on_round: Callable[[int], object] | None = None,
) -> list[list[ImplementationRun]]:
    """`run_compare` ``rounds`` times, each round in `round_order`; every round's runs are
    returned in ``implementations``' order. ``on_round(index)`` is called as a round starts."""

    async def default_measure(
        name: str, url: str, pid: int | None, workload: BenchConfig
    ) -> list[TransportResult]:
        return await run_bench(workload, url, server_pid=pid)

    measured: list[list[ImplementationRun]] = []
    for index in range(rounds):
        if on_round is not None:
            on_round(index)
        runs: dict[int, ImplementationRun] = {}
        for position in round_order(len(implementations), index):
            runs[position] = await run_implementation(
                implementations[position], measure or default_measure, config, server_cpus
            )
        measured.append([runs[position] for position in range(len(implementations))])
    return measured


async def run_implementation(
    implementation: Implementation,
    measure: Measure,
    config: BenchConfig,
    server_cpus: set[int] | None = None,
) -> ImplementationRun:
    """Start ``implementation``'s server, pin it to ``server_cpus``, measure ``config``'s
    transports that it serves, stop it; skipped when it serves none of them."""
    transports = tuple(t for t in config.transports if t in implementation.transports)
    if not transports:
        serves = ", ".join(implementation.transports)
        return ImplementationRun(implementation, "skipped", f"it serves {serves} only")
    reason = implementation.unavailable()
    if reason is not None:
        return ImplementationRun(implementation, "skipped", reason)
    server = implementation.server()
    try:
        # Starting and stopping block (they wait on the child process): off the loop.
        url = await asyncio.to_thread(server.start)
    except GatewayStartError as exc:
        return ImplementationRun(implementation, "failed", str(exc))
    try:
        if server_cpus:
            pin_process(server.pid, server_cpus)
        pid = await asyncio.to_thread(gateway_pid, url)
        results = await measure(
            implementation.name, url, pid, replace(config, transports=transports)
        )
    finally:
        await asyncio.to_thread(server.stop)
    return ImplementationRun(implementation, "ran", url=url, server_pid=pid, results=results)
