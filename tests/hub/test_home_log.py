"""`HomeLogHub` (the ``node`` layout) where it differs from a subject per stream: appends
forwarded to the stream's home process, tries whose answers were lost, gaps in a followed
log. The shared behaviour runs in both layouts in ``test_jetstream``."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest

from airlane.core import Event, Kind, Position, Retention, StreamTooLarge
from airlane.hub import EventTooLarge, HubUnavailable, MemoryHubConfig
from airlane.hub.jetstream import HomeLogHub, JetStreamHub, JetStreamHubConfig
from airlane.hub.jetstream import follower as follower_module
from airlane.hub.jetstream.records import decode_entries
from airlane.hub.jetstream.store import Conflict, StoredBatch
from tests.hub.contract import drain
from tests.hub.test_jetstream import hub_config, two_nodes
from tests.natsserver import NatsServer
from tests.waiting import eventually


def follows(reader: JetStreamHub, home: JetStreamHub) -> bool:
    """Whether ``reader`` follows ``home``'s log from a known position: what ``home``
    publishes from now on reaches it."""
    assert isinstance(reader, HomeLogHub) and isinstance(home, HomeLogHub)
    follower = reader._followers.get(home.home)
    return follower is not None and follower.position is not None and not follower.syncing


@pytest.fixture
async def nodes(nats_session: NatsServer) -> AsyncIterator[tuple[HomeLogHub, HomeLogHub]]:
    config = hub_config(nats_session, layout="node", request_timeout_s=0.5)
    async with two_nodes(config) as (a, b):
        assert isinstance(a, HomeLogHub) and isinstance(b, HomeLogHub)
        await eventually(lambda: follows(b, a) and follows(a, b))
        yield a, b


async def _payloads(hub: JetStreamHub, stream_id: str) -> list[Any]:
    """The message payloads of an ended stream, as ``hub`` reads them."""
    async with await hub.subscribe(stream_id) as sub:
        events = await drain(sub)
    return [e.data["payload"] for e in events if e.kind is Kind.MESSAGE and e.data]


async def test_an_append_on_another_node_goes_through_the_home_in_its_next_message(nodes):
    a, b = nodes
    await a.create("forwarded")
    before = a._written
    stored = await b.append_many("forwarded", [Event.message({"n": n}) for n in range(3)])
    assert [e.seq for e in stored] == [1, 2, 3]
    assert a._written == before + 1  # one message of a's log, written by a
    assert (await b.info("forwarded")).last_seq == 3  # b sees its own append at once


async def test_an_unanswered_forward_fails_rather_than_risk_storing_twice(
    nats_session, monkeypatch
):
    answer = HomeLogHub._on_forward

    async def stores_then_stalls(self: HomeLogHub, data: bytes) -> bytes:
        reply = await answer(self, data)
        await asyncio.sleep(1.0)  # past b's request timeout: the answer comes too late
        return reply

    monkeypatch.setattr(HomeLogHub, "_on_forward", stores_then_stalls)
    config = hub_config(nats_session, layout="node", request_timeout_s=0.5)
    async with two_nodes(config) as (a, b):
        await eventually(lambda: follows(b, a))
        await a.create("slow-home")
        with pytest.raises(HubUnavailable):
            await b.append("slow-home", Event.message({"n": "once"}))
        await asyncio.sleep(1.2)
        await a.append("slow-home", Event.done())
        # a stored it; b did not write it again itself (a direct write would have).
        assert await _payloads(a, "slow-home") == [{"n": "once"}]


async def test_an_append_its_home_refuses_as_too_large_is_refused_as_such_where_it_was_made(
    nodes, monkeypatch
):
    """b's copy is behind (it has not read a's last append), so b's own check of the text limit
    lets an append through; a, the home, refuses it. b must say why (`StreamTooLarge`: 413),
    promptly, not time out as if the home were away."""
    a, b = nodes
    await a.create("small", retention=Retention(max_text_chars=10))
    assert (await b.info("small")).last_seq == 0  # b holds the stream
    monkeypatch.setattr(b, "_apply_message", lambda home, batch: None)  # b falls behind
    await a.append_many("small", [Event.delta("12345678")])
    with pytest.raises(StreamTooLarge):
        await asyncio.wait_for(b.append_many("small", [Event.delta("abcd")]), 5)


async def test_a_direct_write_stored_but_unanswered_is_not_written_again(nodes, monkeypatch):
    a, b = nodes
    await a.create("direct")

    async def nobody(*args: Any, **kwargs: Any) -> None:
        return None  # as if a served nothing: b writes a's log itself

    monkeypatch.setattr(b._store, "ask", nobody)
    publish = b._store.publish_on
    lost: list[int] = []

    async def stored_then_refused(*args: Any, **kwargs: Any) -> int:
        seq = await publish(*args, **kwargs)
        if not lost:
            lost.append(seq)
            raise Conflict("wrong last sequence")
        return seq

    monkeypatch.setattr(b._store, "publish_on", stored_then_refused)
    stored = await b.append_many("direct", [Event.message({"n": 1}), Event.message({"n": 2})])
    assert lost and [e.seq for e in stored] == [1, 2]
    monkeypatch.undo()
    await b.append("direct", Event.done())
    assert await _payloads(b, "direct") == [{"n": 1}, {"n": 2}]


async def test_a_message_lost_on_the_way_to_a_follower_is_read_back(nats_session, monkeypatch):
    dropped: list[int] = []
    deliver = HomeLogHub._on_log_message

    def lossy(self: HomeLogHub, follower: Any, batch: StoredBatch) -> None:
        if self.node == "b" and not dropped and b"second" in batch.payload:
            dropped.append(batch.js_seq)  # never arrives (a slow consumer, a reconnect)
            return
        deliver(self, follower, batch)

    monkeypatch.setattr(HomeLogHub, "_on_log_message", lossy)
    config = hub_config(nats_session, layout="node")
    async with two_nodes(config) as (a, b):
        await eventually(lambda: follows(b, a))
        await a.create("gappy")
        for word in ("first", "second", "third"):
            await a.append("gappy", Event.message({"w": word}))
        await a.append("gappy", Event.done())
        assert dropped
        # The next message named the one before it: b read the one it missed back.
        await eventually(lambda: (b._streams.get("gappy") or a._streams["gappy"]).log.next_seq == 5)
        async with await b.subscribe("gappy") as sub:
            events = await drain(sub)
        assert [e.data["payload"]["w"] for e in events if e.data and "payload" in e.data] == [
            "first",
            "second",
            "third",
        ]


async def test_readers_on_the_home_see_what_another_node_wrote_into_its_log(nodes, monkeypatch):
    a, b = nodes
    await a.create("written-over")

    async def nobody(*args: Any, **kwargs: Any) -> None:
        return None  # b takes a for gone and writes a's log itself

    async with await a.subscribe("written-over") as sub:
        monkeypatch.setattr(b._store, "ask", nobody)
        await b.append("written-over", Event.message({"from": "b"}))
        await b.append("written-over", Event.done())
        # a publishes nothing meanwhile: b's notice makes it read its log.
        events = await drain(sub, timeout=5)
    assert [e.data["payload"] for e in events if e.kind is Kind.MESSAGE] == [{"from": "b"}]


async def test_a_home_cut_off_reads_its_log_when_it_reconnects(nats_session, monkeypatch):
    monkeypatch.setattr(HomeLogHub, "_on_wrote", lambda self, data: None)  # notices lost
    config = hub_config(nats_session, layout="node")
    async with two_nodes(config) as (a, b):
        assert isinstance(a, HomeLogHub)
        await eventually(lambda: follows(b, a))
        await a.create("while-away")

        async def nobody(*args: Any, **kwargs: Any) -> None:
            return None

        monkeypatch.setattr(b._store, "ask", nobody)
        await b.append("while-away", Event.message({"from": "b"}))
        assert a._streams["while-away"].log.next_seq == 1  # a has not read it
        a._on_missed()  # what its NATS client calls once reconnected
        await eventually(lambda: a._streams["while-away"].log.next_seq == 2)


async def test_appends_after_a_quiet_moment_go_at_once_and_a_busy_log_shares_messages(
    nats_session, monkeypatch
):
    config = hub_config(nats_session, layout="node", linger_ms=100.0)
    async with two_nodes(config) as (a, b):
        for name in ("l1", "l2", "l3"):
            await a.create(name)
        await asyncio.sleep(0.15)  # (the creations are published: quiet since)
        publish = a._store.publish_on
        made: list[tuple[float, list[str]]] = []

        async def counted(stream: str, subject: str, payload: bytes, **kwargs: Any) -> int:
            made.append((time.monotonic(), [sid for sid, _, _ in decode_entries(payload)]))
            return await publish(stream, subject, payload, **kwargs)

        monkeypatch.setattr(a._store, "publish_on", counted)

        async def later(delay: float, name: str) -> None:
            await asyncio.sleep(delay)
            await a.append(name, Event.delta(name))

        # The first goes out at once, alone (had it waited 10 ms, the second would be in its
        # message); the next two, 10 and 20 ms later, share the message that follows it,
        # 100 ms after it.
        await asyncio.gather(later(0, "l1"), later(0.01, "l2"), later(0.02, "l3"))
        assert [streams for _, streams in made] == [["l1"], ["l2", "l3"]]
        assert made[1][0] - made[0][0] >= 0.095
        assert [(await b.info(name)).last_seq for name in ("l1", "l2", "l3")] == [1, 1, 1]


async def test_a_busy_flow_shares_messages_longer_and_a_light_one_goes_at_once(
    nats_session, monkeypatch
):
    config = hub_config(nats_session, layout="node", linger_ms=2.0, busy_linger_ms=60.0)
    async with two_nodes(config) as (a, b):
        assert isinstance(a, HomeLogHub)
        names = [f"busy{n}" for n in range(150)]
        for name in names:
            await a.create(name)
        publish = a._store.publish_on
        starts: list[float] = []

        async def timed(stream: str, subject: str, payload: bytes, **kwargs: Any) -> int:
            starts.append(time.monotonic())
            return await publish(stream, subject, payload, **kwargs)

        monkeypatch.setattr(a._store, "publish_on", timed)

        def gaps_since(moment: float) -> list[float]:
            later = [start for start in starts if start >= moment]
            return sorted(after - before for before, after in itertools.pairwise(later))

        # 150 streams appending every 10 ms: 15,000 events a second, a busy flow. Once the
        # writer has measured it, a publish begins every busy_linger_ms, not every linger_ms.
        appenders = [a.appender(name) for name in names]
        began = time.monotonic()
        rounds = 0
        while time.monotonic() - began < 1.0:
            for append in appenders:
                assert append is not None
                append([Event.delta("x")])
            rounds += 1
            await asyncio.sleep(0.01)
        report = a.nodes()[0]["home_log"]  # what /v1/cluster shows of it, while it flows
        assert isinstance(report, dict)
        assert report["wait_ms"] > 45 and report["events_per_s"] > 5_000, report
        assert 0 < report["publish_ms"] < 1000, report
        gaps = gaps_since(began + 0.6)
        assert gaps and gaps[len(gaps) // 2] >= 0.045, gaps
        for name in names:
            await a.settle(name)
        await asyncio.sleep(1.0)  # a silence: the report falls with the flow
        report = a.nodes()[0]["home_log"]
        assert isinstance(report, dict)
        assert report["wait_ms"] == 2.0 and report["events_per_s"] < 500, report

        # A quiet moment, then one stream appending every 4 ms (250 a second): light, so each
        # append goes out at once, as the last publish is more than linger_ms behind.
        await asyncio.sleep(0.5)
        began = time.monotonic()
        for _ in range(60):
            await a.append("busy0", Event.delta("y"))
            await asyncio.sleep(0.004)
        gaps = gaps_since(began + 0.1)
        assert gaps and gaps[len(gaps) // 2] <= 0.015, gaps
        report = a.nodes()[0]["home_log"]
        assert isinstance(report, dict) and report["wait_ms"] == 2.0, report
        assert (await b.info("busy0")).last_seq == rounds + 60
        assert (await b.info("busy149")).last_seq == rounds


async def test_a_history_older_than_jetstream_keeps_is_reported_not_waited_for(
    nats_session, caplog
):
    config = hub_config(nats_session, layout="node", linger_ms=0.0)
    async with two_nodes(config) as (a, _):
        assert isinstance(a, HomeLogHub)
        await a.create("expired")
        for n in range(3):
            await a.append("expired", Event.message({"n": n}))
        # Its first entries leave JetStream (as history_ttl_s would have them leave).
        last = await a._store.last_seq_on(a.js_config.log_stream, a.home)
        await a._store._jetstream().purge_stream(a.js_config.log_stream, seq=last, subject=a.home)
        late = HomeLogHub(replace(config, node_id="late"))
        await late.start()
        try:
            info = await asyncio.wait_for(late.info("expired"), 10)
            assert info.last_seq == 0  # what it could not read, it does not pretend to have
            assert "no longer in JetStream" in caplog.text
        finally:
            await late.aclose()


async def test_a_deleted_stream_is_not_mirrored_again_by_a_read_back(nodes):
    a, b = nodes
    await a.create("short-lived")
    await eventually(lambda: "short-lived" in b._streams)  # mirrored from its creation
    await a.delete("short-lived")
    await eventually(lambda: "short-lived" not in b._streams)
    follower = b._followers[a.home]
    follower.position = 0  # as if b had to read a's whole log back (a gap, a reconnect)
    b._start_sync(follower)
    await eventually(lambda: not follower.syncing)
    assert "short-lived" not in b._streams


async def test_a_follower_that_held_too_much_reads_on_past_what_it_dropped(nodes, monkeypatch):
    a, b = nodes
    monkeypatch.setattr(follower_module, "MAX_HELD", 2)
    await a.create("flood")
    await eventually(lambda: "flood" in b._streams)
    follower = b._followers[a.home]
    follower.syncing = True  # as during a read-back: live messages are held, here dropped
    for n in range(10):
        await a.append("flood", Event.message({"n": n}))
    await eventually(lambda: follower.overflowed)
    follower.syncing = False
    b._start_sync(follower)
    await eventually(lambda: b._streams["flood"].log.next_seq == 11 and not follower.syncing)
    assert not follower.held


def _trimming(server: NatsServer) -> JetStreamHubConfig:
    """Ended streams dropped after a second; a trim round at every sweep (once a second),
    streams rewritten once they hold back 2 KB (and four times their own size) of log stored
    uncompressed."""
    return hub_config(
        server,
        layout="node",
        trim_every_s=0.1,
        rewrite_after_mb=0.002,
        compression="none",  # the byte counts below are what is written
        local=MemoryHubConfig(tick_s=0.05, ended_ttl_s=1.0),
    )


async def _log_seqs(hub: HomeLogHub) -> list[int]:
    """The sequences of the messages left in ``hub``'s home log."""
    stream = hub.js_config.log_stream
    last = await hub._store.last_seq_on(stream, hub.home)
    seqs: list[int] = []
    await hub._store.read_until_on(stream, hub.home, 0, last, lambda b: seqs.append(b.js_seq))
    return seqs


