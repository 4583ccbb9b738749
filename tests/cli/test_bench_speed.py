"""The machine-speed probe of `airlane bench` (`airlane.bench.speed`): a number that is
positive, that grows when the machine is slower, and that reaches the report and the JSON.
No timing assertions beyond what holds on any machine."""

from __future__ import annotations

import threading

import pytest

from airlane.bench.speed import python_op_ns


def test_the_probe_gives_nanoseconds_per_step() -> None:
    value = python_op_ns(steps=2_000, timings=3)
    # Each step is a few dozen bytecodes: more than a nanosecond anywhere, less than a
    # millisecond on any machine that can run the benchmark.
    assert 1 < value < 1_000_000


def test_a_busier_interpreter_reads_slower() -> None:
    # Other Python threads take the interpreter lock in turns (every 5 ms by default): a
    # probe run alongside four of them gets a fifth of the time, and each of its long timings
    # spans many turns: about 5x, where a VM's own swings in speed (up to 2x) cannot reach.
    quiet = python_op_ns()
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            sum(range(1_000))

    spinners = [threading.Thread(target=spin) for _ in range(4)]
    for thread in spinners:
        thread.start()
    try:
        busy = python_op_ns(steps=200_000, timings=3)
    finally:
        stop.set()
        for thread in spinners:
            thread.join()
    assert busy > 2.5 * quiet


@pytest.mark.parametrize(("steps", "timings"), [(0, 1), (1, 0)])
def test_sizes_below_one_are_refused(steps: int, timings: int) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        python_op_ns(steps=steps, timings=timings)
