"""`CpuSampler`: CPU use of the gateway process and of the load client during a run.

Means come from CPU-time deltas over the run's wall time (exact); peaks from samples every
``interval_s`` (psutil ``cpu_percent``). 100 % is one core fully busy.

On a virtual machine it also reports the *steal*: time this machine's CPUs were ready to run
but the hypervisor ran something else (``steal`` in ``/proc/stat``, as vmstat's ``st``), in
per cent of all of the machine's CPU time over the run. A run with steal was slowed by a
neighbour as well as by the code it measures (docs/performance-journal.md, Method: 3-10 % on a
day when the same code ran up to twice as slow as the day before).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass

import psutil

__all__ = ["DEFAULT_SAMPLE_INTERVAL_S", "CpuSampler", "CpuUsage", "steal_share_pct"]

DEFAULT_SAMPLE_INTERVAL_S = 0.25
"""Often enough to catch a peak, rarely enough to cost the client nothing measurable."""


@dataclass(frozen=True, slots=True)
class CpuUsage:
    """CPU use of one process over a run, in percent of one core."""

    mean_pct: float
    """CPU time used / wall time."""
    max_pct: float
    """Highest sampled value (equals the mean for a run shorter than one sample)."""

    def to_dict(self) -> dict[str, float]:
        """JSON form."""
        return {"mean_pct": round(self.mean_pct, 1), "max_pct": round(self.max_pct, 1)}


MIN_STEAL_WALL_S = 1.0
"""Shorter runs report no steal (see `steal_share_pct`)."""


def steal_share_pct(steal_s: float, wall_s: float, cpus: int) -> float | None:
    """``steal_s`` seconds of steal, summed over ``cpus`` CPUs (as ``/proc/stat`` counts it),
    over ``wall_s`` seconds: in per cent of all the CPU time there was. None where it cannot
    be told: a run shorter than `MIN_STEAL_WALL_S` (the kernel counts steal in 10 ms ticks,
    so one tick over a few milliseconds read as 434 %), or a share above 100 %."""
    if wall_s < MIN_STEAL_WALL_S or cpus < 1:
        return None
    share = max(0.0, 100.0 * steal_s / (wall_s * cpus))
    return share if share <= 100.0 else None


def _steal_s() -> float | None:
    """Seconds of steal over all CPUs since boot; None where the OS does not report it."""
    steal = getattr(psutil.cpu_times(), "steal", None)
    return None if steal is None else float(steal)


class _Process:
    """One watched process; None-safe when it cannot be watched (gone, not ours)."""

    def __init__(self, pid: int | None, *, this_process: bool = False) -> None:
        self.process: psutil.Process | None = None
        self.start = 0.0
        self.peak = 0.0
        if pid is None and not this_process:
            return
        try:
            self.process = psutil.Process(pid)
            self.start = self._cpu_s()
            self.process.cpu_percent(None)  # prime: the next call measures from here
        except psutil.Error:
            self.process = None

    def _cpu_s(self) -> float:
        assert self.process is not None
        times = self.process.cpu_times()
        return float(times.user + times.system)

    def sample(self) -> None:
        if self.process is not None:
            with contextlib.suppress(psutil.Error):
                self.peak = max(self.peak, self.process.cpu_percent(None))

    def usage(self, wall_s: float) -> CpuUsage | None:
        if self.process is None or wall_s <= 0:
            return None
        try:
            mean = 100.0 * (self._cpu_s() - self.start) / wall_s
        except psutil.Error:
            return None
        return CpuUsage(mean, max(self.peak, mean))


class CpuSampler:
    """Use as ``async with CpuSampler(server_pid) as cpu:`` around a run; then read
    `server` and `client`."""

    def __init__(self, server_pid: int | None, interval_s: float = DEFAULT_SAMPLE_INTERVAL_S):
        self._server_pid = server_pid
        self._interval_s = interval_s
        self._task: asyncio.Task[None] | None = None
        self.server: CpuUsage | None = None
        """The gateway's CPU use over the run (None if it cannot be observed)."""
        self.client: CpuUsage | None = None
        """This process's CPU use over the run."""
        self.steal_pct: float | None = None
        """Steal over the run, in per cent of all CPU time (None where it is not reported)."""

    async def __aenter__(self) -> CpuSampler:
        self._watched = (_Process(self._server_pid), _Process(None, this_process=True))
        self._steal_started = _steal_s()
        self._started = time.monotonic()
        self._task = asyncio.create_task(self._sample(), name="bench-cpu-sampler")
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        wall_s = time.monotonic() - self._started
        server, client = self._watched
        self.server, self.client = server.usage(wall_s), client.usage(wall_s)
        steal_s = _steal_s()
        if steal_s is not None and self._steal_started is not None:
            self.steal_pct = steal_share_pct(
                steal_s - self._steal_started, wall_s, psutil.cpu_count() or 1
            )

    async def _sample(self) -> None:
        while True:
            await asyncio.sleep(self._interval_s)
            for watched in self._watched:
                watched.sample()