async def test_a_home_log_is_trimmed_below_what_its_streams_still_need(nats_session):
    async with two_nodes(_trimming(nats_session)) as (a, b):
        assert isinstance(a, HomeLogHub)
        await eventually(lambda: follows(b, a))
        await a.create("old")
        await a.append_many("old", [Event.message({"n": n}) for n in range(3)])
        await a.append("old", Event.done())
        ended_at = a._written
        await a.create("kept")
        await a.append_many("kept", [Event.message({"n": n}) for n in range(3)])
        await eventually(lambda: "old" not in a._streams, timeout=10)  # ended_ttl_s passed
        await eventually(lambda: a._trimmed > ended_at, timeout=10, what="a trim")
        seqs = await _log_seqs(a)
        assert seqs and min(seqs) > ended_at  # the ended stream's messages are gone
        assert a._streams["kept"].meta.home_after < min(seqs)  # the live one's are not
        late = HomeLogHub(replace(a.js_config, node_id="late"))
        await late.start()
        try:
            await a.append("kept", Event.done())
            assert await _payloads(late, "kept") == [{"n": 0}, {"n": 1}, {"n": 2}]
        finally:
            await late.aclose()


async def test_a_follower_that_has_not_read_on_holds_the_trim_back(nats_session):
    async with two_nodes(_trimming(nats_session)) as (a, b):
        assert isinstance(a, HomeLogHub) and isinstance(b, HomeLogHub)
        await eventually(lambda: follows(b, a))
        await a.create("watched")
        await eventually(lambda: "watched" in b._streams)
        follower = b._followers[a.home]
        follower.syncing = True  # b stops applying a's log (its messages are held)
        stuck = follower.position
        assert stuck is not None
        await a.append("watched", Event.done())
        await a.create("next")
        await eventually(lambda: "watched" not in a._streams, timeout=10)
        await asyncio.sleep(2.5)  # trim rounds pass
        assert a._read_by[b.member] == stuck
        assert a._trimmed <= stuck + 1  # what b has not read is kept
        follower.syncing = False
        b._start_sync(follower)
        await eventually(lambda: b._streams["watched"].log.terminal is not None)


