"""`GcPacer`: freezes what is alive every tick, collects everything on its schedule, and
hands the process back to CPython's collector when stopped."""

from __future__ import annotations

import asyncio
import gc
import platform
import subprocess
import sys
import time
import weakref
from pathlib import Path

import pytest

from airlane.server import gcpacer
from airlane.server.gcpacer import (
    DEFAULT_S_PER_OBJECT,
    GC_GEN0_THRESHOLD,
    MAX_ANNOUNCE_WAIT_S,
    MAX_EARLY_BEAT_S,
    GcConfig,
    GcPacer,
    peak_rss_kb,
    tune_gc,
)
from airlane.server.gcturns import GcTurns, turns_path


class _Cycle:
    """An object that refers to itself: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


def _garbage_cycle() -> weakref.ref[_Cycle]:
    return weakref.ref(_Cycle())


@pytest.mark.parametrize(
    "settings",
    [
        {"tick_s": 0},
        {"min_full_interval_s": -1},
        {"min_full_interval_s": 10, "max_full_interval_s": 5},
        {"full_after_growth_mib": 0},
        {"quiet_cpu_share": -0.1},
        {"max_quiet_wait_s": -1},
    ],
)
def test_bad_settings_are_refused(settings):
    with pytest.raises(ValueError, match="gc"):
        GcConfig(**settings)


def test_tune_gc_freezes_start_up_and_raises_the_young_threshold(restore_gc):
    tune_gc()
    assert gc.get_threshold()[0] == GC_GEN0_THRESHOLD
    assert gc.get_freeze_count() > 0


async def test_ticks_freeze_what_is_alive_and_stop_hands_it_back(restore_gc):
    before = gc.get_threshold()
    pacer = GcPacer(GcConfig(tick_s=0.01))
    pacer.start()
    try:
        assert pacer.running
        kept = [_Cycle() for _ in range(1000)]
        await asyncio.sleep(0.05)
        assert gc.get_count()[0] < 1000  # frozen by a tick: no automatic pass will walk them
        assert all(gc.is_tracked(item) for item in kept)
        with pytest.raises(RuntimeError, match="already started"):
            pacer.start()
    finally:
        pacer.stop()
    assert not pacer.running
    assert gc.get_freeze_count() == 0
    assert gc.get_threshold() == before


async def test_cyclic_garbage_waits_for_a_full_pass(restore_gc):
    pacer = GcPacer(GcConfig(tick_s=0.01, max_full_interval_s=3600))
    pacer.start()
    try:
        cycle = _garbage_cycle()
        await asyncio.sleep(0.05)
        assert cycle() is not None  # frozen with the rest: no pass sees it
        assert pacer.collect_now() >= 1
        assert cycle() is None
        assert pacer.full_passes == 1 and pacer.collected >= 1
        assert pacer.live_objects > 0 and pacer.longest_pause_s > 0
    finally:
        pacer.stop()


async def test_a_full_pass_at_least_every_max_interval(restore_gc):
    pacer = GcPacer(GcConfig(tick_s=0.01, min_full_interval_s=0, max_full_interval_s=0.05))
    pacer.start()
    try:
        cycle = _garbage_cycle()
        for _ in range(100):
            await asyncio.sleep(0.02)
            if cycle() is None:
                break
        assert cycle() is None
        assert pacer.full_passes >= 1
    finally:
        pacer.stop()


async def test_a_full_pass_once_the_process_has_grown(restore_gc):
    memory_kb = [100_000]
    config = GcConfig(
        tick_s=0.01, min_full_interval_s=0, max_full_interval_s=3600, full_after_growth_mib=1
    )
    pacer = GcPacer(config, memory_kb=lambda: memory_kb[0])
    pacer.start()
    try:
        await asyncio.sleep(0.03)
        memory_kb[0] += 1000  # less than a MiB more
        await asyncio.sleep(0.03)
        assert pacer.full_passes == 0
        memory_kb[0] += 100
        for _ in range(100):
            await asyncio.sleep(0.01)
            if pacer.full_passes:
                break
        assert pacer.full_passes == 1  # and the next one only after another MiB
        await asyncio.sleep(0.03)
        assert pacer.full_passes == 1
    finally:
        pacer.stop()


@pytest.mark.parametrize("word_out", [True, False])
async def test_a_scheduled_pass_is_announced_and_waits_for_the_word_to_be_out(restore_gc, word_out):
    """`announce` (in ``airlane serve``, `Hub.pausing`: the other processes of a cluster
    allow for the silence) hears how long the pass is expected to take; the pass waits for
    what it returns (the broker has the word), or `MAX_ANNOUNCE_WAIT_S` at most."""
    memory_kb = [100_000]
    loop = asyncio.get_running_loop()
    sent: asyncio.Future[None] = loop.create_future()
    heard: list[float] = []

    def announce(seconds: float) -> asyncio.Future[None]:
        heard.append(seconds)
        return sent

    config = GcConfig(
        tick_s=0.01, min_full_interval_s=0, max_full_interval_s=3600, full_after_growth_mib=1
    )
    pacer = GcPacer(config, memory_kb=lambda: memory_kb[0], announce=announce)
    pacer.start()
    try:
        await asyncio.sleep(0.03)
        assert heard == []
        memory_kb[0] += 2048
        await asyncio.sleep(0.3)
        assert len(heard) == 1 and pacer.full_passes == 0  # said, and waiting
        # Twice the expected pause (2 us per object before any pass: a test process tracks
        # well over 10,000) and a tick, within the bound.
        assert 2 * 10_000 * 2e-6 + 0.01 < heard[0] <= MAX_EARLY_BEAT_S
        if word_out:
            sent.set_result(None)
            await _wait_for_passes(pacer, 1, limit_s=0.5)
        else:
            await _wait_for_passes(pacer, 1, limit_s=MAX_ANNOUNCE_WAIT_S + 1)
            assert sent.cancelled()
        assert pacer.full_passes == 1 and len(heard) == 1
    finally:
        pacer.stop()


class _BusyClock:
    """A process CPU clock that runs as fast as the wall clock while ``busy`` (a process
    using a whole CPU) and stands still otherwise."""

    def __init__(self) -> None:
        self.busy = True
        self._cpu = 0.0
        self._at = time.monotonic()

    def __call__(self) -> float:
        now = time.monotonic()
        if self.busy:
            self._cpu += now - self._at
        self._at = now
        return self._cpu


async def _wait_for_passes(pacer: GcPacer, count: int, limit_s: float = 2.0) -> None:
    deadline = time.monotonic() + limit_s
    while pacer.full_passes < count and time.monotonic() < deadline:
        await asyncio.sleep(0.01)


async def test_a_due_pass_waits_for_a_quiet_tick(restore_gc):
    clock = _BusyClock()
    config = GcConfig(tick_s=0.01, min_full_interval_s=0, max_full_interval_s=0.02)
    pacer = GcPacer(config, cpu_s=clock)
    pacer.start()
    try:
        cycle = _garbage_cycle()
        await asyncio.sleep(0.2)  # due from the second tick on, and busy all along
        assert pacer.full_passes == 0 and cycle() is not None
        clock.busy = False
        await _wait_for_passes(pacer, 1)
        assert pacer.full_passes >= 1 and cycle() is None
        assert pacer.quiet_wait_s >= 0.15  # how long it was held back
    finally:
        pacer.stop()


async def test_a_due_pass_runs_anyway_after_the_longest_wait(restore_gc):
    clock = _BusyClock()
    config = GcConfig(
        tick_s=0.01, min_full_interval_s=0, max_full_interval_s=0.02, max_quiet_wait_s=0.1
    )
    pacer = GcPacer(config, cpu_s=clock)
    pacer.start()
    try:
        await _wait_for_passes(pacer, 1)
        assert pacer.full_passes >= 1
        assert 0.1 <= pacer.quiet_wait_s < 1.0
    finally:
        pacer.stop()


def _pacer_behind_a_sibling(directory: Path) -> tuple[GcTurns, GcPacer]:
    """A sibling holding the turn, and a started pacer (always quiet, a pass due every
    tick) that shares it."""
    path = turns_path(directory)
    sibling = GcTurns(path)
    assert sibling.take()
    config = GcConfig(tick_s=0.01, min_full_interval_s=0, max_full_interval_s=0.02)
    pacer = GcPacer(config, cpu_s=lambda: 0.0, turns=GcTurns(path))
    pacer.start()
    return sibling, pacer


async def test_a_due_pass_waits_for_a_siblings_pass_to_end(restore_gc, tmp_path):
    """Another worker holds the turn (its pass runs): a due pass waits, its wait counted as
    such and not as waiting for a quiet tick, and runs once the turn is given back. The
    pacer gives the turn back after its own pass, and closes it on stop."""
    sibling, pacer = _pacer_behind_a_sibling(tmp_path)
    try:
        cycle = _garbage_cycle()
        await asyncio.sleep(0.3)
        assert pacer.full_passes == 0 and cycle() is not None
        sibling.give_back()
        await _wait_for_passes(pacer, 1)
        assert pacer.full_passes >= 1 and cycle() is None
        assert 0.2 <= pacer.turn_wait_s < 2.0
        assert pacer.quiet_wait_s < 0.2  # it was quiet all along: the wait was the turn's
        assert sibling.take()  # the pacer holds it only within the tick of a pass
        sibling.give_back()
    finally:
        pacer.stop()
    assert sibling.take()  # stop closed the pacer's handle
    sibling.close()


async def test_a_due_pass_runs_alongside_a_sibling_that_never_ends(
    restore_gc, tmp_path, monkeypatch
):
    monkeypatch.setattr(gcpacer, "MAX_TURN_WAIT_S", 0.2)
    sibling, pacer = _pacer_behind_a_sibling(tmp_path)
    try:
        await _wait_for_passes(pacer, 1)
        assert pacer.full_passes >= 1 and pacer.turn_wait_s >= 0.2
    finally:
        pacer.stop()
        sibling.close()


async def test_a_pacer_started_again_takes_turns_as_before(restore_gc, tmp_path):
    """`stop` closes the pacer's turn; after `start` again its due passes still wait for a
    sibling's and run as soon as it ends (not after `MAX_TURN_WAIT_S`, alongside)."""
    sibling, pacer = _pacer_behind_a_sibling(tmp_path)
    pacer.stop()
    pacer.start()
    try:
        await asyncio.sleep(0.2)
        assert pacer.full_passes == 0  # the sibling's turn: waited for
        sibling.give_back()
        await _wait_for_passes(pacer, 1)
        assert pacer.full_passes >= 1 and pacer.turn_wait_s < gcpacer.MAX_TURN_WAIT_S
    finally:
        pacer.stop()
        sibling.close()


