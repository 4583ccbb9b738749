"""Watching a gateway process from outside: memory, open file descriptors and CPU over time.

Used by the idle-connection and soak benchmarks (``benchmarks/``). Definitions:

- RSS: resident set size (``psutil`` ``memory_info().rss``), shared library pages counted in
  full; what the kernel charges the process.
- PSS: proportional set size from ``/proc/<pid>/smaps_rollup`` (Linux 4.14+): shared pages
  divided among the processes sharing them; None where the file is missing.
- CPU: CPU time (user + system) used between two samples / wall time between them, in percent
  of one core.

`ProcessWatch` takes one `ResourceSample` per call; `ResourceSampler` calls it every interval
in a task while an ``async with`` block runs and keeps a bounded list. `slope_per_min` fits a
least-squares line, so "memory is flat" is a number rather than a glance at a plot.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psutil

__all__ = [
    "DEFAULT_MAX_SAMPLES",
    "GroupWatch",
    "ProcessGone",
    "ProcessWatch",
    "ResourceSample",
    "ResourceSampler",
    "describe_host",
    "describe_python",
    "median_slope_per_min",
    "raise_fd_limit",
    "read_pss_bytes",
    "slope_per_min",
]

DEFAULT_MAX_SAMPLES = 4096
"""Samples a `ResourceSampler` keeps: beyond that it halves its list and its rate, so a run of
any length stays bounded (a sample is about 100 bytes)."""


class ProcessGone(RuntimeError):
    """The watched process exited (or cannot be read): the measurement has no subject."""


@dataclass(frozen=True, slots=True)
class ResourceSample:
    """One look at a process."""

    t_s: float
    """Seconds since the watch started."""
    rss_bytes: int
    """Resident set size."""
    pss_bytes: int | None
    """Proportional set size (None where ``smaps_rollup`` is unavailable)."""
    open_fds: int | None
    """Open file descriptors (None where the platform cannot say)."""
    cpu_pct: float | None
    """CPU use since the previous sample, % of one core (None for the first sample)."""

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "t_s": round(self.t_s, 3),
            "rss_bytes": self.rss_bytes,
            "pss_bytes": self.pss_bytes,
            "open_fds": self.open_fds,
            "cpu_pct": None if self.cpu_pct is None else round(self.cpu_pct, 1),
        }


def read_pss_bytes(pid: int) -> int | None:
    """The ``Pss:`` line of ``/proc/<pid>/smaps_rollup`` in bytes; None if unavailable."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as fh:
            for line in fh:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024  # the kernel writes kB (KiB)
    except (OSError, ValueError, IndexError):
        return None
    return None


class ProcessWatch:
    """Samples one process; ``ProcessWatch(pid).sample()``.

    Raises:
        ProcessGone: from the constructor or `sample` when the process cannot be read.
    """

    def __init__(self, pid: int) -> None:
        self.pid = pid
        """The watched process."""
        try:
            self._process = psutil.Process(pid)
        except psutil.Error as exc:
            raise ProcessGone(f"cannot watch process {pid}: {exc}") from None
        self._started = time.monotonic()
        self._last_wall = self._started
        self._last_cpu = self.cpu_seconds()
        self._sampled = False

    def cpu_seconds(self) -> float:
        """CPU time used so far (user + system)."""
        try:
            times = self._process.cpu_times()
        except psutil.Error as exc:
            raise ProcessGone(f"process {self.pid}: {exc}") from None
        return float(times.user + times.system)

    def sample(self) -> ResourceSample:
        """Memory, descriptors and CPU since the previous sample, now."""
        now = time.monotonic()
        cpu = self.cpu_seconds()
        try:
            rss = int(self._process.memory_info().rss)
            fds: int | None = self._process.num_fds() if hasattr(self._process, "num_fds") else None
        except psutil.Error as exc:
            raise ProcessGone(f"process {self.pid}: {exc}") from None
        wall = now - self._last_wall
        # The first sample has no interval of its own worth reporting (it may follow the
        # constructor by microseconds).
        cpu_pct = None if not self._sampled or wall <= 0 else 100.0 * (cpu - self._last_cpu) / wall
        self._sampled = True
        self._last_wall, self._last_cpu = now, cpu
        return ResourceSample(now - self._started, rss, read_pss_bytes(self.pid), fds, cpu_pct)


