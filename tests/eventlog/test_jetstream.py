"""`JetStreamEventLog` against the contract on a real ``nats-server -js``, plus what only a
broker shows: appends from two connections, a broker restart, a broker that is gone."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import nats
import pytest
from nats.aio.client import Client as NATS

from airlane.eventlog import (
    EventLog,
    EventLogUnavailable,
    JetStreamEventLog,
    JetStreamEventLogConfig,
    NewEvent,
    RetryPolicy,
    Validator,
    jetstream_pull,
)
from tests.eventlog.contract import EventLogContract, OpenLog, fetch_until
from tests.natsserver import NatsServer
from tests.waiting import eventually


async def connect(url: str) -> NATS:
    # Reconnect quickly and forever: the tests restart the broker under the client.
    return await nats.connect(url, reconnect_time_wait=0.1, max_reconnect_attempts=-1)


@pytest.fixture
def namespace() -> Iterator[dict[str, str]]:
    """A stream and subject prefix of this test's own on the shared server."""
    tag = uuid.uuid4().hex[:10]
    yield {"stream": f"T{tag}", "prefix": f"test.{tag}"}


@pytest.fixture
async def nc(nats_session: NatsServer) -> AsyncIterator[NATS]:
    conn = await connect(nats_session.url)
    yield conn
    await conn.close()


@pytest.fixture
async def open_log(nc: NATS, namespace: dict[str, str]) -> AsyncIterator[OpenLog]:
    def make(validate: Validator | None = None) -> EventLog:
        return JetStreamEventLog(nc, validate=validate, **namespace)

    yield make
    # Leave the shared server as we found it.
    cleaner = JetStreamEventLog(nc, **namespace)
    for name in await cleaner.logs():
        await cleaner.delete_log(name)


class TestJetStreamContract(EventLogContract):
    """The shared contract."""

    exact_delivery_counts = False


async def test_concurrent_appends_from_two_connections_get_every_seq_once(
    nats_session: NatsServer, namespace: dict[str, str]
):
    connections = [await connect(nats_session.url) for _ in range(2)]
    logs = [JetStreamEventLog(conn, **namespace) for conn in connections]
    await logs[0].create_log("shared")

    async def writer(log: JetStreamEventLog, tag: str) -> list[int]:
        return [
            (await log.append("shared", "w.v1", b"%s-%d" % (tag.encode(), i))).seq
            for i in range(25)
        ]

    writers = [writer(logs[n % 2], f"w{n}") for n in range(6)]
    appended = [seq for seqs in await asyncio.gather(*writers) for seq in seqs]
    records = await logs[1].read("shared", limit=1000)
    assert sorted(appended) == [r.seq for r in records] == list(range(1, 151))
    assert len({r.data for r in records}) == 150
    await logs[0].delete_log("shared")
    for conn in connections:
        await conn.close()


async def test_an_idempotency_key_holds_across_connections(
    nats_session: NatsServer, namespace: dict[str, str]
):
    first, second = [await connect(nats_session.url) for _ in range(2)]
    log_a, log_b = JetStreamEventLog(first, **namespace), JetStreamEventLog(second, **namespace)
    await log_a.create_log("log")
    original = await log_a.append("log", "n.v1", b"1", idempotency_key="job-7")
    assert await log_b.append("log", "n.v1", b"1", idempotency_key="job-7") == original
    await log_a.delete_log("log")
    await first.close()
    await second.close()


async def test_a_retry_after_its_original_was_trimmed_returns_its_seq_and_time_0(
    nats_session: NatsServer, namespace: dict[str, str]
):
    """The broker still knows the key (its duplicate window) but no longer holds the
    message: the retry is described from itself, at the original's seq, with ``time_ns`` 0
    (docs/eventlog.md), and is not stored again."""
    nc = await connect(nats_session.url)
    log = JetStreamEventLog(nc, **namespace)
    await log.create_log("log", max_events=1)
    original = await log.append("log", "n.v1", b"1", idempotency_key="k")
    assert original.time_ns > 0
    await log.append("log", "n.v1", b"2")  # trims the original
    retry = await log.append("log", "n.v1", b"1", idempotency_key="k")
    assert (retry.seq, retry.type, retry.data, retry.time_ns) == (original.seq, "n.v1", b"1", 0)
    assert [r.seq for r in await log.read("log", limit=10)] == [2]
    await log.delete_log("log")
    await nc.close()