def test_peak_memory_is_read():
    assert peak_rss_kb() > 1024  # an interpreter takes more than a MiB


async def test_unpaced_only_tunes(restore_gc):
    pacer = GcPacer(GcConfig(paced=False))
    pacer.start()
    try:
        assert not pacer.running
        assert gc.get_threshold()[0] == GC_GEN0_THRESHOLD
    finally:
        pacer.stop()


def test_prometheus_families():
    pacer = GcPacer()
    names = {family.name for family in pacer.collect()}
    assert names == {
        "airlane_gc_full_collections",
        "airlane_gc_full_collection_seconds",
        "airlane_gc_full_collection_cpu_seconds",
        "airlane_gc_early_heartbeats",
        "airlane_gc_collected_objects",
        "airlane_gc_full_collection_wait_seconds",
        "airlane_gc_turn_wait_seconds",
        "airlane_gc_trim_seconds",
        "airlane_gc_tracked_objects",
    }


def test_a_pass_is_timed_on_the_clock_and_the_cpu_and_expected_from_the_last(restore_gc):
    pacer = GcPacer()
    assert pacer.expected_pause_s(1_000_000) == pytest.approx(2.0)  # before any pass: 2 us
    pacer.collect_now()
    assert 0 < pacer.full_cpu_s <= pacer.full_pause_s * 1.1 + 0.005
    walked = gc.get_freeze_count()
    # Now as long per object as that pass took, but never less than the default.
    expected = max(pacer.full_pause_s, walked * DEFAULT_S_PER_OBJECT)
    assert pacer.expected_pause_s(walked) == pytest.approx(expected, rel=0.5)