class GroupWatch:
    """Samples several processes as one (their sums): the workers of ``airlane serve
    --workers``, say. The same methods as `ProcessWatch`.

    Raises:
        ProcessGone: from the constructor or `sample` when one of them cannot be read.
    """

    def __init__(self, pids: list[int]) -> None:
        if not pids:
            raise ProcessGone("no processes to watch")
        self.pid = pids[0]
        self._watches = [ProcessWatch(pid) for pid in pids]
        self._started = time.monotonic()
        self._last_wall = self._started
        self._last_cpu = self.cpu_seconds()
        self._sampled = False

    def cpu_seconds(self) -> float:
        """CPU time all of them used so far."""
        return sum(watch.cpu_seconds() for watch in self._watches)

    def sample(self) -> ResourceSample:
        """Their memory, descriptors and CPU since the previous sample, summed, now."""
        now = time.monotonic()
        cpu = self.cpu_seconds()
        samples = [watch.sample() for watch in self._watches]
        pss = [s.pss_bytes for s in samples]
        fds = [s.open_fds for s in samples]
        wall = now - self._last_wall
        cpu_pct = None if not self._sampled or wall <= 0 else 100.0 * (cpu - self._last_cpu) / wall
        self._sampled = True
        self._last_wall, self._last_cpu = now, cpu
        return ResourceSample(
            now - self._started,
            sum(s.rss_bytes for s in samples),
            None if None in pss else sum(p for p in pss if p is not None),
            None if None in fds else sum(f for f in fds if f is not None),
            cpu_pct,
        )


class ResourceSampler:
    """``async with ResourceSampler(watch, interval_s) as sampler:`` samples ``watch`` at the
    start, every ``interval_s`` and at the end; read `samples` afterwards (or during).

    If the process exits, sampling stops and `gone` says why; the block itself runs on.
    """

    def __init__(
        self,
        watch: ProcessWatch | GroupWatch,
        interval_s: float,
        *,
        max_samples: int = DEFAULT_MAX_SAMPLES,
    ) -> None:
        if interval_s <= 0 or max_samples < 2:
            raise ValueError("interval_s must be positive and max_samples at least 2")
        self._watch = watch
        self._interval_s = interval_s
        self._max_samples = max_samples
        self._task: asyncio.Task[None] | None = None
        self.samples: list[ResourceSample] = []
        """Samples so far, oldest first."""
        self.gone: str | None = None
        """Why sampling stopped early, if it did."""

    async def __aenter__(self) -> ResourceSampler:
        self._take()
        self._task = asyncio.create_task(self._run(), name="bench-resource-sampler")
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        self._take()

    def _take(self) -> None:
        if self.gone is not None:
            return
        try:
            self.samples.append(self._watch.sample())
        except ProcessGone as exc:
            self.gone = str(exc)
            return
        if len(self.samples) >= self._max_samples:
            # Keep every other sample and sample half as often: the curve keeps its shape.
            del self.samples[1::2]
            self._interval_s *= 2

    async def _run(self) -> None:
        while self.gone is None:
            await asyncio.sleep(self._interval_s)
            self._take()


def slope_per_min(points: Sequence[tuple[float, float]]) -> float | None:
    """Least-squares slope of ``(seconds, value)`` points, in value units per minute; None
    for fewer than two distinct times."""
    if len(points) < 2:
        return None
    mean_t = sum(t for t, _ in points) / len(points)
    mean_v = sum(v for _, v in points) / len(points)
    spread = sum((t - mean_t) ** 2 for t, _ in points)
    if spread <= 0:
        return None
    covariance = sum((t - mean_t) * (v - mean_v) for t, v in points)
    return 60.0 * covariance / spread


