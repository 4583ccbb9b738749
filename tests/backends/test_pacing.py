"""The shared pacer: never early, in deadline order, one wake-up per slot of sleepers; on a
timerfd (quarter-millisecond slots) where there is one, on the loop's timers (millisecond
slots) otherwise. The general tests run against both."""

from __future__ import annotations

import asyncio
import select
import sys
import time
from collections.abc import AsyncIterator

import pytest

from airlane.backends import pacing
from airlane.backends.pacing import FINE_SLOT_NS, Pacer
from airlane.backends.timerfd import TimerFd

ON_LINUX = sys.platform.startswith("linux")


@pytest.fixture(params=["timerfd", "loop-timers"])
async def pacer(request: pytest.FixtureRequest) -> AsyncIterator[Pacer]:
    made = Pacer(asyncio.get_running_loop(), precise=request.param == "timerfd")
    if request.param == "timerfd" and not made.precise:
        made.close()
        if ON_LINUX:
            pytest.fail("no timerfd on Linux")
        pytest.skip("timerfd is Linux only")
    yield made
    made.close()


async def test_sleepers_wake_at_or_after_their_deadlines_in_order(pacer: Pacer) -> None:
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
    pacer = Pacer(asyncio.get_running_loop(), precise=False)
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
    pacer = Pacer(asyncio.get_running_loop(), precise=False)
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


async def test_a_cancelled_sleeper_does_not_disturb_the_others(pacer: Pacer) -> None:
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


async def test_a_past_deadline_still_yields_to_the_loop(pacer: Pacer) -> None:
    ran = False

    async def other() -> None:
        nonlocal ran
        ran = True

    task = asyncio.create_task(other())
    await pacer.sleep_until(time.monotonic_ns() - 1)
    assert ran
    await task


async def test_a_pacer_is_remade_for_another_loop_and_the_old_one_closed() -> None:
    pacer = Pacer.for_loop(None)
    assert Pacer.for_loop(pacer) is pacer
    other_loop = asyncio.new_event_loop()
    other_loop_pacer = Pacer(other_loop)
    try:
        remade = Pacer.for_loop(other_loop_pacer)
        assert remade is not other_loop_pacer
        assert not other_loop_pacer.precise  # its timerfd released
        remade.close()
    finally:
        other_loop.close()
    pacer.close()


# -- the timerfd ----------------------------------------------------------------------------


@pytest.fixture
def precise_pacer_or_skip() -> None:
    if TimerFd.open() is None:
        if ON_LINUX:
            pytest.fail("no timerfd on Linux")
        pytest.skip("timerfd is Linux only")


@pytest.mark.usefixtures("precise_pacer_or_skip")
async def test_one_timerfd_expiry_wakes_a_shared_deadline() -> None:
    pacer = Pacer(asyncio.get_running_loop())
    expiries = 0
    on_timerfd = pacer._on_timerfd

    def counting() -> None:
        nonlocal expiries
        expiries += 1
        on_timerfd()

    # add_reader holds the bound method given at construction: swap the reader.
    loop = asyncio.get_running_loop()
    loop.remove_reader(pacer._timerfd.fileno())  # type: ignore[union-attr]
    loop.add_reader(pacer._timerfd.fileno(), counting)  # type: ignore[union-attr]
    deadline = time.monotonic_ns() + 100_000_000
    await asyncio.gather(*(pacer.sleep_until(deadline) for _ in range(200)))
    assert expiries == 1
    assert time.monotonic_ns() >= deadline
    pacer.close()


@pytest.mark.usefixtures("precise_pacer_or_skip")
async def test_quarter_millisecond_slots_in_order_first_come_first_woken() -> None:
    pacer = Pacer(asyncio.get_running_loop())
    assert pacer.precise
    base = (time.monotonic_ns() // FINE_SLOT_NS + 400) * FINE_SLOT_NS  # 100 ms ahead
    # Three deadlines in each of eight slots, filed latest first within each slot.
    deadlines = [
        base + slot * FINE_SLOT_NS - offset_us * 1_000
        for slot in range(8)
        for offset_us in (10, 100, 200)
    ]
    woken: list[int] = []

    async def sleeper(deadline: int) -> None:
        await pacer.sleep_until(deadline)
        assert time.monotonic_ns() >= deadline  # never early
        woken.append(deadline)

    await asyncio.gather(*(sleeper(d) for d in deadlines))
    assert woken == deadlines  # slot order, then the order they came in
    assert pacer.sleepers == 0 and pacer._slots == [] and pacer._armed is None
    pacer.close()


@pytest.mark.usefixtures("precise_pacer_or_skip")
async def test_an_earlier_sleeper_re_arms_the_timerfd_sooner() -> None:
    pacer = Pacer(asyncio.get_running_loop())
    now = time.monotonic_ns()
    late = asyncio.create_task(pacer.sleep_until(now + 200_000_000))
    await asyncio.sleep(0)
    started = time.monotonic_ns()
    await pacer.sleep_until(now + 5_000_000)  # filed second, due first
    assert time.monotonic_ns() - started < 150_000_000  # not held until the later slot
    assert not late.done()
    await late
    pacer.close()


async def test_without_a_timerfd_the_loop_timers_take_over(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pacing.TimerFd, "open", classmethod(lambda cls: None))
    pacer = Pacer(asyncio.get_running_loop())
    assert not pacer.precise
    deadline = time.monotonic_ns() + 3_000_000
    await pacer.sleep_until(deadline)
    assert time.monotonic_ns() >= deadline
    pacer.close()


@pytest.mark.usefixtures("precise_pacer_or_skip")
def test_a_timerfd_becomes_readable_at_its_time_until_cleared() -> None:
    timerfd = TimerFd.open()
    assert timerfd is not None
    try:
        assert select.select([timerfd.fileno()], [], [], 0)[0] == []  # not armed
        timerfd.set_ns(time.monotonic_ns() + 20_000_000)
        assert select.select([timerfd.fileno()], [], [], 0)[0] == []  # not yet
        assert select.select([timerfd.fileno()], [], [], 1.0)[0] == [timerfd.fileno()]
        timerfd.clear()
        assert select.select([timerfd.fileno()], [], [], 0)[0] == []
        timerfd.set_ns(time.monotonic_ns() - 1)  # in the past: expires at once
        assert select.select([timerfd.fileno()], [], [], 1.0)[0] == [timerfd.fileno()]
        timerfd.clear()
        timerfd.clear()  # nothing to read: no error
    finally:
        timerfd.close()
    timerfd.close()  # idempotent
    assert timerfd.fileno() == -1
    with pytest.raises(OSError):
        timerfd.set_ns(time.monotonic_ns())
