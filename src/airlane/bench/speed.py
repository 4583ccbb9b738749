"""`python_op_ns`: how fast this machine runs Python right now, as one number.

The VMs these benchmarks run on vary by up to three times from day to day (the same code,
the same workload; docs/performance.md): a run's numbers mean little without the machine's
speed at the time. Before each transport's run, the load client times a fixed piece of pure
Python shaped like the gateway's per-chunk work (attribute reads and writes on a slotted
object, a method call, dictionary and list operations, integer arithmetic) and reports the
median of many short timings, in nanoseconds per step: lower is a faster machine. Runs
compare where this number is close; one taken at twice the number ran on a machine half as
fast.

The median of timings spread over about a tenth of a second, not the fastest one: on the
third VM the speed swings between two states (225 and 520 ns a step) every hundred
milliseconds or so, with the machine otherwise idle, so the fastest of a few timings says
how fast the machine can be, and only a median over several swings says how fast it is
(ten medians half a second apart agreed within 5 %). It is the machine's state just before
the run: the VM also keeps one state or the other for longer stretches (probes before runs
minutes apart read 246-519 ns a step), which a run of a few seconds may span.
"""

from __future__ import annotations

import statistics
import time

__all__ = ["PROBE_STEPS", "PROBE_TIMINGS", "python_op_ns"]

PROBE_STEPS = 5_000
"""Steps of one timing: 1-2.5 ms on the VMs measured."""
PROBE_TIMINGS = 41
"""Timings taken one after the other (about 0.1 s in all); their median counts."""


class _Item:
    __slots__ = ("count", "seq")

    def __init__(self) -> None:
        self.seq = 0
        self.count = 0

    def step(self, value: int) -> int:
        self.count += 1
        return value + self.count


def _probe(steps: int) -> int:
    item, table, out = _Item(), {}, []
    for i in range(steps):
        item.seq = i
        table[i & 63] = item.step(i)
        out.append(table.get(i & 31, 0) >> 1)
        if len(out) > 64:
            out.clear()
    return item.count


def python_op_ns(steps: int = PROBE_STEPS, timings: int = PROBE_TIMINGS) -> float:
    """Nanoseconds per step of the probe on this process's CPU now: the median of
    ``timings`` timings of ``steps`` steps each."""
    if steps < 1 or timings < 1:
        raise ValueError("steps and timings must be at least 1")
    elapsed = []
    for _ in range(timings):
        started = time.perf_counter_ns()
        _probe(steps)
        elapsed.append(time.perf_counter_ns() - started)
    return statistics.median(elapsed) / steps
