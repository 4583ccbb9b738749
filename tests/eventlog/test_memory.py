"""`MemoryEventLog` against the contract, plus its own bounds and clocks."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airlane.eventlog import (
    CapacityExceeded,
    EventLog,
    MemoryEventLog,
    MemoryEventLogConfig,
    NewEvent,
    Validator,
)
from tests.eventlog.contract import EventLogContract, OpenLog


class FakeClock:
    """A wall clock the test moves by hand (Unix nanoseconds)."""

    def __init__(self, now_ns: int = 1_700_000_000 * 10**9) -> None:
        self.now_ns = now_ns

    def __call__(self) -> int:
        return self.now_ns

    def advance(self, seconds: float) -> None:
        self.now_ns += int(seconds * 1e9)


@pytest.fixture
def open_log() -> OpenLog:
    def make(validate: Validator | None = None) -> EventLog:
        return MemoryEventLog(validate=validate)

    return make


class TestMemoryContract(EventLogContract):
    """The shared contract."""


async def test_log_and_group_counts_are_bounded():
    log = MemoryEventLog(MemoryEventLogConfig(max_logs=2, max_groups_per_log=1))
    await log.create_log("a")
    await log.create_log("b")
    with pytest.raises(CapacityExceeded) as raised:
        await log.create_log("c")
    assert raised.value.code == "capacity_exceeded"
    await log.consumer_group("a", "g1")
    await log.consumer_group("a", "g1")  # joining an existing group is not a new one
    with pytest.raises(CapacityExceeded):
        await log.consumer_group("a", "g2")


async def test_defaults_bound_every_log():
    log = MemoryEventLog(MemoryEventLogConfig(default_max_events=2, default_max_bytes=10_000))
    info = await log.create_log("a")
    assert (info.limits.max_events, info.limits.max_bytes) == (2, 10_000)
    await log.append_many("a", [NewEvent("n.v1", b"%d" % i) for i in range(5)])
    assert (await log.info("a")).events == 2


async def test_age_retention_follows_the_configured_clock():
    clock = FakeClock()
    log = MemoryEventLog(MemoryEventLogConfig(clock_ns=clock))
    await log.create_log("a", max_age_s=60)
    first = await log.append("a", "n.v1", b"1")
    assert first.time_ns == clock.now_ns
    clock.advance(30)
    await log.append("a", "n.v1", b"2")
    clock.advance(31)
    assert [r.seq for r in await log.read("a")] == [2]


async def test_record_times_never_go_backwards():
    clock = FakeClock()
    log = MemoryEventLog(MemoryEventLogConfig(clock_ns=clock))
    await log.create_log("a")
    first = await log.append("a", "n.v1", b"1")
    clock.advance(-5)  # an NTP step back
    second = await log.append("a", "n.v1", b"2")
    assert second.time_ns == first.time_ns
    assert [r.seq for r in await log.read("a", from_time_ns=first.time_ns)] == [1, 2]


async def test_idempotency_keys_expire_and_are_bounded():
    clock = FakeClock()
    config = MemoryEventLogConfig(clock_ns=clock, dedup_window_s=10, max_idempotency_keys=2)
    log = MemoryEventLog(config)
    await log.create_log("a")
    original = await log.append("a", "n.v1", b"1", idempotency_key="k")
    clock.advance(5)
    assert await log.append("a", "n.v1", b"1", idempotency_key="k") == original
    clock.advance(6)
    assert (await log.append("a", "n.v1", b"1", idempotency_key="k")).seq == 2
    for key in ("x", "y"):  # two newer keys push "k" out of a two-key memory
        await log.append("a", "n.v1", b"", idempotency_key=key)
    assert (await log.append("a", "n.v1", b"1", idempotency_key="k")).seq == 5


async def test_a_retry_after_trimming_still_returns_the_original_seq():
    log = MemoryEventLog()
    await log.create_log("a", max_events=1)
    original = await log.append("a", "n.v1", b"1", idempotency_key="k")
    await log.append("a", "n.v1", b"2")
    retry = await log.append("a", "n.v1", b"1", idempotency_key="k")
    assert retry == original  # rebuilt: same seq, time, type and data


async def test_pending_acks_are_bounded_per_group():
    log = MemoryEventLog(MemoryEventLogConfig(max_ack_pending=2))
    await log.create_log("a")
    await log.append_many("a", [NewEvent("n.v1", b"") for _ in range(5)])
    group = await log.consumer_group("a", "g")
    first = await group.fetch(10, timeout_s=0)
    assert [d.seq for d in first] == [1, 2]
    assert await group.fetch(10, timeout_s=0.05) == []
    waiting = asyncio.create_task(group.fetch(10, timeout_s=2))
    await asyncio.sleep(0.01)
    await first[0].ack()  # frees a slot and wakes the waiting member
    assert [d.seq for d in await waiting] == [3]


async def test_a_waiting_member_wakes_on_append():
    log = MemoryEventLog()
    await log.create_log("a")
    group = await log.consumer_group("a", "g")
    waiting = asyncio.create_task(group.fetch(timeout_s=5))
    await asyncio.sleep(0.01)
    await log.append("a", "n.v1", b"")
    async with asyncio.timeout(1):
        assert [d.seq for d in await waiting] == [1]


# Invariant: whatever the interleaving of appends (some retried with an idempotency key) and
# reads, the log equals a list model: seqs 1..N without gaps, the newest ``max_events`` kept,
# a retried key answered with its original seq, and a read a slice of the model.
operations = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.lists(st.integers(0, 8), min_size=1, max_size=4)),
        st.tuples(st.just("read"), st.integers(1, 30), st.integers(1, 10)),
    ),
    max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(ops=operations, max_events=st.integers(1, 12))
def test_the_log_behaves_like_a_list(ops, max_events):
    asyncio.run(_check_against_model(ops, max_events))


async def _check_against_model(ops, max_events: int) -> None:
    log = MemoryEventLog()
    await log.create_log("m", max_events=max_events)
    model: list[bytes] = []
    keyed: dict[int, int] = {}  # key -> seq
    for op in ops:
        if op[0] == "append":
            events = [NewEvent("n.v1", b"%d" % k, idempotency_key=f"k{k}") for k in op[1]]
            records = await log.append_many("m", events)
            for key, record in zip(op[1], records, strict=True):
                if key in keyed:
                    assert record.seq == keyed[key]
                else:
                    model.append(b"%d" % key)
                    keyed[key] = len(model)
                    assert record.seq == len(model)
        else:
            _, from_seq, limit = op
            first = max(len(model) - max_events + 1, 1)
            start = max(from_seq, first)
            expected = list(range(start, min(start + limit, len(model) + 1)))
            assert [r.seq for r in await log.read("m", from_seq=from_seq, limit=limit)] == expected
    info = await log.info("m")
    assert info.last_seq == len(model) and info.events == min(len(model), max_events)