async def test_a_node_taken_for_gone_checks_what_it_holds_when_its_read_back_was_trimmed(
    nats_session, monkeypatch, caplog
):
    async with two_nodes(_trimming(nats_session)) as (a, b):
        assert isinstance(a, HomeLogHub) and isinstance(b, HomeLogHub)
        await eventually(lambda: follows(b, a))
        await a.create("ends-unseen")
        await a.append("ends-unseen", Event.message({"n": 0}))
        await eventually(lambda: b._streams.get("ends-unseen") is not None)
        follower = b._followers[a.home]
        follower.syncing = True  # cut off: b applies nothing of a's log
        # ... and a no longer hears where b stands (as once it takes b for gone).
        monkeypatch.setattr(b, "_followed_logs", dict)
        await eventually(lambda: b.member not in a._read_by, timeout=5)
        await a.append("ends-unseen", Event.done())
        position = a._written
        await a.create("after")
        await a.append("after", Event.message({"n": 1}))
        await eventually(lambda: "ends-unseen" not in a._streams, timeout=10)
        await eventually(lambda: a._trimmed > position, timeout=10, what="a trim")
        follower.syncing = False
        follower.held.clear()  # what arrived while cut off never did
        b._start_sync(follower)
        # The stream that ended and was forgotten meanwhile is dropped, not left unended.
        await eventually(lambda: "ends-unseen" not in b._streams)
        assert "trimmed past what this node had read" in caplog.text
        assert (await b.info("after")).last_seq == 1


