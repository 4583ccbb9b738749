"""The event log contract suite: every `EventLog` implementation must pass it.

Subclass `EventLogContract` and provide an ``open_log`` fixture: a factory
``open_log(validate=None) -> EventLog`` whose logs all live in one namespace that starts
empty for each test. Ack waits are short (0.4-1 s) so that redelivery tests stay quick; the
margins around them are at least 0.15 s, for a busy two-core machine.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from airlane.eventlog import (
    DEFAULT_ACK_WAIT_S,
    ConsumerGroup,
    Delivery,
    EventLog,
    EventTooLarge,
    GroupNotFound,
    GroupSettingsConflict,
    InvalidLogName,
    InvalidRequest,
    LogExists,
    LogNotFound,
    NewEvent,
    Record,
)

OpenLog = Callable[..., EventLog]


async def append_spaced(log: EventLog, name: str, count: int) -> list[Record]:
    """``count`` events a couple of milliseconds apart, so their times differ."""
    records = []
    for i in range(count):
        records.append(await log.append(name, "step.v1", b'{"i": %d}' % i))
        await asyncio.sleep(0.002)
    return records


async def fetch_until(
    group: ConsumerGroup, count: int, timeout: float = 5.0, batch: int = 64
) -> list[Delivery]:
    """Fetch until ``count`` deliveries came (or the timeout passed)."""
    out: list[Delivery] = []
    deadline = time.monotonic() + timeout
    while len(out) < count and time.monotonic() < deadline:
        out.extend(await group.fetch(min(batch, count - len(out)), timeout_s=0.5))
    return out


class EventLogContract:
    """Behaviour every event log shares."""

    exact_delivery_counts = True
    """Whether a record left unsettled is counted 1, 2, ... however loaded the machine (a
    broker's count may skip or repeat a number: see `test_max_deliver_gives_up_on_a_record`)."""

    @pytest.fixture
    def event_log(self, open_log: OpenLog) -> EventLog:
        return open_log()

    def counted(self, delivery: Delivery, expected: int) -> bool:
        """Whether a record handed out again carries the count it should: exactly
        ``expected``, or for a broker whose count may repeat, at least 1 and at most that."""
        if self.exact_delivery_counts:
            return delivery.deliveries == expected
        return 1 <= delivery.deliveries <= expected

    # -- append and replay --------------------------------------------------------------------

    async def test_append_numbers_records_and_read_replays_them(self, event_log: EventLog):
        before = time.time_ns()
        await event_log.create_log("rewards")
        first = await event_log.append(
            "rewards", "reward.v1", b'{"r": 1.5}', headers={"run": "a: b", "é": " ü\r\n", "e": ""}
        )
        rest = await event_log.append_many(
            "rewards",
            [
                NewEvent("reward.v1", b'{"r": 2}'),
                NewEvent("frame.v1", b"\x00\xff", content_type="application/octet-stream"),
            ],
        )
        records = [first, *rest]
        assert [r.seq for r in records] == [1, 2, 3]
        assert all(r.log == "rewards" for r in records)
        times = [r.time_ns for r in records]
        assert times == sorted(times) and before - 5e9 < times[0] < time.time_ns() + 5e9
        assert await event_log.read("rewards") == records
        assert first.json() == {"r": 1.5}
        assert first.headers == {"run": "a: b", "é": " ü\r\n", "e": ""}
        assert rest[1].data == b"\x00\xff" and rest[1].content_type == "application/octet-stream"
        info = await event_log.info("rewards")
        assert (info.first_seq, info.last_seq, info.events) == (1, 3, 3) and info.bytes > 0

    async def test_read_from_a_sequence_with_a_limit(self, event_log: EventLog):
        await event_log.create_log("log")
        await event_log.append_many("log", [NewEvent("n.v1", b"%d" % i) for i in range(10)])
        assert [r.seq for r in await event_log.read("log", from_seq=4, limit=3)] == [4, 5, 6]
        assert [r.data for r in await event_log.read("log", from_seq=9)] == [b"8", b"9"]
        assert await event_log.read("log", from_seq=11) == []
        assert len(await event_log.read("log", limit=100)) == 10

    async def test_read_from_a_time(self, event_log: EventLog):
        await event_log.create_log("log")
        records = await append_spaced(event_log, "log", 5)
        at = records[2].time_ns

        async def seqs(from_time_ns: int) -> list[int]:
            return [r.seq for r in await event_log.read("log", from_time_ns=from_time_ns)]

        assert await seqs(at) == [3, 4, 5]  # at or after: the record stamped at ``at`` counts
        assert await seqs(at + 1) == [4, 5]
        assert await seqs(0) == [1, 2, 3, 4, 5]
        assert await seqs(records[-1].time_ns + 1) == []
        assert await event_log.read("log", from_time_ns=at, limit=1) == [records[2]]

    async def test_an_idempotency_key_returns_the_original_record(self, event_log: EventLog):
        await event_log.create_log("log")
        original = await event_log.append("log", "a.v1", b"1", idempotency_key="req-1")
        retry = await event_log.append("log", "a.v1", b"1", idempotency_key="req-1")
        assert retry == original
        other = await event_log.append("log", "a.v1", b"2", idempotency_key="req-2")
        batch = await event_log.append_many(
            "log",
            [
                NewEvent("a.v1", b"ignored", idempotency_key="req-1"),
                NewEvent("a.v1", b"3", idempotency_key="req-3"),
            ],
        )
        assert [other.seq, *(r.seq for r in batch)] == [2, 1, 3]
        assert batch[0] == original
        assert (await event_log.info("log")).events == 3

    # -- consumer groups ----------------------------------------------------------------------

    async def test_two_members_share_the_work(self, event_log: EventLog):
        await event_log.create_log("log")
        await event_log.append_many("log", [NewEvent("n.v1", b"%d" % i) for i in range(30)])
        members = [await event_log.consumer_group("log", "workers", ack_wait_s=10) for _ in "ab"]
        got: list[list[Delivery]] = [[], []]
        deadline = time.monotonic() + 10
        while sum(map(len, got)) < 30 and time.monotonic() < deadline:
            batches = await asyncio.gather(*(m.fetch(7, timeout_s=0.3) for m in members))
            for mine, batch in zip(got, batches, strict=True):
                mine.extend(batch)
        seqs = [d.seq for mine in got for d in mine]
        # Within the ack deadline no record went to both members, and none was missed.
        assert sorted(seqs) == list(range(1, 31))
        assert got[0] and got[1]
        assert all(d.deliveries == 1 for mine in got for d in mine)
        for delivery in got[0] + got[1]:
            await delivery.ack()
        info = await members[0].info()
        assert (info.pending_acks, info.next_seq, info.unprocessed) == (0, 31, 0)
        for member in members:
            await member.aclose()
        with pytest.raises(InvalidRequest):
            await members[0].fetch()  # a closed handle
        assert (await members[0].info()).next_seq == 31

    async def test_an_unacked_record_is_redelivered_after_ack_wait(self, event_log: EventLog):
        await event_log.create_log("log")
        await event_log.append("log", "n.v1", b"x")
        first_member = await event_log.consumer_group("log", "g", ack_wait_s=0.5)
        [first] = await first_member.fetch(timeout_s=2)
        started = time.monotonic()
        assert (first.seq, first.deliveries) == (1, 1)
        assert await first_member.fetch(timeout_s=0.2) == []  # its deadline has not passed
        second_member = await event_log.consumer_group("log", "g", ack_wait_s=0.5)
        [again] = await second_member.fetch(timeout_s=3)
        assert time.monotonic() - started > 0.4
        assert again.seq == 1 and self.counted(again, 2) and again.record == first.record
        info = await second_member.info()
        assert info.pending_acks == 1
        assert (info.redelivered == 1) if self.exact_delivery_counts else (info.redelivered <= 1)
        await again.ack()
        await first.ack()  # late and stale: harmless
        assert (await second_member.info()).pending_acks == 0
        assert await first_member.fetch(timeout_s=0.8) == []

    async def test_nak_redelivers_after_its_delay(self, event_log: EventLog):
        await event_log.create_log("log")
        await event_log.append("log", "n.v1", b"x")
        group = await event_log.consumer_group("log", "g", ack_wait_s=10)
        [delivery] = await group.fetch(timeout_s=2)
        await delivery.nak(delay=0.5)
        nakked = time.monotonic()
        assert await group.fetch(timeout_s=0.2) == []
        [again] = await group.fetch(timeout_s=3)
        assert time.monotonic() - nakked > 0.35 and self.counted(again, 2)
        await again.nak()  # no delay: at once
        [third] = await group.fetch(timeout_s=3)
        assert self.counted(third, 3)
        await third.ack()

    async def test_in_progress_extends_the_ack_deadline(self, event_log: EventLog):
        await event_log.create_log("log")
        await event_log.append("log", "n.v1", b"x")
        group = await event_log.consumer_group("log", "g", ack_wait_s=1.0)
        [delivery] = await group.fetch(timeout_s=2)
        await asyncio.sleep(0.5)
        await delivery.in_progress()  # the deadline moves from ~1.0 s to ~1.5 s
        assert await group.fetch(timeout_s=0.75) == []
        [again] = await group.fetch(timeout_s=3)
        assert self.counted(again, 2)
        await again.ack()

    async def test_max_deliver_gives_up_on_a_record(self, event_log: EventLog):
        await event_log.create_log("log")
        await event_log.append("log", "n.v1", b"x")
        group = await event_log.consumer_group("log", "g", ack_wait_s=0.5, max_deliver=2)
        # Fetch, never settling, until nothing came for three ack waits. Unloaded, that is
        # deliveries 1 then 2. A busy machine may see other counts: a fetch that read an answer
        # too late hands out nothing (the broker counted that attempt), and JetStream takes
        # back the count of a redelivery whose pull request had just expired (the next one
        # carries the same count). The count never goes down and never passes max_deliver.
        counts: list[int] = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            got = await group.fetch(timeout_s=1.5)
            if not got:
                break
            counts.extend(d.deliveries for d in got)
        assert counts and counts == sorted(counts) and counts[-1] <= 2, counts
        if self.exact_delivery_counts:
            assert counts == [1, 2]
        # The group let the record go (the broker drops it from pending when it would have
        # been handed out a third time, which takes a waiting fetch).
        info = await group.info()
        while info.pending_acks and time.monotonic() < deadline:
            assert await group.fetch(timeout_s=0.5) == []
            info = await group.info()
        assert info.pending_acks == 0 and info.max_deliver == 2

    async def test_a_group_is_durable(self, event_log: EventLog):
        await event_log.create_log("log")
        await event_log.append_many("log", [NewEvent("n.v1", b"%d" % i) for i in range(5)])
        group = await event_log.consumer_group("log", "g", ack_wait_s=10)
        for delivery in await fetch_until(group, 3, batch=3):
            await delivery.ack()
        await group.aclose()
        # Joining again keeps the position (start_seq is for new groups only) and the
        # settings.
        again = await event_log.consumer_group("log", "g", start_seq=1)
        info = await again.info()
        assert (info.next_seq, info.pending_acks, info.ack_wait_s) == (4, 0, 10.0)
        rest = await fetch_until(again, 2)
        assert [(d.seq, d.deliveries) for d in rest] == [(4, 1), (5, 1)]
        fresh = await event_log.consumer_group("log", "other")
        assert [d.seq for d in await fetch_until(fresh, 5)] == [1, 2, 3, 4, 5]

    async def test_joining_without_settings_keeps_the_groups_own(self, event_log: EventLog):
        await event_log.create_log("log")
        await event_log.append("log", "n.v1", b"x")
        creator = await event_log.consumer_group("log", "g", ack_wait_s=0.5, max_deliver=3)
        # A member that asks nothing joins with the group's settings, not with defaults.
        member = await event_log.consumer_group("log", "g")
        info = await member.info()
        assert (info.ack_wait_s, info.max_deliver) == (0.5, 3)
        [first] = await member.fetch(timeout_s=2)
        started = time.monotonic()
        # Not acked: handed out again once the group's 0.5 s pass (a 30 s default would not).
        [again] = await member.fetch(timeout_s=5)
        assert time.monotonic() - started > 0.35
        assert again.seq == first.seq and self.counted(again, 2), again.deliveries
        await again.ack()
        info = await creator.info()
        assert (info.ack_wait_s, info.max_deliver) == (0.5, 3)

    async def test_a_new_group_without_settings_takes_the_defaults(self, event_log: EventLog):
        await event_log.create_log("log")
        group = await event_log.consumer_group("log", "g")
        info = await group.info()
        assert (info.ack_wait_s, info.max_deliver) == (DEFAULT_ACK_WAIT_S, None)
        # Asking for the defaults explicitly matches them.
        await event_log.consumer_group("log", "g", ack_wait_s=DEFAULT_ACK_WAIT_S)

    async def test_joining_with_other_settings_is_refused(self, event_log: EventLog):
        await event_log.create_log("log")
        await event_log.consumer_group("log", "g", ack_wait_s=1.5, max_deliver=3)
        # The same settings, given explicitly, join (an int for a float as well).
        same = await event_log.consumer_group("log", "g", ack_wait_s=1.5, max_deliver=3)
        await event_log.consumer_group("log", "h", ack_wait_s=2)
        await event_log.consumer_group("log", "h", ack_wait_s=2.0)
        with pytest.raises(GroupSettingsConflict) as raised:
            await event_log.consumer_group("log", "g", ack_wait_s=30)
        refused = raised.value
        assert refused.code == "group_settings_conflict" and refused.param == "ack_wait_s"
        assert refused.conflicts == [("ack_wait_s", 1.5, 30.0)]
        assert "ack_wait_s is 1.5" in str(refused) and "asked for 30.0" in str(refused)
        with pytest.raises(GroupSettingsConflict) as raised:
            await event_log.consumer_group("log", "g", ack_wait_s=1.5, max_deliver=5)
        assert raised.value.conflicts == [("max_deliver", 3, 5)]
        with pytest.raises(GroupSettingsConflict) as raised:
            await event_log.consumer_group("log", "h", max_deliver=1)
        assert raised.value.conflicts == [("max_deliver", None, 1)]
        assert "max_deliver is None (no limit)" in str(raised.value)
        # Nothing of a refused join stuck.
        info = await same.info()
        assert (info.ack_wait_s, info.max_deliver) == (1.5, 3)

    async def test_looking_at_a_group_does_not_create_it(self, event_log: EventLog):
        await event_log.create_log("log")
        with pytest.raises(GroupNotFound) as raised:
            await event_log.group_info("log", "g")
        assert raised.value.code == "group_not_found"
        # So its first member still chooses its settings.
        group = await event_log.consumer_group("log", "g", ack_wait_s=0.5)
        info = await event_log.group_info("log", "g")
        assert info == await group.info() and info.ack_wait_s == 0.5

    async def test_a_group_starts_at_a_sequence_or_a_time(self, event_log: EventLog):
        await event_log.create_log("log")
        records = await append_spaced(event_log, "log", 5)
        by_seq = await event_log.consumer_group("log", "by-seq", start_seq=3)
        assert [d.seq for d in await fetch_until(by_seq, 3)] == [3, 4, 5]
        by_time = await event_log.consumer_group("log", "by-time", start_time_ns=records[3].time_ns)
        assert (await by_time.info()).next_seq == 4
        assert [d.seq for d in await fetch_until(by_time, 2)] == [4, 5]
        future = await event_log.consumer_group(
            "log", "future", start_time_ns=records[-1].time_ns + 1
        )
        assert await future.fetch(timeout_s=0.2) == []
        await event_log.append("log", "n.v1", b"later")
        assert [d.seq for d in await fetch_until(future, 1)] == [6]

    # -- retention ----------------------------------------------------------------------------

    async def test_retention_by_count_and_bytes(self, event_log: EventLog):
        info = await event_log.create_log("capped", max_events=3)
        assert info.limits.max_events == 3 and (info.first_seq, info.last_seq) == (1, 0)
        await event_log.append_many("capped", [NewEvent("n.v1", b"%d" % i) for i in range(5)])
        info = await event_log.info("capped")
        assert (info.first_seq, info.last_seq, info.events) == (3, 5, 3)
        assert [r.seq for r in await event_log.read("capped", from_seq=1)] == [3, 4, 5]

        await event_log.create_log("small", max_bytes=2_000)
        for _ in range(10):
            await event_log.append("small", "n.v1", b"x" * 400)
        info = await event_log.info("small")
        assert info.last_seq == 10 and 1 <= info.events < 5 and info.bytes <= 2_000
        assert info.first_seq == 10 - info.events + 1

    async def test_retention_by_age(self, event_log: EventLog):
        await event_log.create_log("fleeting", max_age_s=0.5)
        await event_log.append_many("fleeting", [NewEvent("n.v1", b"a"), NewEvent("n.v1", b"b")])
        await asyncio.sleep(1.0)
        info = await event_log.info("fleeting")
        assert (info.first_seq, info.last_seq, info.events) == (3, 2, 0)
        assert await event_log.read("fleeting") == []
        assert (await event_log.append("fleeting", "n.v1", b"c")).seq == 3

    # -- logs and errors ----------------------------------------------------------------------

    async def test_logs_are_listed_and_deleted(self, event_log: EventLog):
        for name in ("b", "a", "..", "x.y-z_1"):
            await event_log.create_log(name)
        assert await event_log.logs() == sorted(["b", "a", "..", "x.y-z_1"])
        await event_log.append("..", "n.v1", b"dots")
        assert [r.data for r in await event_log.read("..")] == [b"dots"]
        group = await event_log.consumer_group("a", "g.1")
        await event_log.delete_log("a")
        assert "a" not in await event_log.logs()
        with pytest.raises(LogNotFound):
            await event_log.info("a")
        with pytest.raises(LogNotFound):
            await group.fetch(timeout_s=0.1)
        await event_log.create_log("a")
        assert (await event_log.append("a", "n.v1", b"")).seq == 1

    async def test_missing_logs_and_groups(self, event_log: EventLog):
        calls = [
            event_log.append("nope", "n.v1", b""),
            event_log.append_many("nope", []),
            event_log.read("nope"),
            event_log.read("nope", from_time_ns=1),
            event_log.info("nope"),
            event_log.delete_log("nope"),
            event_log.consumer_group("nope", "g"),
            event_log.group_info("nope", "g"),
            event_log.delete_group("nope", "g"),
        ]
        for call in calls:
            with pytest.raises(LogNotFound) as raised:
                await call
            assert raised.value.code == "log_not_found"
        await event_log.create_log("log")
        with pytest.raises(GroupNotFound):
            await event_log.delete_group("log", "g")
        await event_log.append("log", "n.v1", b"")
        group = await event_log.consumer_group("log", "g")
        [delivery] = await group.fetch(timeout_s=2)
        await event_log.delete_group("log", "g")
        with pytest.raises(GroupNotFound):
            await group.fetch(timeout_s=0.1)
        with pytest.raises(GroupNotFound):
            await group.info()
        with pytest.raises(GroupNotFound):
            await delivery.ack()
        await delivery.nak()  # unconfirmed: nothing to report

    async def test_create_log_twice(self, event_log: EventLog):
        await event_log.create_log("log", max_events=7)
        with pytest.raises(LogExists) as raised:
            await event_log.create_log("log", exist_ok=False)
        assert raised.value.code == "log_exists"
        info = await event_log.create_log("log", max_events=9)  # exist_ok: unchanged
        assert info.limits.max_events == 7

    async def test_malformed_requests_are_refused(self, event_log: EventLog):
        for bad in ("", "a b", "x" * 201, "a/b", "é", "a*", None):
            with pytest.raises(InvalidLogName) as raised:
                await event_log.create_log(bad)  # type: ignore[arg-type]
            assert raised.value.code == "invalid_log_name"
        await event_log.create_log("log")
        with pytest.raises(InvalidLogName):
            await event_log.consumer_group("log", "no spaces")
        refused = [
            event_log.append("log", "has space", b""),
            event_log.append("log", "", b""),
            event_log.append("log", "n.v1", "text"),  # type: ignore[arg-type]
            event_log.append("log", "n.v1", b"", content_type=" json"),
            event_log.append("log", "n.v1", b"", idempotency_key="a b"),
            event_log.read("log", from_seq=1, from_time_ns=1),
            event_log.read("log", limit=0),
            event_log.read("log", from_seq=0),
            event_log.create_log("other", max_events=0),
            event_log.consumer_group("log", "g", ack_wait_s=0),
            event_log.consumer_group("log", "g", start_seq=1, start_time_ns=1),
        ]
        for call in refused:
            with pytest.raises(InvalidRequest):
                await call
        group = await event_log.consumer_group("log", "g")
        with pytest.raises(InvalidRequest):
            await group.fetch(max_events=0)
        assert (await event_log.info("log")).events == 0

    async def test_an_event_over_the_size_bound_is_refused(self, event_log: EventLog):
        await event_log.create_log("log")
        limit = event_log.max_event_bytes
        with pytest.raises(EventTooLarge) as raised:
            await event_log.append("log", "n.v1", b"x" * limit)
        assert raised.value.code == "event_too_large"
        fits = limit - len("n.v1") - len("application/octet-stream")
        record = await event_log.append(
            "log", "n.v1", b"x" * fits, content_type="application/octet-stream"
        )
        assert (await event_log.read("log")) == [record]

    async def test_the_validator_sees_every_event_and_can_refuse(self, open_log: OpenLog):
        seen: list[tuple[str, str, str, bytes]] = []

        class Refused(Exception):
            pass

        async def validate(log: str, type: str, content_type: str, data: bytes) -> None:
            seen.append((log, type, content_type, data))
            if type == "bad.v1":
                raise Refused(type)

        event_log = open_log(validate=validate)
        await event_log.create_log("log")
        await event_log.append("log", "good.v1", b"{}")
        with pytest.raises(Refused):
            await event_log.append("log", "bad.v1", b"[]", content_type="text/plain")
        with pytest.raises(Refused):
            await event_log.append_many(
                "log", [NewEvent("good.v1", b"1"), NewEvent("bad.v1", b"2")]
            )
        assert (await event_log.info("log")).events == 1  # nothing of a refused batch stored
        assert seen[:2] == [
            ("log", "good.v1", "application/json", b"{}"),
            ("log", "bad.v1", "text/plain", b"[]"),
        ]
        assert len(seen) == 4

    # -- settling by token (what the HTTP API hands out) --------------------------------------

    async def test_a_delivery_settles_by_token(self, event_log: EventLog):
        # (Across connections and processes too, where the log is shared: see the JetStream
        # tests.)
        member = other = event_log
        await member.create_log("log")
        await member.append_many("log", [NewEvent("n.v1", b"%d" % i) for i in range(3)])
        group = await member.consumer_group("log", "g", ack_wait_s=0.5)
        first = await fetch_until(group, 3)
        assert [d.seq for d in first] == [1, 2, 3]
        tokens = [d.token for d in first]
        await other.settle(tokens[0])  # ack
        await other.settle(tokens[1], "nak")
        await other.settle(tokens[2], "progress")
        again = await fetch_until(group, 1, timeout=0.3)
        assert [(d.seq, d.deliveries) for d in again] == [(2, 2)]
        await other.settle(again[0].token)
        await other.settle(tokens[0])  # a settled delivery's token again: nothing happens
        await asyncio.sleep(0.6)
        last = await fetch_until(group, 1, timeout=1.0)
        assert [(d.seq, d.deliveries) for d in last] == [(3, 2)]  # progress held it once
        await other.settle(last[0].token)
        assert (await group.info()).pending_acks == 0
        for bad in ("", "x" * 2000, "nonsense", "$JS.ACK.OTHER.c.1.1.1.1.0"):
            with pytest.raises(InvalidRequest):
                await other.settle(bad)
        with pytest.raises(InvalidRequest):
            await other.settle(tokens[0], "explode")
        with pytest.raises(InvalidRequest):
            await other.settle(tokens[0], "ack", delay=1.0)
        await group.aclose()
