"""The shared pacer: never early, in deadline order, one timer per millisecond of sleepers."""

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

    def counting_fire(due_ms: int) -> None:
        nonlocal fires
        fires += 1
        fire(due_ms)

    pacer._fire = counting_fire  # type: ignore[method-assign]
    # Far enough ahead that starting 200 sleepers never outlasts it, even on a busy machine
    # (a deadline already past needs no timer at all: that made this test flaky at 5 ms).
    deadline = time.monotonic_ns() + 100_000_000
    await asyncio.gather(*(pacer.sleep_until(deadline) for _ in range(200)))
    # One timer for the shared deadline; a second only if the loop's clock fired it early.
    assert 1 <= fires <= 3


async def test_sleepers_share_a_timer_per_millisecond_first_come_first_woken() -> None:
    pacer = Pacer.for_loop(None)
    fired: list[int] = []
    fire = pacer._fire

    def recording_fire(due_ms: int) -> None:
        fired.append(due_ms)
        fire(due_ms)

    pacer._fire = recording_fire  # type: ignore[method-assign]
    # Four deadlines in each of ten milliseconds, filed latest first within each millisecond.
    base_ms = time.monotonic_ns() // 1_000_000 + 100
    deadlines = [
        (base_ms + ms) * 1_000_000 - offset_us * 1_000
        for ms in range(10)
        for offset_us in (100, 300, 500, 700)
    ]
    woken: list[int] = []

    async def sleeper(deadline: int) -> None:
        await pacer.sleep_until(deadline)
        assert time.monotonic_ns() >= deadline
        woken.append(deadline)

    await asyncio.gather(*(sleeper(d) for d in deadlines))
    assert sorted(set(fired)) == [base_ms + ms for ms in range(10)]
    assert len(fired) <= 20  # a second fire only where the loop's clock was early
    assert woken == deadlines  # millisecond order, then the order they came in
    assert pacer.sleepers == 0


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


async def test_call_backs_run_at_their_deadlines_among_the_sleepers_in_filing_order() -> None:
    pacer = Pacer.for_loop(None)
    deadline = time.monotonic_ns() + 20_000_000
    order: list[str] = []

    def call(name: str) -> None:
        assert time.monotonic_ns() >= deadline  # never early
        order.append(name)

    async def sleeper() -> None:
        await pacer.sleep_until(deadline)
        order.append("sleeper")

    pacer.call_at(deadline, lambda: call("first"))
    task = asyncio.create_task(sleeper())
    await asyncio.sleep(0)  # the sleeper files its wake-up after the first call-back
    pacer.call_at(deadline, lambda: call("last"))
    await asyncio.wait_for(task, 1.0)
    # The sleeper's task resumes a step after its wake-up: both call-backs ran by then.
    assert order == ["first", "last", "sleeper"]
    assert pacer.sleepers == 0


async def test_a_call_back_for_a_past_deadline_runs_on_the_next_turn() -> None:
    pacer = Pacer.for_loop(None)
    ran = asyncio.Event()
    pacer.call_at(time.monotonic_ns() - 5_000_000, ran.set)
    assert not ran.is_set()
    await asyncio.wait_for(ran.wait(), 1.0)


async def test_a_failing_call_back_does_not_cost_the_others_their_turn() -> None:
    pacer = Pacer.for_loop(None)
    loop = asyncio.get_running_loop()
    errors: list[object] = []
    loop.set_exception_handler(lambda _loop, context: errors.append(context.get("exception")))
    try:
        ran = asyncio.Event()

        def fails() -> None:
            raise RuntimeError("a bad call-back")

        deadline = time.monotonic_ns() + 2_000_000
        pacer.call_at(deadline, fails)
        pacer.call_at(deadline, ran.set)
        await asyncio.wait_for(ran.wait(), 1.0)
        assert [type(error) for error in errors] == [RuntimeError]
    finally:
        loop.set_exception_handler(None)