async def test_readers_of_a_running_stream_resume_after_its_missed_events_were_folded(
    nats_session, monkeypatch, caplog
):
    async with two_nodes(_trimming(nats_session)) as (a, b):
        assert isinstance(a, HomeLogHub) and isinstance(b, HomeLogHub)
        await eventually(lambda: follows(b, a))
        await a.create("runs-on", retention=Retention(max_events=4))
        await a.append("runs-on", Event.message({"n": 0}))
        await eventually(lambda: b._streams.get("runs-on") is not None)
        reader = await b.subscribe("runs-on")
        seen = [e.data["payload"]["n"] for e in await reader.next_batch()]
        assert seen == [0]
        follower = b._followers[a.home]
        follower.syncing = True  # cut off: b applies nothing of a's log
        monkeypatch.setattr(b, "_followed_logs", dict)  # ... and a takes b for gone
        await eventually(lambda: b.member not in a._read_by, timeout=5)
        for n in range(1, 7):  # the stream goes on; its retention folds the first ones
            await a.append("runs-on", Event.message({"n": n}))
        written_at = a._written
        for n in range(20):  # traffic that lets the log behind the stream go
            await a.create(f"short-{n}")
            await a.append(f"short-{n}", Event.message({"pad": "x" * 200}))
            await a.append(f"short-{n}", Event.done())
        await eventually(
            lambda: a._streams["runs-on"].snapshot_from > written_at and a._trimmed > written_at,
            timeout=10,
            what="a rewrite of the stream, then a trim past it",
        )
        monkeypatch.undo()
        follower.syncing = False
        follower.held.clear()  # what arrived while cut off never did
        b._start_sync(follower)
        # The reader ends without the stream's end (as when a node restarts) ...
        async with asyncio.timeout(10):
            while batch := await reader.next_batch():
                seen.extend(e.data["payload"]["n"] for e in batch if e.kind is Kind.MESSAGE)
        assert reader.over and not reader.finished
        assert "folded into its snapshot while this node was cut off" in caplog.text
        # ... and resumes where it stood: the folded events as a snapshot, then the rest.
        async with await b.subscribe("runs-on", resume=reader.position) as resumed:
            await reader.aclose()
            await a.append("runs-on", Event.message({"n": 7}))
            await a.append("runs-on", Event.done())
            events = await drain(resumed)
        assert events[0].kind is Kind.SNAPSHOT and events[0].seq >= 2
        after = [e.data["payload"]["n"] for e in events if e.kind is Kind.MESSAGE]
        assert after == list(range(events[0].seq, 8))
        assert events[-1].kind is Kind.DONE