MEDIAN_SLOPE_POINTS = 200
"""`median_slope_per_min` thins longer series to this many points (evenly spaced)."""


def median_slope_per_min(points: Sequence[tuple[float, float]]) -> float | None:
    """The median of the slopes between every two points (Theil-Sen), per minute; None for
    fewer than two distinct times.

    Unlike the least-squares slope it ignores a one-off step: a series that is flat except
    for one rise (the allocator's high-water mark moving once) has a median slope near zero,
    while steady growth (a leak) moves it as much as the least-squares one. Series longer than
    `MEDIAN_SLOPE_POINTS` are thinned first, so the pairs stay few.
    """
    if len(points) > MEDIAN_SLOPE_POINTS:
        step = len(points) / MEDIAN_SLOPE_POINTS
        points = [points[int(i * step)] for i in range(MEDIAN_SLOPE_POINTS)]
    slopes = sorted(
        (v2 - v1) / (t2 - t1)
        for i, (t1, v1) in enumerate(points)
        for t2, v2 in points[i + 1 :]
        if t2 != t1
    )
    if not slopes:
        return None
    middle = len(slopes) // 2
    median = slopes[middle] if len(slopes) % 2 else (slopes[middle - 1] + slopes[middle]) / 2
    return 60.0 * median


def raise_fd_limit(needed: int = 0) -> int:
    """Raise this process's soft ``RLIMIT_NOFILE`` to its hard limit; return the new soft limit.

    Thousands of connections need thousands of descriptors, and many systems start processes
    with a soft limit of 1024. Children started afterwards (a spawned gateway) inherit it.
    Where the hard limit is below ``needed``, root (``CAP_SYS_RESOURCE``) raises it too, up to
    the kernel's ceiling (``fs.nr_open``); anyone else keeps it, and the caller says so.
    """
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < needed:
        ceiling = _nr_open()
        with contextlib.suppress(ValueError, OSError):
            raised = min(max(needed, hard), ceiling)
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, raised))
            return raised
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        return hard
    if hard == resource.RLIM_INFINITY and soft != resource.RLIM_INFINITY:
        # An unlimited hard limit still has a kernel ceiling (fs.nr_open); ask for a lot.
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (1 << 20, hard))
            return 1 << 20
    return int(soft)


def _nr_open() -> int:
    """The kernel's ceiling on a process's descriptors (``fs.nr_open``; 1 Mi if unreadable)."""
    try:
        with open("/proc/sys/fs/nr_open") as fh:
            return int(fh.read())
    except (OSError, ValueError):
        return 1 << 20


def describe_host() -> dict[str, Any]:
    """The machine a measurement ran on, for its JSON: results only compare on like hosts."""
    affinity = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {
        "cpus": os.cpu_count(),
        "cpu_affinity": affinity,
        "memory_bytes": int(psutil.virtual_memory().total),
        "python": sys.version.split()[0],
        "python_build": describe_python(),
        "platform": platform.platform(),
    }


def describe_python() -> dict[str, Any]:
    """The interpreter measurements run on (a spawned gateway runs on the same one).

    Its build moves the numbers: on pyenv's default build (``libpython`` a shared library,
    no ``--enable-optimizations``) the gateway took 2-11 % more CPU per chunk than on Debian's
    ``python3.11`` (linked statically), the same code in the same rounds
    (docs/performance-journal.md, "The interpreter's build"). ``libpython`` is ``"shared"``,
    ``"static"``, or None where the process's mappings cannot be read (not Linux).
    """
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            shared = any("/libpython" in line for line in maps)
    except OSError:
        libpython = None
    else:
        libpython = "shared" if shared else "static"
    return {
        "version": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "executable": sys.executable,
        "libpython": libpython,
    }