async def test_a_broker_restart_loses_nothing_and_the_group_resumes(nats_server: NatsServer):
    nc = await connect(nats_server.url)
    log = JetStreamEventLog(nc)
    await log.create_log("rewards")
    before = [await log.append("rewards", "reward.v1", b'{"i": %d}' % i) for i in range(20)]
    group = await log.consumer_group("rewards", "trainer", ack_wait_s=10)
    for delivery in await fetch_until(group, 10, batch=10):
        await delivery.ack()
    # nats-server writes a consumer's ack state to disk asynchronously (~100 ms on 2.9): a
    # crash inside that gap redelivers those records once (at least once). Let it settle, so
    # that what this test checks is "resumes exactly where it stopped".
    await asyncio.sleep(0.3)
    nats_server.restart()  # SIGKILL, then start on the same port and store

    after = [await log.append("rewards", "reward.v1", b'{"i": %d}' % i) for i in range(20, 25)]
    assert [r.seq for r in after] == [21, 22, 23, 24, 25]
    assert await log.read("rewards") == before + after
    rest = await fetch_until(group, 15, timeout=15)
    assert [(d.seq, d.deliveries) for d in rest] == [(seq, 1) for seq in range(11, 26)]
    for delivery in rest:
        await delivery.ack()
    rejoined = await log.consumer_group("rewards", "trainer", ack_wait_s=10)
    info = await rejoined.info()
    assert (info.next_seq, info.pending_acks) == (26, 0)
    await nc.close()


async def test_a_gone_broker_is_reported_after_bounded_retries(nats_server: NatsServer):
    nc = await connect(nats_server.url)
    config = JetStreamEventLogConfig(
        request_timeout_s=0.3, retry=RetryPolicy(attempts=3, first_backoff_s=0.05)
    )
    log = JetStreamEventLog(nc, config=config)
    await log.create_log("log")
    nats_server.stop()
    while nc.is_connected:  # the client notices the closed socket on its next read
        await asyncio.sleep(0.01)
    for call in (log.append("log", "n.v1", b""), log.read("log"), log.info("log")):
        started = time.monotonic()
        with pytest.raises(EventLogUnavailable) as raised:
            await call
        assert raised.value.code == "event_log_unavailable" and time.monotonic() - started < 3
    nats_server.start()
    record = await JetStreamEventLog(nc).append("log", "n.v1", b"back")
    assert record.seq == 1
    await nc.close()
    with pytest.raises(EventLogUnavailable):
        await log.append("log", "n.v1", b"")  # a closed connection: no retries


async def test_logs_lists_only_this_prefix(nc: NATS, open_log: OpenLog):
    log = open_log()
    await log.create_log("mine")
    foreign = JetStreamEventLog(nc, stream="FOREIGN", prefix="foreign.log")
    await foreign.create_log("theirs")
    js = nc.jetstream()
    await js.add_stream(name=f"{log.stream_name('x')}extra", subjects=["unrelated.subject"])
    try:
        assert await log.logs() == ["mine"]
    finally:
        await foreign.delete_log("theirs")
        await js.delete_stream(f"{log.stream_name('x')}extra")


async def test_a_delivery_fetched_on_one_connection_settles_on_another(
    nats_session: NatsServer, namespace: dict[str, str]
):
    connections = [await connect(nats_session.url) for _ in range(2)]
    fetcher, settler = (JetStreamEventLog(conn, **namespace) for conn in connections)
    try:
        await fetcher.create_log("acks")
        await fetcher.append("acks", "a.v1", b"1")
        group = await fetcher.consumer_group("acks", "g", ack_wait_s=0.5)
        (delivery,) = await group.fetch(1, timeout_s=2)
        await settler.settle(delivery.token)  # what another gateway node does for HTTP
        await asyncio.sleep(0.7)
        assert await group.fetch(1, timeout_s=0.2) == []
        assert (await group.info()).pending_acks == 0
        await group.aclose()
        await fetcher.delete_log("acks")
    finally:
        for conn in connections:
            await conn.close()


