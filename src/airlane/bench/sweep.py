"""A scaling sweep: one paced load-test run per (N, transport), each against a fresh gateway,
and the largest N each transport sustains.

A point *keeps up* when all three hold:

- kept up (achieved chunk rate / target rate, `airlane.bench.stats`) >= 99 %;
- delivery lag p99 <= 20 ms (one default interval): 99 % of chunks arrive before the next
  one is due;
- no stream failed (a run cut off by its time limit fails the streams it cut).

The *sustained N* of a transport is the largest N that keeps up with every smaller N measured
keeping up as well: the first failure marks where the curve broke, and a larger N passing
after it is noise, not capacity.

Each point gets a fresh gateway (`LocalGateway`, pinned to its own core) so that one point's
leftovers (a grown heap, connections still closing) never weigh on the next; or every point
runs against one ``url`` (another implementation, say).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airlane.bench.config import BenchConfig, Transport
from airlane.bench.report import client_bound
from airlane.bench.runner import run_on_fast_loop, run_transport
from airlane.bench.spawn import LocalGateway, pin_client, pin_process

__all__ = [
    "DEFAULT_MAX_LAG_P99_MS",
    "DEFAULT_MIN_KEPT_UP_PCT",
    "DEFAULT_NS",
    "DEFAULT_POINT_TIMEOUT_S",
    "KeepUpCriteria",
    "SweepPlan",
    "run_sweep",
    "sustained_n",
]

DEFAULT_NS = (100, 250, 500, 1000, 2000, 4000)
"""Concurrent streams measured: roughly doubling, from easy to far past one core."""
DEFAULT_MIN_KEPT_UP_PCT = 99.0
"""A point keeps up at 99 % of the target chunk rate or more."""
DEFAULT_MAX_LAG_P99_MS = 20.0
"""... and with a delivery lag p99 within one default paced interval."""
DEFAULT_POINT_TIMEOUT_S = 90.0
"""Time limit of one point's run. 200 chunks at 20 ms take 4 s when the gateway keeps up; a
point that needs far longer has failed already, and its streams cut off count as errors."""
SETTLE_S = 0.5
"""Pause between points: the previous gateway's exit and the client's sockets wind down."""


@dataclass(frozen=True, slots=True)
class KeepUpCriteria:
    """When a point counts as keeping up (see the module docstring)."""

    min_kept_up_pct: float = DEFAULT_MIN_KEPT_UP_PCT
    """Lowest acceptable kept-up percentage."""
    max_lag_p99_ms: float = DEFAULT_MAX_LAG_P99_MS
    """Highest acceptable delivery lag p99."""

    def passed(self, point: Mapping[str, Any]) -> bool:
        """Whether ``point`` (a `TransportResult.to_dict`, as in the sweep's JSON) keeps up."""
        kept_up = point.get("kept_up_pct")
        lag_p99 = (point.get("lag_ms") or {}).get("p99")
        return (
            kept_up is not None
            and lag_p99 is not None
            and point.get("errors", 1) == 0
            and kept_up >= self.min_kept_up_pct
            and lag_p99 <= self.max_lag_p99_ms
        )


@dataclass(frozen=True, slots=True)
class SweepPlan:
    """What a sweep measures."""

    ns: tuple[int, ...] = DEFAULT_NS
    """Concurrent streams at each point, measured in this order."""
    transports: tuple[Transport, ...] = ("sse", "ws")
    """Transports measured at each N."""
    chunks: int = 200
    """Chunks per stream."""
    interval_ms: float = 20.0
    """Paced chunk interval."""
    point_timeout_s: float = DEFAULT_POINT_TIMEOUT_S
    """Time limit of each point's run."""

    def __post_init__(self) -> None:
        if not self.ns or any(n < 1 for n in self.ns):
            raise ValueError("ns must be a non-empty list of positive stream counts")
        if not self.transports:
            raise ValueError("transports must name 'sse', 'ws' or both")
        for n, transport in self.points():
            self.config(n, transport)  # BenchConfig checks the rest

    def config(self, n: int, transport: Transport) -> BenchConfig:
        """The `BenchConfig` of one point."""
        return BenchConfig(
            streams=n,
            chunks=self.chunks,
            mode="paced",
            interval_ms=self.interval_ms,
            transports=(transport,),
            timeout_s=self.point_timeout_s,
        )

    def points(self) -> Iterator[tuple[int, Transport]]:
        """``(N, transport)`` in measuring order: N by N, so both transports see the machine
        in the same state at each N."""
        for n in self.ns:
            for transport in self.transports:
                yield n, transport


def sustained_n(
    points: Sequence[Mapping[str, Any]], transport: str, criteria: KeepUpCriteria
) -> int | None:
    """The largest N of ``transport`` that keeps up with every smaller N keeping up too;
    None if even the smallest fails."""
    best = None
    for point in sorted((p for p in points if p["transport"] == transport), key=_streams):
        if not criteria.passed(point):
            break
        best = _streams(point)
    return best


def _streams(point: Mapping[str, Any]) -> int:
    return int(point["streams"])


def run_sweep(
    plan: SweepPlan,
    criteria: KeepUpCriteria,
    *,
    url: str | None = None,
    server_pid: int | None = None,
    gateway_args: Sequence[str] = (),
    on_point: Callable[[dict[str, Any]], None] | None = None,
) -> tuple[list[dict[str, Any]], dict[str, list[int]] | None]:
    """Measure every point of ``plan``; return the points (JSON form) and the CPU pinning used.

    With ``url`` every point runs against that server (``server_pid`` for its CPU, if known)
    and nothing is pinned; without, each point spawns a gateway (``gateway_args`` added to
    ``airlane serve``), pins it and this process to different cores when there are two, and
    stops it afterwards. ``on_point`` is called with each point as it is measured.

    Raises:
        GatewayStartError: a gateway failed to start.
    """
    server_cpus, pinning = pin_client() if url is None else (None, None)
    points = []
    for index, (n, transport) in enumerate(plan.points()):
        if index:
            time.sleep(SETTLE_S)
        config = plan.config(n, transport)
        if url is not None:
            result = run_on_fast_loop(run_transport(config, url, transport, server_pid))
        else:
            with LocalGateway(gateway_args) as gateway:
                if server_cpus is not None:
                    pin_process(gateway.pid, server_cpus)
                assert gateway.url is not None
                result = run_on_fast_loop(
                    run_transport(config, gateway.url, transport, gateway.pid, airc=gateway.airc)
                )
        point = {**result.to_dict(), "client_bound": client_bound(result)}
        point["keeps_up"] = criteria.passed(point)
        points.append(point)
        if on_point is not None:
            on_point(point)
    return points, pinning