async def test_a_long_lived_stream_is_written_again_so_the_log_behind_it_can_go(
    nats_session, monkeypatch
):
    async with two_nodes(_trimming(nats_session)) as (a, b):
        assert isinstance(a, HomeLogHub) and isinstance(b, HomeLogHub)
        await eventually(lambda: follows(b, a))
        await a.create("long-lived", retention=Retention(max_events=4))
        for n in range(6):  # the first two are folded
            await a.append("long-lived", Event.message({"n": n}))
        created = a._streams["long-lived"].meta.home_after
        await eventually(lambda: b._streams.get("long-lived") is not None)
        for n in range(20):  # traffic of streams that come and go
            await a.create(f"short-{n}")
            await a.append(f"short-{n}", Event.message({"pad": "x" * 200}))
            await a.append(f"short-{n}", Event.done())
        written_at = a._written
        await eventually(
            lambda: a._streams["long-lived"].snapshot_from > written_at and a._trimmed > written_at,
            timeout=10,
            what="a rewrite, then a trim past it",
        )
        assert min(await _log_seqs(a)) > created + 1  # its creation has gone
        report = a.nodes()[0]["home_log"]
        assert isinstance(report, dict) and report["streams_rewritten"] >= 1
        assert report["trimmed_below"] == a._trimmed and report["subject"] == a.home
        # The node that mirrored it holds each event once; a node that loads it now gets
        # the folded part as a snapshot and the rest as it was.
        assert b._streams["long-lived"].log.next_seq == 7
        late = HomeLogHub(replace(a.js_config, node_id="late"))
        await late.start()
        try:
            async with await late.subscribe("long-lived") as sub:
                await a.append("long-lived", Event.done())
                events = await drain(sub)
        finally:
            await late.aclose()
        folded = events[0].seq  # what its retention folded (up to the done event, 3)
        assert events[0].kind is Kind.SNAPSHOT and folded >= 2
        assert [e.seq for e in events] == list(range(folded, 8))
        assert [e.data["payload"]["n"] for e in events if e.kind is Kind.MESSAGE] == list(
            range(folded, 6)
        )
        async with await b.subscribe("long-lived") as sub:
            mirrored = await drain(sub)
        assert [e.seq for e in mirrored] == list(range(mirrored[0].seq, 8))