async def test_a_fetch_stalled_past_the_ack_wait_with_the_answer_in_hand_hands_out_nothing(
    nats_session: NatsServer, namespace: dict[str, str], monkeypatch: pytest.MonkeyPatch
):
    """The broker answered the fetch, then the whole process stopped (a GC pass, SIGSTOP)
    for longer than the group's ack wait, and resumed while the fetch still had time: by
    then the record may be another member's, so this one must not get that copy."""
    conn = await connect(nats_session.url)
    log = JetStreamEventLog(conn, **namespace)
    try:
        await log.create_log("stall")
        member = await log.consumer_group("stall", "g", ack_wait_s=0.5)
        await log.append("stall", "a.v1", b"1")
        answers = jetstream_pull._answers
        stalls = 1

        async def stalled_before_reading(*args: Any) -> Any:
            nonlocal stalls
            if stalls:
                stalls -= 1
                await asyncio.sleep(0.1)  # the answer arrives in the inbox
                time.sleep(0.8)  # the process stops: nothing runs, the ack wait runs out
            return await answers(*args)

        monkeypatch.setattr(jetstream_pull, "_answers", stalled_before_reading)
        # Not the copy read too late; the same fetch waits on and gets the redelivery.
        (again,) = await member.fetch(1, timeout_s=5)
        # Count 2, or 1 where the broker took back the count of a redelivery to a pull
        # request that had just expired (docs/eventlog.md: a JetStream count can repeat).
        assert again.seq == 1 and again.deliveries in (1, 2), again.deliveries
        await again.ack()
        await member.aclose()
        await log.delete_log("stall")
    finally:
        await conn.close()


async def test_a_delivery_that_arrived_after_its_fetch_gave_up_is_not_handed_out(
    nats_session: NatsServer, namespace: dict[str, str]
):
    connections = [await connect(nats_session.url) for _ in range(2)]
    one, other = (JetStreamEventLog(conn, **namespace) for conn in connections)
    try:
        await one.create_log("late")
        late = await one.consumer_group("late", "g", ack_wait_s=0.5)
        on_time = await other.consumer_group("late", "g")
        # A pull request the member's fetch no longer waits for (what a fetch that timed out
        # while the process was stalled leaves behind): the broker answers it anyway, on
        # the member's connection, to the inbox that fetch had.
        stale_inbox = connections[0].new_inbox()
        answered = await connections[0].subscribe(stale_inbox)
        subject = f"$JS.API.CONSUMER.MSG.NEXT.{one.stream_name('late')}.g"
        # It waits up to 60 s: under a loaded suite the append below can take seconds, and a
        # pull that expired first would be answered with a status, not the record.
        await connections[0].publish(subject, b'{"batch": 1, "expires": 60000000000}', stale_inbox)
        await connections[0].flush()
        await one.append("late", "a.v1", b"1")
        await eventually(lambda: answered.pending_msgs > 0, what="the broker answers the pull")
        # Its ack wait passes; another member gets the record again and acks it.
        (again,) = await fetch_until(on_time, 1, timeout=5)
        assert again.deliveries in (1, 2)  # 1 where the broker took a count back, as above
        await again.ack()
        # The late copy, queued all along, must not be handed out after that ack.
        assert await late.fetch(1, timeout_s=0.3) == []
        await late.aclose()
        await on_time.aclose()
        await one.delete_log("late")
    finally:
        for conn in connections:
            await conn.close()


async def test_a_group_holds_at_most_1000_unacknowledged_deliveries(
    nc: NATS, namespace: dict[str, str]
) -> None:
    log = JetStreamEventLog(nc, **namespace)
    await log.create_log("a")
    try:
        for _ in range(2):  # (at most 1,000 events an append)
            await log.append_many("a", [NewEvent("n.v1", b"") for _ in range(505)])
        group = await log.consumer_group("a", "g", ack_wait_s=60)
        held = await fetch_until(group, 1000, timeout=15, batch=1000)  # (slow when busy)
        assert len(held) == 1000 == JetStreamEventLogConfig().max_ack_pending
        assert await group.fetch(10, timeout_s=0.5) == []  # none past the bound
        assert (await group.info()).pending_acks == 1000
        await held[0].ack()  # one slot: one more comes
        assert [d.seq for d in await group.fetch(10, timeout_s=2)] == [1001]
    finally:
        await log.delete_log("a")


async def test_the_bound_on_unacknowledged_deliveries_is_set_per_node(
    nc: NATS, namespace: dict[str, str]
) -> None:
    log = JetStreamEventLog(nc, config=JetStreamEventLogConfig(max_ack_pending=2), **namespace)
    await log.create_log("a")
    try:
        await log.append_many("a", [NewEvent("n.v1", b"") for _ in range(5)])
        group = await log.consumer_group("a", "g", ack_wait_s=60)
        first = await fetch_until(group, 2)
        assert [d.seq for d in first] == [1, 2]
        assert await group.fetch(10, timeout_s=0.3) == []
        await first[0].ack()
        assert [d.seq for d in await group.fetch(10, timeout_s=2)] == [3]
    finally:
        await log.delete_log("a")
