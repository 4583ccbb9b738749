"""The shared pacer: never early, in deadline order, one timer for all sleepers."""

from __future__ import annotations

import asyncio
import time

import pytest

from airlane.backends.pacing import Pacer


async def test_sleepers_wake_at_or_after_their_deadlines_in_order() -> None:
    pacer = Pacer.for_loop(None)
    start = time.monotonic_ns()
    deadlines = [start + offset_ms * 1_000_000 for offset_ms in (7, 2, 5, 2, 11, 0)]
    woken: list[tuple[int, int]] = []

    async def sleeper(deadline: int) -> None:
        await pacer.sleep_until(deadline)
        woken.append((deadline, time.monotonic_ns()))

    await asyncio.gather(*(sleeper(d) for d in deadlines))
    assert sorted(d for d, _ in woken) == sorted(deadlines)
    assert [d for d, _ in woken] == sorted(deadlines)  # in deadline order
    for deadline, at in woken:
        assert at >= deadline  # never early
        assert at - deadline < 50_000_000  # and not absurdly late, even on a busy machine
    assert pacer.sleepers == 0


async def test_one_timer_serves_many_sleepers() -> None:
    pacer = Pacer.for_loop(None)
    fires = 0
    fire = pacer._fire

    def counting_fire() -> None:
        nonlocal fires
        fires += 1
        fire()

    pacer._fire = counting_fire  # type: ignore[method-assign]
    # Far enough ahead that starting 200 sleepers never outlasts it, even on a busy machine
    # (a deadline already past needs no timer at all: that made this test flaky at 5 ms).
    deadline = time.monotonic_ns() + 100_000_000
    await asyncio.gather(*(pacer.sleep_until(deadline) for _ in range(200)))
    # One timer for the shared deadline; a second only if the loop's clock fired it early.
    assert 1 <= fires <= 3


async def test_a_cancelled_sleeper_does_not_disturb_the_others() -> None:
    pacer = Pacer.for_loop(None)
    deadline = time.monotonic_ns() + 5_000_000
    doomed = asyncio.create_task(pacer.sleep_until(deadline))
    survivor = asyncio.create_task(pacer.sleep_until(deadline))
    await asyncio.sleep(0)
    doomed.cancel()
    with pytest.raises(asyncio.CancelledError):
        await doomed
    await asyncio.wait_for(survivor, 1.0)
    assert time.monotonic_ns() >= deadline
    assert pacer.sleepers == 0


async def test_a_past_deadline_still_yields_to_the_loop() -> None:
    pacer = Pacer.for_loop(None)
    ran = False

    async def other() -> None:
        nonlocal ran
        ran = True

    task = asyncio.create_task(other())
    await pacer.sleep_until(time.monotonic_ns() - 1)
    assert ran
    await task


async def test_a_pacer_is_remade_for_another_loop() -> None:
    pacer = Pacer.for_loop(None)
    assert Pacer.for_loop(pacer) is pacer
    other_loop_pacer = Pacer(asyncio.new_event_loop())
    try:
        assert Pacer.for_loop(other_loop_pacer) is not other_loop_pacer
    finally:
        other_loop_pacer._loop.close()