async def test_appends_during_a_rewrite_in_several_messages_come_after_it(
    nats_session, monkeypatch
):
    async with two_nodes(_trimming(nats_session)) as (a, b):
        assert isinstance(a, HomeLogHub) and isinstance(b, HomeLogHub)
        await eventually(lambda: follows(b, a))
        a._message_bytes = 700  # a rewrite takes several messages
        await a.create("rewritten")
        for n in range(12):
            await a.append("rewritten", Event.message({"n": n, "pad": "y" * 200}))
        for n in range(20):
            await a.create(f"filler-{n}")
            await a.append(f"filler-{n}", Event.message({"pad": "x" * 2000}))
            await a.append(f"filler-{n}", Event.done())
        # Keep appending while the rewrite goes out (it starts at a trim round).
        n = 12
        while a._streams["rewritten"].snapshot_from == 0:
            assert n < 400, "no rewrite"
            await a.append("rewritten", Event.message({"n": n}))
            n += 1
            await asyncio.sleep(0.01)
        await a.append("rewritten", Event.done())
        late = HomeLogHub(replace(a.js_config, node_id="late"))
        await late.start()
        try:
            for hub in (late, b):
                async with await hub.subscribe("rewritten") as sub:
                    events = await drain(sub)
                assert [e.seq for e in events] == list(range(1, n + 2))
                assert [e.data["payload"]["n"] for e in events[:-1]] == list(range(n))
        finally:
            await late.aclose()


async def test_an_idle_stream_is_ended_by_its_home_or_once_that_is_gone_by_another(
    nats_session, monkeypatch
):
    expiring: list[tuple[str, str]] = []
    expire = HomeLogHub._expire_idle

    async def recorded(self: HomeLogHub, replica: Any, idle_before: int) -> None:
        expiring.append((self.node, replica.stream_id))
        await expire(self, replica, idle_before)

    monkeypatch.setattr(HomeLogHub, "_expire_idle", recorded)
    local = MemoryHubConfig(tick_s=0.05, ended_ttl_s=60, idle_ttl_s=1.0)
    config = hub_config(nats_session, layout="node", local=local)
    async with two_nodes(config) as (a, b):
        await eventually(lambda: follows(b, a))
        await a.create("idle/at-home")
        await eventually(lambda: "idle/at-home" in b._streams)
        mirror = b._streams["idle/at-home"]
        await eventually(lambda: mirror.log.terminal is not None, timeout=5)
        assert (await b.info("idle/at-home")).finish_reason == "expired"
        assert ("a", "idle/at-home") in expiring
        assert ("b", "idle/at-home") not in expiring  # b did not forward the same end
        await a.create("idle/left-behind")
        await eventually(lambda: "idle/left-behind" in b._streams)
        await a.aclose()  # says goodbye: its log has no writer any more
        await eventually(lambda: ("b", "idle/left-behind") in expiring, timeout=5)
        assert (await b.info("idle/left-behind")).finish_reason == "expired"


