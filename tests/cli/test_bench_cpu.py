"""`CpuSampler`: the CPU of the gateway and the client over a run, and the virtual machine's
steal, from the real ``/proc`` (psutil) of this machine."""

from __future__ import annotations

import asyncio
import collections
import os
import time

import pytest

from airlane.bench import cpu as cpu_module
from airlane.bench.cpu import CpuSampler, steal_share_pct


def busy(seconds: float) -> None:
    """Burn this process's CPU for ``seconds``."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


async def test_the_client_cpu_and_the_steal_of_a_busy_run() -> None:
    async with CpuSampler(None, interval_s=0.05) as sampler:
        busy(0.2)
        await asyncio.sleep(0.1)
    assert sampler.server is None  # no gateway to watch
    assert sampler.client is not None and sampler.client.mean_pct > 20
    assert sampler.steal_pct is None  # a run this short cannot tell steal (10 ms ticks)


async def test_a_gateway_is_watched_by_its_pid() -> None:
    async with CpuSampler(os.getpid(), interval_s=0.05) as sampler:
        busy(0.1)
    assert sampler.server is not None and sampler.server.mean_pct > 20


def test_steal_is_the_share_of_all_cpu_time_the_hypervisor_took() -> None:
    # 0.1 s of steal (summed over CPUs, as /proc/stat counts it) over 1 s on two CPUs: 5 % of
    # the machine's CPU time.
    assert steal_share_pct(0.1, 1.0, 2) == pytest.approx(5.0)
    assert steal_share_pct(0.0, 1.0, 2) == 0.0
    assert steal_share_pct(-0.01, 1.0, 2) == 0.0  # counters read a tick apart
    assert steal_share_pct(0.1, 0.0, 2) is None
    # A few milliseconds of run and one 10 ms tick of steal: not 434 %, nothing.
    assert steal_share_pct(0.01, 0.0023, 1) is None
    assert steal_share_pct(3.0, 1.0, 2) is None  # more steal than time: cannot be right


async def test_steal_over_a_run_comes_from_the_counter_before_and_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    readings = iter([10.0, 10.01])
    monkeypatch.setattr(cpu_module, "_steal_s", lambda: next(readings))
    monkeypatch.setattr(cpu_module, "MIN_STEAL_WALL_S", 0.01)  # a short run counts, here
    async with CpuSampler(None, interval_s=10) as sampler:
        await asyncio.sleep(0.05)
    assert sampler.steal_pct is not None and sampler.steal_pct > 0


async def test_no_steal_where_the_os_reports_none(monkeypatch: pytest.MonkeyPatch) -> None:
    times = collections.namedtuple("times", "user system idle")
    monkeypatch.setattr(cpu_module.psutil, "cpu_times", lambda: times(1.0, 1.0, 1.0))
    async with CpuSampler(None, interval_s=10) as sampler:
        pass
    assert sampler.steal_pct is None