def test_a_fast_pass_does_not_lower_the_expected_pause_below_the_default(restore_gc):
    """A pass that had a core to itself is followed by ones that share it: the expectation
    stays at the default per object at least."""
    pacer = GcPacer()
    pacer._s_per_object = 1e-3  # as if the last pass had been slow
    pacer.collect_now()  # a pass over this test process's objects: about 1 us each
    per_object = pacer.full_pause_s / gc.get_freeze_count()
    assert pacer.expected_pause_s(1_000_000) == pytest.approx(
        1_000_000 * max(per_object, DEFAULT_S_PER_OBJECT), rel=0.2
    )
    assert pacer.expected_pause_s(1_000_000) >= 2.0


# Fills the C heap with 1 KB blocks, pins its top with one more, frees the blocks and runs
# one full pass: prints how much resident memory the pass gave back, and the trim's time.
_TRIM_SCRIPT = """
import sys
from airlane.server.gcpacer import GcConfig, GcPacer

def rss_kb():
    with open("/proc/self/status") as status:
        return int(next(line for line in status if line.startswith("VmRSS")).split()[1])

blocks = [bytes(1000) + bytes([i % 256]) for i in range(60_000)]
pin = bytes(1000) + b"top"
before = rss_kb()
del blocks
pacer = GcPacer(GcConfig(trim_after_full=sys.argv[1] == "on"))
pacer.collect_now()
print(before - rss_kb(), pacer.trim_s)
"""


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc",
    reason="reads /proc; trims with glibc's malloc_trim",
)
@pytest.mark.parametrize("trim", ["on", "off"])
def test_a_full_pass_gives_free_memory_back(trim: str) -> None:
    """With ``trim_after_full`` (the default) a full pass returns the heap's free pages to
    the system: ~60 MB of freed 1 KB blocks under a pinned heap top leave the resident size;
    without it the allocator keeps them."""
    result = subprocess.run(
        [sys.executable, "-c", _TRIM_SCRIPT, trim],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    released_kb, trim_s = result.stdout.split()
    if trim == "on":
        assert int(released_kb) > 40_000 and float(trim_s) > 0, result.stdout
    else:
        assert int(released_kb) < 10_000 and float(trim_s) == 0, result.stdout


async def test_a_failing_tick_still_ticks_on(restore_gc):
    calls = [0]

    def memory_kb() -> int:
        calls[0] += 1
        if calls[0] == 2:  # the first tick's check (the first call is start's)
            raise OSError("no getrusage today")
        return 100_000

    pacer = GcPacer(GcConfig(tick_s=0.01, min_full_interval_s=0), memory_kb=memory_kb)
    loop = asyncio.get_running_loop()
    errors: list[object] = []
    loop.set_exception_handler(lambda _loop, context: errors.append(context.get("exception")))
    pacer.start()
    try:
        for _ in range(100):
            await asyncio.sleep(0.01)
            if calls[0] >= 4:
                break
        assert calls[0] >= 4 and pacer.running
        assert any(isinstance(error, OSError) for error in errors)
    finally:
        pacer.stop()
        loop.set_exception_handler(None)