async def test_a_follower_starting_mirrors_what_is_published_before_it_knows_the_end(nodes):
    # A new follower subscribes, then asks where the log ends: a creation published between
    # the two reaches it and lies at or below that end. It is mirrored, not passed over (the
    # stream would otherwise load from the broker when first read here).
    a, b = nodes
    old = b._followers.pop(a.home)
    assert old.subscription is not None
    await old.subscription.unsubscribe()
    ask_end = b._store.last_seq_on
    asked: list[str] = []

    async def created_meanwhile(stream: str, subject: str) -> int:
        if subject == a.home and not asked:
            asked.append(subject)
            await a.create("made-meanwhile")
            await eventually(lambda: bool(b._followers[a.home].held))
        return await ask_end(stream, subject)

    b._store.last_seq_on = created_meanwhile  # type: ignore[method-assign]
    try:
        b._follow_log(a.home)
        await eventually(lambda: follows(b, a))
    finally:
        del b._store.last_seq_on
    assert asked
    assert "made-meanwhile" in b._streams
    await a.append("made-meanwhile", Event.message({"n": 1}))
    await eventually(lambda: b._streams["made-meanwhile"].log.last_seq == 1)


async def test_a_full_node_lets_a_mirror_nobody_reads_go_to_make_room(nats_session):
    local = MemoryHubConfig(tick_s=0.05, ended_ttl_s=60, max_streams=4)
    async with two_nodes(hub_config(nats_session, layout="node", local=local)) as (a, b):
        assert isinstance(b, HomeLogHub)
        await eventually(lambda: follows(b, a))
        for n in range(4):
            await a.create(f"m{n}")
        await eventually(lambda: len(b._streams) == 4)  # mirrors, up to the limit
        async with await b.subscribe("m3"):
            await b.create("own")  # room made by dropping a mirror nobody reads here
            assert "own" in b._streams and "m3" in b._streams
            assert len(b._streams) == 4
            gone = next(f"m{n}" for n in range(3) if f"m{n}" not in b._streams)
            await a.append(gone, Event.message({"n": 1}))
            assert (await b.info(gone)).last_seq == 1  # loaded again when asked for


async def test_a_reader_resuming_past_what_this_node_holds_waits_for_it(nats_session, monkeypatch):
    deaf: list[bool] = []
    deliver = HomeLogHub._on_log_message

    def maybe(self: HomeLogHub, follower: Any, batch: StoredBatch) -> None:
        if not (deaf and self.node == "b"):
            deliver(self, follower, batch)

    monkeypatch.setattr(HomeLogHub, "_on_log_message", maybe)
    async with two_nodes(hub_config(nats_session, layout="node")) as (a, b):
        await eventually(lambda: follows(b, a))
        await a.create("ahead")
        await eventually(lambda: "ahead" in b._streams)
        deaf.append(True)  # b hears nothing of a's log for now
        for n in range(2):
            await a.append("ahead", Event.message({"n": n}))
        mirror = b._streams["ahead"]
        assert mirror.log.last_seq == 0
        deaf.clear()
        # A reader that saw seq 2 on a reconnects to b: b reads up to it rather than refuse.
        async with await b.subscribe("ahead", resume=Position(mirror.log.epoch, 2)) as sub:
            await a.append("ahead", Event.done())
            events = await drain(sub, timeout=5)
        assert [e.seq for e in events] == [3]


async def test_home_log_messages_are_compressed_and_either_kind_is_read(nats_session):
    config = hub_config(nats_session, layout="node")
    a = HomeLogHub(replace(config, node_id="a"))  # compression "zstd", the default
    b = HomeLogHub(replace(config, node_id="b", compression="none"))
    await a.start()
    await b.start()
    try:
        await eventually(lambda: follows(b, a) and follows(a, b))
        for hub in (a, b):
            name = f"from-{hub.node}"
            await hub.create(name)
            await hub.append_many(
                name, [Event.message({"n": n, "pad": "z" * 100}) for n in range(20)]
            )
            await hub.append(name, Event.done())
        stored = []
        for hub in (a, b):
            last = await a._store.last_seq_on(a.js_config.log_stream, hub.home)
            await a._store.read_until_on(
                a.js_config.log_stream,
                hub.home,
                0,
                last,
                lambda m, node=hub.node: stored.append((node, m.payload)),
            )
        assert any(node == "a" and p.startswith(b"\x28\xb5\x2f\xfd") for node, p in stored)
        assert all(p[0] & 0xF0 == 0x90 or p[0] in (0xDC, 0xDD) for node, p in stored if node == "b")
        for reader in (a, b):
            for name in ("from-a", "from-b"):
                payloads = await _payloads(reader, name)
                assert [p["n"] for p in payloads] == list(range(20))
    finally:
        await a.aclose()
        await b.aclose()


