"""`GcPacer`: keeps CPython's cyclic garbage collector off a gateway's streaming path.

Reference counting frees almost everything a gateway allocates the moment it is dropped; the
cyclic collector is needed only for reference cycles, and the gateway makes none per
connection on its own transports (``tests/cli/test_serve_gc.py``; grpcio leaves five objects
per call). Yet with CPython's own schedule the collector walks every object that outlives a
young-generation pass, and streams retain their history: a burst of 500 streams x 200 chunks
leaves 100,000 tracked events behind, each walked once by a young pass, again by a middle
one, and again by every full pass that their churn sets off. Measured in one gateway over
four paced runs of 500 streams: 26-27 young passes, 422-434 ms in all and up to 24 ms each,
plus middle passes of up to 103 ms: pauses that every stream of the process feels as
delivery lag.

The pacer changes the schedule, not the collector:

- every ``tick_s`` it freezes what is alive (``gc.freeze``: the objects move to the permanent
  generation, a constant-time list splice), so an automatic pass only ever sees the objects
  made since the last tick, and runs at all only if one tick leaves more of them than the
  young threshold;
- the frozen objects are collected together, in one full pass (unfreeze, collect, freeze
  again), when the process's peak memory has grown by ``full_after_growth_mib`` since the
  last full pass, but at most every ``min_full_interval_s``, and at least every
  ``max_full_interval_s``. Peak memory, not a count of objects: streams that end free their
  history all at once, so counts rise and fall by 100,000 objects a run, and a rule on them
  (CPython's own, a quarter more objects than after the last full pass) set off a full pass
  after every bench run, each a pause of up to 280 ms for a gateway that had made no
  garbage at all. Garbage that accumulates raises the peak; a history that comes and goes
  within it does not;
- a full pass that falls due waits for a quiet tick, one over which the process used at most
  ``quiet_cpu_share`` of a CPU, for at most ``max_quiet_wait_s``. The walk pauses every
  stream of the process (240 ms in a gateway holding the history of 1,000 streams of 200
  chunks, whose growth is what set the pass off); between bursts of work nobody waits for it.

Just before a full pass, the heartbeats that would fall due during it go out
(`airlane.runtime.heartbeats`): the pass is expected to last as long per tracked object as the
last one did (never less than `DEFAULT_S_PER_OBJECT`), and every SSE and WebSocket
connection of the loop whose heartbeat falls due within twice that sends it first. Without
this, each pause of a process holding many idle connections was a late heartbeat on every
one of them that fell due meanwhile (1.5-3 s per pass, measured at 17,000 connections per
worker on a loaded two-core machine).

A scheduled pass is also announced before it runs (``announce``; ``airlane serve`` gives
`airlane.hub.Hub.pausing`, and the pass waits until the broker has the word, at most
`MAX_ANNOUNCE_WAIT_S`), with the same window: the other processes of a cluster
count this one's silence from the end of it, where a pass longer than their ``node_timeout_s``
(3 s by default; 2.7-4 s measured above) had them take a live process for dead and end the
streams it produced with ``producer_lost``.

The workers of ``airlane serve --workers`` take turns (``turns``,
`airlane.server.gcturns`): a pass that is due while a sibling's runs waits for it, at most
`MAX_TURN_WAIT_S`, so that passes do not share the cores and each pause lasts about its own
CPU time.

After a full pass the pacer hands the C allocator's free memory back to the operating
system (glibc's ``malloc_trim``, ``trim_after_full``): the history of streams that ended is
freed by then, and without it the allocator keeps the pages for reuse, so the process's
resident size stays at its highest point after every burst of streams (and, in the soak
runs before the trim, rose a step of 0.5-2.2 MB at a busy gateway's first full pass).

Cyclic garbage therefore lives at most ``max_full_interval_s`` (plus ``max_quiet_wait_s``),
or until it has grown the process by ``full_after_growth_mib`` (plus what it grows while the
pass waits); everything else is freed as before. A pacer belongs to the process that runs the
gateway (``airlane serve``): an application that mounts the ASGI app keeps its own
collector. Tools that walk the collector's lists (``gc.get_objects``,
``gc.get_referrers``, leak finders built on them) do not see frozen objects: set ``[gc]
paced = false`` while hunting a leak with them.
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import logging
import resource
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from airlane.runtime.heartbeats import heartbeats
from airlane.server.gcturns import GcTurns

__all__ = ["GC_GEN0_THRESHOLD", "GcConfig", "GcPacer", "peak_rss_kb", "tune_gc"]

log = logging.getLogger("airlane.gc")

GC_GEN0_THRESHOLD = 20_000
"""Allocations between young-generation collections (CPython's default is 700)."""

DEFAULT_S_PER_OBJECT = 2e-6
"""What a full pass is expected to take per tracked object before one has been timed, and at
least after: 1.1 us of CPU measured here in workers holding 17,000 connections each (1.2
million objects), 2.2-3.3 us of time with six such workers sharing two cores."""

EARLY_BEAT_MARGIN = 2.0
"""Heartbeats due within this many times a pass's expected length are sent before it."""

MAX_ANNOUNCE_WAIT_S = 3.0
"""How long a scheduled pass waits for its announcement to be out (`GcPacer` ``announce``):
the broker's answer took 0.4-1.1 s with six workers, their clients and the broker sharing two
cores; a pass that began before the word was out left it to arrive after the pause, and the
other processes took one such worker for dead (in one run of three at a 1 s bound)."""

MAX_TURN_WAIT_S = 30.0
"""How long a due pass waits for a sibling worker's pass to end (`GcTurns`) before it runs
alongside it: longer than five passes of the longest measured (5.2 s with all six workers'
overlapping; 1.2-4.0 s taking turns)."""

MAX_EARLY_BEAT_S = 30.0
"""The longest a pass is expected to take, for the heartbeats sent ahead of it."""

PACED_GEN0_THRESHOLD = 100_000
"""The young threshold while a pacer ticks: a pass then runs only if one tick leaves more
objects than this, which a loop turn of a 500-stream burst (~26,000) does not."""


def tune_gc() -> None:
    """Make CPython's own collector fit a streaming process (what `GcPacer` keeps as its
    baseline, and all that a process without a pacer gets).

    Freezes what start-up created (modules, configuration), so no pass walks it again, and
    runs young passes every `GC_GEN0_THRESHOLD` allocations rather than every 700: every
    event, frame and wake-up allocates, and reference counting frees almost all of it at once.
    """
    gc.collect()
    gc.freeze()
    _, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(GC_GEN0_THRESHOLD, gen1, gen2)


@dataclass(frozen=True, slots=True)
class GcConfig:
    """How ``airlane serve`` schedules the garbage collector (``[gc]`` in the TOML file)."""

    paced: bool = True
    """False: CPython's own schedule (with `tune_gc`'s threshold and start-up freeze)."""
    tick_s: float = 0.05
    """How often what is alive is frozen out of the automatic passes."""
    min_full_interval_s: float = 5.0
    """The shortest time between two full passes (each pauses the process for a walk of
    every tracked object: 85-100 ms for a gateway at rest after a few bench runs here, up to
    280 ms while it holds 100,000 events)."""
    max_full_interval_s: float = 300.0
    """The longest time between two full passes: how long cyclic garbage may live."""
    full_after_growth_mib: float = 256.0
    """A full pass (after ``min_full_interval_s``) once the process's peak resident memory
    has grown by this much since the last: how much cyclic garbage may accumulate. Less
    makes a fresh gateway pause while its first streams fill it (500 streams of 200 chunks
    grow it by about 150 MiB)."""
    quiet_cpu_share: float = 0.25
    """A due full pass runs at the first tick over which the process used at most this
    share of one CPU (``time.process_time``, every thread): between bursts of streams."""
    max_quiet_wait_s: float = 30.0
    """How long a due full pass waits for a quiet tick before it runs anyway (0: never
    waits). A gateway that is never quiet collects this much later than its schedule."""
    trim_after_full: bool = True
    """After each full pass, return the C allocator's free memory to the operating system
    (glibc's ``malloc_trim``; nothing where the C library has none)."""

    def __post_init__(self) -> None:
        if not self.tick_s > 0:
            raise ValueError("gc.tick_s must be positive")
        if not 0 <= self.min_full_interval_s <= self.max_full_interval_s:
            raise ValueError("gc: need 0 <= min_full_interval_s <= max_full_interval_s")
        if not self.full_after_growth_mib > 0:
            raise ValueError("gc.full_after_growth_mib must be positive")
        if not self.quiet_cpu_share >= 0:
            raise ValueError("gc.quiet_cpu_share must not be negative")
        if not self.max_quiet_wait_s >= 0:
            raise ValueError("gc.max_quiet_wait_s must not be negative")


class GcPacer(Collector):
    """Runs the schedule of the module docstring on one event loop; see `start` and `stop`.

    Also a Prometheus collector: register it to export its full passes and their pauses.
    """

    def __init__(
        self,
        config: GcConfig | None = None,
        *,
        memory_kb: Callable[[], int] | None = None,
        cpu_s: Callable[[], float] | None = None,
        announce: Callable[[float], Awaitable[object] | None] | None = None,
        turns: GcTurns | None = None,
    ) -> None:
        self.config = config or GcConfig()
        # Shared with the sibling workers: one full pass at a time (closed by `stop`).
        self._turns = turns
        self._turn_wait_since: float | None = None
        self._pass_turn_wait = 0.0  # of the pending pass's wait, what was for a turn
        # Told how long a scheduled pass is expected to stop the process before it runs
        # (`airlane.hub.Hub.pausing`: the other processes of a cluster then allow for the
        # silence); the pass waits for what it returns, up to `MAX_ANNOUNCE_WAIT_S`.
        self._announce = announce
        self._announced = False
        self._announced_at = 0.0
        self._announcement: asyncio.Future[object] | None = None
        # What "the process has grown" and "the process was busy" are measured on (tests
        # give their own).
        self._memory_kb = memory_kb or peak_rss_kb
        self._cpu_s = cpu_s or time.process_time
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._saved_threshold: tuple[int, int, int] | None = None
        self._full_at_kb = 0
        self._last_full = 0.0
        # The previous tick's clocks (monotonic, process CPU), for the CPU share since then.
        self._tick_at = 0.0
        self._cpu_at = 0.0
        # When the pending full pass fell due; None while none is.
        self._due_since: float | None = None
        self.full_passes = 0
        """Full passes run so far."""
        self.full_pause_s = 0.0
        """Seconds the full passes took, in all."""
        self.full_cpu_s = 0.0
        """CPU seconds the full passes took (the collecting thread's), in all: less than
        `full_pause_s` by the time other processes had the core meanwhile."""
        self.early_beats = 0
        """Heartbeats sent ahead of a full pass because they would have fallen due during it."""
        self._s_per_object = DEFAULT_S_PER_OBJECT
        self.longest_pause_s = 0.0
        """The longest full pass, in seconds."""
        self.collected = 0
        """Unreachable objects the full passes found, as `gc.collect` counts them: a cycle
        that a finalizer breaks (a suspended generator closed by the pass, whose objects then
        go by reference counting) is freed but not counted."""
        self.live_objects = 0
        """Tracked objects alive after the last full pass."""
        self.quiet_wait_s = 0.0
        """Seconds due full passes spent waiting for a quiet tick, in all."""
        self.turn_wait_s = 0.0
        """Seconds due full passes spent waiting for a sibling worker's pass to end, in all."""
        self.trim_s = 0.0
        """Seconds spent returning free memory to the system after full passes, in all."""
        self._trim = _malloc_trim() if self.config.trim_after_full else None

    @property
    def running(self) -> bool:
        """True between `start` and `stop` (with ``paced``)."""
        return self._timer is not None

    def start(self) -> None:
        """Tune the collector and, with ``paced``, begin ticking on the running loop."""
        if self._saved_threshold is not None:
            raise RuntimeError("GcPacer.start: already started")
        self._saved_threshold = gc.get_threshold()
        tune_gc()
        if not self.config.paced:
            return
        self._loop = asyncio.get_running_loop()
        _, gen1, gen2 = gc.get_threshold()
        gc.set_threshold(PACED_GEN0_THRESHOLD, gen1, gen2)
        self._last_full = self._tick_at = time.monotonic()
        self._cpu_at = self._cpu_s()
        self._remember_live()
        self._timer = self._loop.call_later(self.config.tick_s, self._tick)

    def stop(self) -> None:
        """Stop ticking and hand the process back to CPython's schedule (frozen objects
        return to the oldest generation, the thresholds to what they were)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._announcement is not None:
            self._announcement.cancel()
            self._announcement = None
        if self._turns is not None:
            self._turns.close()
        if self._saved_threshold is not None:
            gc.unfreeze()
            gc.set_threshold(*self._saved_threshold)
            self._saved_threshold = None

    def collect_now(self) -> int:
        """One full pass over every tracked object, frozen ones included; returns how many
        unreachable objects it found. The heartbeats due during it are sent first. The
        pacer calls it on schedule."""
        gc.freeze()  # every tracked object in one list, to count (the pass unfreezes them)
        walked = gc.get_freeze_count()
        self._beat_ahead(walked)
        started = time.perf_counter()
        cpu_started = time.thread_time()
        gc.unfreeze()
        try:
            found = gc.collect()
        finally:
            gc.freeze()
        pause = time.perf_counter() - started
        self.full_cpu_s += time.thread_time() - cpu_started
        if walked:
            # Never expected shorter than the default: a pass that had a core to itself is
            # followed by passes that share it (1.1 us per object against 2.2-3.3).
            self._s_per_object = max(pause / walked, DEFAULT_S_PER_OBJECT)
        if self._trim is not None:
            trimmed = time.perf_counter()
            self._trim()
            self.trim_s += time.perf_counter() - trimmed
        self.full_passes += 1
        self.full_pause_s += pause
        self.longest_pause_s = max(self.longest_pause_s, pause)
        self.collected += found
        self._last_full = time.monotonic()
        self._due_since = None
        self._announced = False
        self._remember_live()
        log.debug(
            "full collection: %d unreachable, %d alive, %.1f ms",
            found,
            self.live_objects,
            pause * 1e3,
        )
        return found

    def expected_pause_s(self, objects: int) -> float:
        """How long a full pass over ``objects`` tracked objects is expected to take: as long
        per object as the last pass took, and at least `DEFAULT_S_PER_OBJECT`."""
        return objects * self._s_per_object

    def _beat_ahead(self, objects: int) -> None:
        """Send the loop's heartbeats that would fall due during the coming pass."""
        loop = self._loop
        if loop is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                return  # no loop in this thread: no connections to beat for
        self.early_beats += heartbeats(loop).ahead(self._early_window(objects))

    def _early_window(self, objects: int) -> float:
        """How far ahead of a pass over ``objects`` tracked objects to beat and announce."""
        expected = EARLY_BEAT_MARGIN * self.expected_pause_s(objects) + self.config.tick_s
        return min(expected, MAX_EARLY_BEAT_S)

    def _remember_live(self) -> None:
        # The permanent generation's length is a walk of its list (~3 ms per 300,000 objects),
        # so it is taken once per full pass, not per tick.
        self.live_objects = gc.get_freeze_count()
        self._full_at_kb = self._memory_kb() + int(self.config.full_after_growth_mib * 1024)

    def _tick(self) -> None:
        config = self.config
        try:
            gc.freeze()
            now = time.monotonic()
            cpu = self._cpu_s()
            busy = (cpu - self._cpu_at) / max(now - self._tick_at, 1e-3)
            self._tick_at, self._cpu_at = now, cpu
            if self._due_since is None:
                since = now - self._last_full
                if since >= config.max_full_interval_s or (
                    since >= config.min_full_interval_s and self._memory_kb() >= self._full_at_kb
                ):
                    self._due_since = now
            if self._due_since is not None:
                waited = now - self._due_since
                if self._announced or (
                    busy <= config.quiet_cpu_share or waited >= config.max_quiet_wait_s
                ):
                    if not self._my_turn(now):
                        return  # a sibling worker's pass runs: after it
                    if self._announce is not None and not self._announced:
                        # Said now, paused at a later tick: the loop sends it meanwhile.
                        self._announced, self._announced_at = True, now
                        sent = self._announce(self._early_window(gc.get_freeze_count()))
                        if sent is not None:
                            self._announcement = asyncio.ensure_future(sent)
                        return
                    pending = self._announcement
                    if pending is not None and not pending.done():
                        if now - self._announced_at < MAX_ANNOUNCE_WAIT_S:
                            return  # the word is not out yet
                        pending.cancel()
                    self._announcement = None
                    self.quiet_wait_s += waited - self._pass_turn_wait
                    self._pass_turn_wait = 0.0
                    try:
                        self.collect_now()
                    finally:
                        if self._turns is not None:
                            self._turns.give_back()
                    # The pass's own CPU is not the next tick's load.
                    self._tick_at, self._cpu_at = time.monotonic(), self._cpu_s()
        finally:
            # Armed again whatever happened: a pacer that stopped ticking would leave every
            # object made from then on to CPython's schedule and everything before it frozen.
            assert self._loop is not None  # set by start(), which armed this timer
            self._timer = self._loop.call_later(config.tick_s, self._tick)

    def _my_turn(self, now: float) -> bool:
        """Whether a due pass may run now: no sibling's pass runs, or it has waited
        `MAX_TURN_WAIT_S` for them (then it runs alongside)."""
        turns = self._turns
        if turns is None or turns.take():
            self._end_turn_wait(now)
            return True
        if self._turn_wait_since is None:
            self._turn_wait_since = now
        if now - self._turn_wait_since < MAX_TURN_WAIT_S:
            return False
        log.info(
            "a sibling's garbage-collector pass has run %.0f s: collecting alongside",
            now - self._turn_wait_since,
        )
        self._end_turn_wait(now)
        return True

    def _end_turn_wait(self, now: float) -> None:
        if self._turn_wait_since is not None:
            waited = now - self._turn_wait_since
            self.turn_wait_s += waited
            self._pass_turn_wait += waited
            self._turn_wait_since = None

    def collect(self) -> Iterator[Metric]:
        """Prometheus metrics: full passes, their pauses, what they found, what was alive."""
        yield CounterMetricFamily(
            "airlane_gc_full_collections", "Full garbage-collector passes", self.full_passes
        )
        yield CounterMetricFamily(
            "airlane_gc_full_collection_seconds",
            "Time the process was paused by full garbage-collector passes",
            self.full_pause_s,
        )
        yield CounterMetricFamily(
            "airlane_gc_full_collection_cpu_seconds",
            "CPU time of the full garbage-collector passes (the collecting thread's)",
            self.full_cpu_s,
        )
        yield CounterMetricFamily(
            "airlane_gc_early_heartbeats",
            "Heartbeats sent ahead of a full pass because they would have fallen due during it",
            self.early_beats,
        )
        yield CounterMetricFamily(
            "airlane_gc_collected_objects",
            "Unreachable objects (reference cycles) found by full passes",
            self.collected,
        )
        yield CounterMetricFamily(
            "airlane_gc_full_collection_wait_seconds",
            "Time due full passes waited for a quiet moment (little CPU used) to run in",
            self.quiet_wait_s,
        )
        yield CounterMetricFamily(
            "airlane_gc_turn_wait_seconds",
            "Time due full passes waited for a sibling worker's pass to end",
            self.turn_wait_s,
        )
        yield CounterMetricFamily(
            "airlane_gc_trim_seconds",
            "Time spent returning free memory to the system after full passes",
            self.trim_s,
        )
        yield GaugeMetricFamily(
            "airlane_gc_tracked_objects",
            "Objects the garbage collector tracked after its last full pass",
            self.live_objects,
        )


def _malloc_trim() -> Callable[[], object] | None:
    """``malloc_trim(0)`` of the process's C library, or None where it has none (musl,
    macOS): glibc then gives every wholly free page of its heaps back to the system."""
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return lambda: trim(0)


def peak_rss_kb() -> int:
    """The process's peak resident memory in KiB (one ``getrusage`` call, ~1 us)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak // 1024 if sys.platform == "darwin" else peak  # macOS counts bytes