async def test_a_process_that_starts_late_hears_the_others_at_once_and_lists_their_streams(
    nats_session,
):
    # Heartbeats 10 s apart: what the newcomer knows within a second it was told in answer to
    # its own first heartbeat.
    config = replace(hub_config(nats_session, layout="node"), mirror="read", heartbeat_s=10.0,
                     node_timeout_s=30.0)  # fmt: skip
    a = HomeLogHub(replace(config, node_id="a"))
    await a.start()
    late = HomeLogHub(replace(config, node_id="late"))
    try:
        await a.create("made-before")
        await late.start()
        began = time.monotonic()
        while not (listed := await late.stream_infos("", 10)):
            assert time.monotonic() - began < 2.0, "the newcomer never heard of a"
            await asyncio.sleep(0.05)
        assert [info.stream_id for info in listed] == ["made-before"]
    finally:
        await late.aclose()
        await a.aclose()


async def test_a_node_that_mirrors_only_what_it_reads_loads_a_stream_when_asked(nats_session):
    config = hub_config(nats_session, layout="node")
    async with two_nodes(replace(config, mirror="read")) as (a, b):
        assert isinstance(a, HomeLogHub) and isinstance(b, HomeLogHub)
        assert a.process is not None and a.process != b.process
        await eventually(lambda: b._nodes.last_seen, what="b hears a")
        await a.create("asked")
        a.on_cancel("asked", lambda: None)
        await a.append_many("asked", [Event.message({"n": n}) for n in range(3)])
        await asyncio.sleep(0.3)
        assert "asked" not in b.stream_ids() and a.home not in b._followers  # held by a only
        assert await b.owner("asked") == a.process  # (from the stream's record)
        assert await a.owner("asked") is None  # its own
        assert await b.owner("nothing-of-that-name") is None
        sub = await b.subscribe("asked")  # loaded now, and followed from here on
        await a.append_many("asked", [Event.message({"n": 3}), Event.done()])
        events = await drain(sub)
        assert [e.data["payload"] for e in events if e.kind is Kind.MESSAGE and e.data] == [
            {"n": n} for n in range(4)
        ]
        await sub.aclose()
        # Once nothing held here lives on in a's log, b stops following it.
        await eventually(lambda: a.home not in b._followers, what="b lets a's log go")
        await a.create("later")
        await a.append("later", Event.message({"n": 0}))
        await asyncio.sleep(0.3)
        assert "later" not in b.stream_ids()
        assert await b.owner("asked") is None  # ended: all of it is here already
        again = await b.subscribe("later")  # followed again for as long as it is needed
        await a.append_many("later", [Event.message({"n": 1}), Event.done()])
        assert len([e for e in await drain(again) if e.kind is Kind.MESSAGE]) == 2
        await again.aclose()
        await eventually(lambda: a.home not in b._followers, what="let go again")
        # A listing still shows every process's streams, newest first, each once.
        await b.create("b-own")
        assert [i.stream_id for i in await b.stream_infos("", 10)] == ["b-own", "later", "asked"]
        assert [i.stream_id for i in await a.stream_infos("", 10)] == ["b-own", "later", "asked"]
        listed = await b.stream_infos("", 10, accept=lambda sid: sid != "later")
        assert [i.stream_id for i in listed] == ["b-own", "asked"]
        assert [i.last_seq for i in listed] == [0, 5]
        assert [i.stream_id for i in await b.stream_infos("l", 10)] == ["later"]
        assert [i.last_seq for i in await b.stream_infos("l", 10)] == [3]
        assert [i.stream_id for i in await b.stream_infos("", 1)] == ["b-own"]


async def test_a_forwarded_backlog_larger_than_a_message_goes_in_several(nats_session):
    # Appends to a stream homed on another process are forwarded in a request to its home;
    # everything queued meanwhile went in one request, and past the broker's max_payload
    # (1 MiB) the request failed as "the hub stopped before storing". Now a backlog goes as
    # requests of one message each, in order, and one event that cannot fit is refused as
    # too large.
    config = hub_config(nats_session, layout="node", compression="none")
    async with two_nodes(config) as (a, b):
        await eventually(lambda: follows(b, a))
        await a.create("remote")
        blob = "y" * 60_000
        stored = await b.append_many(
            "remote", [Event.message({"n": n, "blob": blob}) for n in range(40)]
        )  # 2.4 MB
        assert [e.seq for e in stored] == list(range(1, 41))
        with pytest.raises(EventTooLarge, match="max_payload"):
            await b.append("remote", Event.message({"p": "z" * 1_100_000}))
        await b.append("remote", Event.done())
        assert [p["n"] for p in (await _payloads(a, "remote"))] == list(range(40))
