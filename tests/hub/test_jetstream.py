"""`JetStreamHub` against the hub contract (unchanged), on a real ``nats-server -js``, in both
layouts: a subject per stream (``stream``) and a home log per process (``node``,
`HomeLogHub`). Every test runs in each."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import nats.errors
import pytest

from airlane.core import Event, Kind, OrphanMode, OrphanPolicy, Position, Retention
from airlane.hub import (
    EventTooLarge,
    HubError,
    HubUnavailable,
    MemoryHubConfig,
    StreamEnded,
    StreamNotFound,
)
from airlane.hub.jetstream import JetStreamHub, JetStreamHubConfig, jetstream_hub
from airlane.hub.jetstream.presence import Heartbeat
from airlane.hub.jetstream.records import stream_key
from airlane.hub.jetstream.store import Conflict
from tests.hub.contract import HubContract, drain, text_of
from tests.natsserver import NatsServer
from tests.waiting import eventually

_prefixes = itertools.count()
_layout = ["stream"]


@pytest.fixture(autouse=True, params=["stream", "node"])
def layout(request: pytest.FixtureRequest) -> str:
    """The layout every hub of the test uses (`hub_config`)."""
    _layout[0] = request.param
    return str(request.param)


def hub_config(server: NatsServer, **changes: object) -> JetStreamHubConfig:
    """A config on ``server`` with its own prefix (tests share one server), in the test's
    layout."""
    fields: dict[str, object] = {
        "layout": _layout[0],
        "servers": (server.url,),
        "prefix": f"t{next(_prefixes)}",
        "heartbeat_s": 0.2,
        "node_timeout_s": 0.6,
        "trim_every_s": 0.1,  # node layout: trim at every sweep (what must not break anything)
        "local": MemoryHubConfig(tick_s=0.05, ended_ttl_s=60),
    }
    fields.update(changes)
    return JetStreamHubConfig(**fields)  # type: ignore[arg-type]


@pytest.fixture
async def hub(nats_session: NatsServer) -> AsyncIterator[JetStreamHub]:
    hub = jetstream_hub(hub_config(nats_session))
    await hub.start()
    yield hub
    await hub.aclose()


class TestJetStreamHubContract(HubContract):
    """The shared contract, unchanged."""


@contextlib.asynccontextmanager
async def two_nodes(config: JetStreamHubConfig) -> AsyncIterator[tuple[JetStreamHub, JetStreamHub]]:
    """Two hubs of ``config`` on one JetStream: two gateway nodes, as far as streams are
    concerned."""
    a = jetstream_hub(replace(config, node_id="a"))
    b = jetstream_hub(replace(config, node_id="b"))
    await a.start()
    await b.start()
    yield a, b
    await a.aclose()
    await b.aclose()


@pytest.fixture
async def nodes(nats_session: NatsServer) -> AsyncIterator[tuple[JetStreamHub, JetStreamHub]]:
    """Two nodes with the tests' timers."""
    async with two_nodes(hub_config(nats_session)) as pair:
        yield pair


def count_publishes(hub: JetStreamHub, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that gets one entry per JetStream publish ``hub`` makes (the real one runs)."""
    made: list[int] = []
    publish = hub._store.publish_on  # (what both layouts' appends go through)

    async def counted(*args: object, **kwargs: object) -> int:
        made.append(1)
        return await publish(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(hub._store, "publish_on", counted)
    return made


async def test_the_appender_queues_and_readers_see_only_what_jetstream_stored(nodes, monkeypatch):
    a, b = nodes
    await a.create("fed")
    publishes = count_publishes(a, monkeypatch)
    sink = a.appender("fed")
    assert sink is not None
    async with await b.subscribe("fed") as far:
        for i in range(1000):  # in one loop turn, as a burst producer's timer does
            sink([Event.delta(f"{i},")])
        # Nothing is applied before JetStream stored it: no reader here sees it yet.
        assert a._streams["fed"].log.next_seq == 1
        sink([Event.done()])
        events = await drain(far)
    assert text_of(events) == "".join(f"{i}," for i in range(1000))
    assert events[-1].seq == 1001  # (deltas that arrived together may come merged)
    # Group commits: what was queued during one publish went out in the next one (split
    # only where a message would pass the broker's payload limit).
    assert len(publishes) <= 10, len(publishes)
    with pytest.raises(StreamEnded):
        sink([Event.delta("after the end")])
    with pytest.raises(StreamEnded):
        await a.append("fed", Event.delta("after the end"))


async def test_concurrent_appends_to_one_stream_share_publishes_and_keep_their_order(
    nodes, monkeypatch
):
    a, b = nodes
    await a.create("shared")
    publishes = count_publishes(a, monkeypatch)

    async def writer(name: str) -> None:
        for i in range(20):
            await a.append("shared", Event.message({"from": name, "i": i}))

    await asyncio.gather(*(writer(f"w{n}") for n in range(25)))
    assert len(publishes) < 25 * 20 / 4, len(publishes)
    await a.append("shared", Event.done())
    async with await b.subscribe("shared") as sub:
        events = await drain(sub)
    payloads = [e.data["payload"] for e in events if e.kind is Kind.MESSAGE]
    assert len(payloads) == 500
    for n in range(25):
        assert [p["i"] for p in payloads if p["from"] == f"w{n}"] == list(range(20))


async def test_a_producer_learns_at_its_next_append_that_another_node_ended_its_stream(nodes):
    a, b = nodes
    await a.create("cut")
    sink = a.appender("cut")
    assert sink is not None
    sink([Event.delta("a")])
    await eventually(lambda: a._streams["cut"].log.next_seq == 2)
    assert await b.cancel("cut")

    def refused() -> bool:
        try:
            sink([Event.delta("more")])
        except StreamEnded:
            return True
        return False

    await eventually(refused)
    async with await b.subscribe("cut") as sub:
        events = await drain(sub)
    assert text_of(events) == "a" and events[-1].data["finish_reason"] == "cancelled"


async def test_a_broker_that_stays_away_fails_the_producer_and_loses_nothing_stored(nats_server):
    hub = jetstream_hub(hub_config(nats_server, unavailable_after_s=0.5, request_timeout_s=0.2))
    await hub.start()
    try:
        await hub.create("away")
        sink = hub.appender("away")
        assert sink is not None
        sink([Event.delta("kept,")])
        await eventually(lambda: hub._streams["away"].log.next_seq == 2)
        nats_server.stop()
        sink([Event.delta("lost,")])  # queued; its publish fails after unavailable_after_s
        queue = hub._streams["away"].appends
        await eventually(lambda: queue.failure is not None, timeout=10)
        with pytest.raises(HubUnavailable):
            sink([Event.delta("more,")])
        nats_server.start()
        # The producer's end goes through (the awaited path), after what was stored.
        await hub.append("away", Event.error("the hub was away", code="hub_unavailable"))
        async with await hub.subscribe("away") as sub:
            events = await drain(sub)
        assert text_of(events) == "kept," and events[-1].kind is Kind.ERROR
        assert [e.seq for e in events] == [1, 2]
    finally:
        await hub.aclose()


async def test_a_stream_made_on_one_node_is_read_live_on_another(nodes):
    a, b = nodes
    info = await a.create("gen-1")
    await a.append_many("gen-1", [Event.delta(t) for t in "hel"])
    sub = await b.subscribe("gen-1")
    reader = asyncio.create_task(drain(sub))
    for t in "lo":
        await a.append("gen-1", Event.delta(t))
        await asyncio.sleep(0.01)
    await a.append("gen-1", Event.done())
    events = await reader
    assert text_of(events) == "hello" and events[-1].kind is Kind.DONE
    assert (await b.info("gen-1")).epoch == info.epoch
    for seq in range(6):
        async with await b.subscribe("gen-1", resume=Position(info.epoch, seq)) as again:
            assert text_of(await drain(again)) == "hello"[seq:]
    await sub.aclose()


async def test_appends_from_two_nodes_interleave_without_gaps(nodes):
    a, b = nodes
    await a.create("agents/1/events")
    await b.create("agents/1/events", exist_ok=True)

    async def writer(hub: JetStreamHub, name: str) -> None:
        for i in range(40):
            await hub.append("agents/1/events", Event.message({"from": name, "i": i}))

    await asyncio.gather(writer(a, "a"), writer(b, "b"))
    await a.append("agents/1/events", Event.done())
    for hub in (a, b):
        async with await hub.subscribe("agents/1/events") as sub:
            events = await drain(sub)
        assert [e.seq for e in events] == list(range(1, 82))
        payloads = [e.data["payload"] for e in events if e.kind is Kind.MESSAGE]
        for name in "ab":
            assert [p["i"] for p in payloads if p["from"] == name] == list(range(40))


async def test_an_append_made_on_another_node_returns_the_seqs_it_got(nodes):
    a, b = nodes
    await a.create("numbered")
    await a.append_many("numbered", [Event.delta("x"), Event.delta("y")])
    stored = await b.append_many("numbered", [Event.message({"n": 1}), Event.message({"n": 2})])
    assert [e.seq for e in stored] == [3, 4]
    assert [e.seq for e in await b.append_many("numbered", [Event.delta("z")])] == [5]
    assert (await a.info("numbered")).last_seq == 5


async def test_a_publish_stored_but_unanswered_is_not_written_again(nodes, monkeypatch):
    a, b = nodes
    await a.create("lost-answer")
    publish = a._store.publish_on
    lost: list[int] = []

    async def stored_then_refused(*args: Any, **kwargs: Any) -> int:
        seq = await publish(*args, **kwargs)
        if not lost:  # its answer is lost; the try again finds the log moved on
            lost.append(seq)
            raise Conflict("wrong last sequence")
        return seq

    monkeypatch.setattr(a._store, "publish_on", stored_then_refused)
    stored = await a.append_many("lost-answer", [Event.message({"n": 1})])
    assert lost and [e.seq for e in stored] == [1]
    await a.append("lost-answer", Event.done())
    for hub in (a, b):
        async with await hub.subscribe("lost-answer") as sub:
            events = await drain(sub)
        assert [e.data["payload"] for e in events if e.kind is Kind.MESSAGE] == [{"n": 1}]


async def test_a_node_far_behind_catches_up_in_bulk_not_a_round_trip_per_message(
    nodes, monkeypatch, layout
):
    a, b = nodes
    await a.create("long")
    await a.append("long", Event.delta("x"))
    assert (await b.info("long")).last_seq == 1  # b holds the beginning, follows nothing
    if layout == "node":
        # b follows a's home log and mirrors the stream as it is written: nothing to read.
        read = b._store.read_until_on
        reads = 0

        async def counted_read(*args: object, **kwargs: object) -> None:
            nonlocal reads
            reads += 1
            await read(*args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(b._store, "read_until_on", counted_read)
    for i in range(300):
        await a.append("long", Event.delta(str(i % 10)))
    if layout == "node":
        assert (await b.info("long")).last_seq == 301
        assert reads == 0
        return
    reads = 0
    direct_read = b._store.next_after

    async def counted(*args: object, **kwargs: object) -> object:
        nonlocal reads
        reads += 1
        return await direct_read(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(b._store, "next_after", counted)
    assert (await b.info("long")).last_seq == 301
    assert reads == 1  # the first message read directly, the other 299 through a consumer
    assert (await b.info("long")).last_seq == 301
    assert reads == 2  # up to date: one read, which finds nothing


async def test_cancel_on_another_node_stops_the_producer(nodes):
    a, b = nodes
    await a.create("gen-2", orphan=OrphanPolicy(OrphanMode.KEEP))
    stopped = asyncio.Event()
    a.on_cancel("gen-2", stopped.set)
    await a.append("gen-2", Event.delta("partial"))
    assert await b.cancel("gen-2") is True
    await asyncio.wait_for(stopped.wait(), 5)
    with pytest.raises(StreamEnded):
        await a.append("gen-2", Event.delta("late"))
    assert (await a.info("gen-2")).finish_reason == "cancelled"
    assert await a.cancel("gen-2") is False


async def test_a_dead_producer_node_ends_its_streams_with_an_error(nats_session):
    config = hub_config(nats_session)
    a = jetstream_hub(replace(config, node_id="a"))
    b = jetstream_hub(replace(config, node_id="b"))
    await a.start()
    await b.start()
    await a.create("gen-3", orphan=OrphanPolicy(OrphanMode.KEEP))
    a.on_cancel("gen-3", lambda: None)
    await a.append("gen-3", Event.delta("half"))
    sub = await b.subscribe("gen-3")
    await asyncio.sleep(0.5)  # b hears a's heartbeats
    # Node a vanishes without a word: its connection dies, its heartbeats stop.
    assert a._presence is not None
    a._presence.cancel()
    await a._store._client().close()
    events = await drain(sub, timeout=10)
    assert events[-1].kind is Kind.ERROR and events[-1].data is not None
    assert events[-1].data["code"] == "producer_lost" and "(a)" in events[-1].data["message"]
    assert text_of(events) == "half"
    await sub.aclose()
    await b.aclose()
    await a.aclose()


async def test_a_node_that_announced_a_pause_is_not_taken_for_dead_during_it(nodes):
    """A process about to stop for a full garbage-collector pass says so (`Hub.pausing`):
    the other nodes count its silence from the end of the pause. Here a's heartbeats stop
    for good after it announced 3 s; b must wait those out before ending a's stream (about
    0.6 s, the timeout, without the announcement)."""
    a, b = nodes
    loop = asyncio.get_running_loop()
    await a.create("gen-p", orphan=OrphanPolicy(OrphanMode.KEEP))
    a.on_cancel("gen-p", lambda: None)
    await a.append("gen-p", Event.delta("half"))
    sub = await b.subscribe("gen-p")
    await eventually(lambda: a.member in b._nodes.last_seen, what="b hears a")
    announced = a.pausing(3.0)
    assert announced is not None
    await announced  # the broker has it
    assert a._presence is not None
    a._presence.cancel()
    silent_from = loop.time()
    events = await drain(sub, timeout=15)
    assert loop.time() - silent_from >= 3.0
    assert events[-1].kind is Kind.ERROR and events[-1].data is not None
    assert events[-1].data["code"] == "producer_lost"
    await sub.aclose()


async def test_a_producer_known_only_from_the_streams_record_still_ends_with_producer_lost(
    nodes,
):
    a, b = nodes
    await eventually(lambda: len(b._nodes.last_seen) > 0, what="b hears a")
    assert a._presence is not None
    a._presence.cancel()  # from now on a's heartbeats never name what it produces
    await a.create("gen-6", orphan=OrphanPolicy(OrphanMode.KEEP))
    a.on_cancel("gen-6", lambda: None)  # recorded in the stream's record, not in a beat
    await eventually(lambda: a._streams["gen-6"].meta.producer == "a", what="recorded")
    await a.append("gen-6", Event.delta("half"))
    sub = await b.subscribe("gen-6")
    await a._store._client().close()
    events = await drain(sub, timeout=10)
    assert events[-1].kind is Kind.ERROR and events[-1].data is not None
    assert events[-1].data["code"] == "producer_lost"
    await sub.aclose()


async def test_readers_on_another_node_keep_a_stream_from_being_orphaned(nodes):
    a, b = nodes
    await a.create("gen-4", orphan=OrphanPolicy(OrphanMode.GRACE, grace_s=0.5))
    a.on_cancel("gen-4", lambda: None)
    sub = await b.subscribe("gen-4")
    await asyncio.sleep(1.2)
    assert not (await a.info("gen-4")).ended
    await sub.aclose()
    await asyncio.sleep(1.5)
    assert (await a.info("gen-4")).finish_reason == "cancelled"


async def test_readers_that_come_and_go_together_are_announced_together(nodes, monkeypatch):
    a, b = nodes
    ids = [f"crowd-{i}" for i in range(40)]
    for sid in ids:
        await a.create(sid)
    announced: list[dict[str, int]] = []
    tell = b._store.tell

    async def watched(what: str, payload: bytes) -> None:
        beat = Heartbeat.from_bytes(payload)
        if what == "hb" and beat is not None and beat.partial:
            announced.append(beat.readers)
        await tell(what, payload)

    monkeypatch.setattr(b._store, "tell", watched)
    subs = await asyncio.gather(*(b.subscribe(sid) for sid in ids))
    await eventually(lambda: sum(len(r) for r in announced) == len(ids), what="every first reader")
    assert len(announced) <= 4  # a few announcements for 40 streams, not one each
    await eventually(lambda: all(a._nodes.remote_readers(sid) == 1 for sid in ids), what="a knows")
    await asyncio.gather(*(sub.aclose() for sub in subs))
    await eventually(lambda: sum(len(r) for r in announced) == 2 * len(ids), what="every last")
    assert len(announced) <= 8
    await eventually(lambda: all(a._nodes.remote_readers(sid) == 0 for sid in ids), what="a knows")


async def test_folded_history_reaches_a_node_that_comes_later(nodes, nats_session, layout):
    a, _ = nodes
    await a.create("long", retention=Retention(max_events=16), orphan=OrphanPolicy())
    a.on_cancel("long", lambda: None)
    for i in range(600):
        await a.append("long", Event.delta(f"{i},"))
    await asyncio.sleep(1.5)  # a sweep stores the snapshot and purges JetStream
    if layout == "stream":
        stored = await a._store._jetstream().stream_info(a.js_config.events_stream)
        assert stored.state.messages < 100
    else:  # a home log is shared: the snapshot says where a late node starts reading
        assert await a._store.get_snapshot(stream_key("long")) is not None
        # ... and the home trims its log up to there (at the next round but one).
        from_seq = a._streams["long"].snapshot_from
        assert from_seq > 1
        await eventually(lambda: a._trimmed >= from_seq, timeout=5, what="a trim")
    c = jetstream_hub(replace(a.js_config, node_id="c"))
    await c.start()
    try:
        async with await c.subscribe("long") as sub:
            await a.append("long", Event.done())
            events = await drain(sub)
        assert events[0].kind is Kind.SNAPSHOT
        assert text_of(events) == "".join(f"{i}," for i in range(600))
    finally:
        await c.aclose()


async def test_nothing_acknowledged_is_lost_across_a_broker_restart(nats_server):
    hub = jetstream_hub(hub_config(nats_server, unavailable_after_s=15))
    await hub.start()
    try:
        await hub.create("durable")
        for i in range(50):
            await hub.append("durable", Event.delta(f"{i},"))
        restart = asyncio.get_running_loop().run_in_executor(None, nats_server.restart)
        for i in range(50, 100):  # some of these wait for the broker to come back
            await hub.append("durable", Event.delta(f"{i},"))
        await restart
        await hub.append("durable", Event.done())
        other = jetstream_hub(replace(hub.js_config, node_id="fresh"))
        await other.start()
        try:
            async with await other.subscribe("durable") as sub:
                events = await drain(sub)
            assert text_of(events) == "".join(f"{i}," for i in range(100))
            assert [e.seq for e in events][-1] == 101
        finally:
            await other.aclose()
    finally:
        await hub.aclose()


async def test_a_lost_history_is_reported_not_papered_over(nodes, layout):
    a, _ = nodes
    await a.create("gone")
    await a.append("gone", Event.delta("x"))
    config = a.js_config
    stream = config.log_stream if layout == "node" else config.events_stream
    await a._store._jetstream().delete_stream(stream)
    c = jetstream_hub(replace(a.js_config, node_id="c"))
    await c.start()  # makes the events stream anew: a new incarnation
    try:
        with pytest.raises(StreamNotFound, match="history was lost"):
            await c.subscribe("gone")
    finally:
        await c.aclose()


async def _vanish(hub: JetStreamHub) -> None:
    """The process dies without a word (as on SIGKILL): heartbeats stop, the connection drops."""
    assert hub._presence is not None
    hub._presence.cancel()
    await hub._store._client().close()


async def test_a_node_restarted_under_its_id_never_loses_acknowledged_writes(nats_session):
    config = hub_config(nats_session)
    first = jetstream_hub(replace(config, node_id="a"))
    await first.start()
    await first.create("before")
    await first.append_many("before", [Event.delta(t) for t in "xyz"])
    await _vanish(first)
    # Back under the same id within JetStream's duplicate window: its publishes count from
    # the start again, and none of them may be taken for the previous process's.
    again = jetstream_hub(replace(config, node_id="a"))
    b = jetstream_hub(replace(config, node_id="b"))
    await again.start()
    await b.start()
    try:
        await again.create("after")
        for t in "abc":
            await again.append("after", Event.delta(t))
        await again.append("after", Event.done())
        assert (await again.info("after")).last_seq == 4
        assert (await b.info("after")).last_seq == 4
        async with await b.subscribe("after") as sub:
            assert text_of(await drain(sub)) == "abc"
        assert (await b.info("before")).last_seq == 3
    finally:
        await b.aclose()
        await again.aclose()
        await first.aclose()


async def test_an_acknowledgement_for_another_message_is_an_error_not_a_success(hub):
    store = hub._store
    await hub.create("dup")
    key = stream_key("dup")
    assert await store.publish(key, b"first", msg_id="same-id", after=0) > 0
    last = await store.last_seq(key)
    # A retry of that very publish (its acknowledgement lost) is answered with its seq ...
    assert await store.publish(key, b"first", msg_id="same-id", after=0) == last
    # ... but a different message under that id is not stored, and says so.
    with pytest.raises(HubError, match="another message under id"):
        await store.publish(key, b"second", msg_id="same-id", after=last)
    assert await store.last_seq(key) == last


async def test_a_producer_ends_with_producer_lost_however_fast_its_node_comes_back(nats_session):
    config = hub_config(nats_session)
    a = jetstream_hub(replace(config, node_id="a"))
    b = jetstream_hub(replace(config, node_id="b"))
    await a.start()
    await b.start()
    again: JetStreamHub | None = None
    try:
        await a.create("gen-5", orphan=OrphanPolicy(OrphanMode.KEEP))
        a.on_cancel("gen-5", lambda: None)
        await a.append("gen-5", Event.delta("half"))
        sub = await b.subscribe("gen-5")
        await eventually(lambda: len(b._nodes.last_seen) > 0, what="b hears a")
        await _vanish(a)
        again = jetstream_hub(replace(config, node_id="a"))  # at once, under the same id
        await again.start()
        events = await drain(sub, timeout=10)
        assert events[-1].kind is Kind.ERROR and events[-1].data is not None
        assert events[-1].data["code"] == "producer_lost" and "(a)" in events[-1].data["message"]
        assert text_of(events) == "half"
        await sub.aclose()
        assert (await again.info("gen-5")).ended
    finally:
        if again is not None:
            await again.aclose()
        await b.aclose()
        await a.aclose()


async def test_time_to_first_token_comes_from_the_streams_records_on_every_node(nodes):
    a, b = nodes
    await a.create("timed", orphan=OrphanPolicy(OrphanMode.KEEP))
    await asyncio.sleep(0.3)  # the backend thinks before its first token
    await a.append("timed", Event.delta("first", tokens=1))
    await a.append("timed", Event.done())
    here = (await a.info("timed")).usage["time_to_first_token_ms"]
    there = (await b.info("timed")).usage["time_to_first_token_ms"]  # loaded after the fact
    assert here >= 300
    assert abs(there - here) < 100, (here, there)


@pytest.fixture
async def idle_nodes(nats_session: NatsServer) -> AsyncIterator[tuple[JetStreamHub, JetStreamHub]]:
    """Two nodes whose streams expire after 1.5 s without a reader or an append."""
    local = MemoryHubConfig(tick_s=0.05, ended_ttl_s=60, idle_ttl_s=1.5)
    async with two_nodes(hub_config(nats_session, local=local)) as pair:
        yield pair


async def test_idle_named_streams_expire_on_any_node_that_holds_them(idle_nodes):
    a, b = idle_nodes
    await a.create("idle/quiet")
    await a.append("idle/quiet", Event.message({"n": 1}))
    # Written only on b: a's replica follows nothing and must read b's appends first.
    await a.create("idle/written-elsewhere")
    await b.append("idle/written-elsewhere", Event.message({"n": 0}))
    # Read only on b: a learns of the reader from b's heartbeats.
    await a.create("idle/read-elsewhere")
    reader = await b.subscribe("idle/read-elsewhere")
    for n in range(8):  # 3.2 s: past the idle time twice over
        await b.append("idle/written-elsewhere", Event.message({"n": n + 1}))
        await asyncio.sleep(0.4)
    assert (await a.info("idle/quiet")).finish_reason == "expired"
    assert not (await a.info("idle/written-elsewhere")).ended
    assert not (await a.info("idle/read-elsewhere")).ended
    await reader.aclose()

    # Now idle everywhere: ended by whichever node looks first, seen by both.
    async with asyncio.timeout(6.0):
        while True:
            infos = [await hub.info(f"idle/{name}") for hub in (a, b)
                     for name in ("written-elsewhere", "read-elsewhere")]  # fmt: skip
            if all(info.finish_reason == "expired" for info in infos):
                break
            await asyncio.sleep(0.2)


async def test_a_read_waits_out_a_broker_that_does_not_answer_at_once(nodes, monkeypatch):
    a, _ = nodes
    await a.create("slow-read")
    await a.append("slow-read", Event.message({"n": 1}))
    late = jetstream_hub(replace(a.js_config, node_id="late"))
    await late.start()
    try:
        buckets = late._store._kv
        timeouts: list[str] = []

        class Busy:
            """A bucket whose first two reads get no answer in time (a saturated broker)."""

            def __init__(self, bucket: Any) -> None:
                self.bucket = bucket

            async def get(self, key: str) -> Any:
                if len(timeouts) < 2:
                    timeouts.append(key)
                    raise nats.errors.TimeoutError
                return await self.bucket.get(key)

        monkeypatch.setattr(late._store, "_kv", lambda name: Busy(buckets(name)))
        assert (await late.info("slow-read")).last_seq == 1  # loaded, not refused
        assert len(timeouts) == 2
    finally:
        await late.aclose()


async def test_a_stream_stores_one_snapshot_at_a_time(hub: JetStreamHub, monkeypatch) -> None:
    """The sweep asks for a snapshot every second until one is stored: a slow store must not
    run beside another (stored out of order, an older one would follow a newer one's purge)."""
    await hub.create(
        "snap", retention=Retention(max_events=2), orphan=OrphanPolicy(OrphanMode.KEEP)
    )
    for text in "abcdef":
        await hub.append("snap", Event.delta(text))
    replica = hub._streams["snap"]
    assert replica.oldest_kept() is not None
    stores: list[str] = []
    go_on = asyncio.Event()
    put = hub._store.put_snapshot

    async def slow_put(key: str, value: bytes) -> None:
        stores.append(key)
        await go_on.wait()
        await put(key, value)

    monkeypatch.setattr(hub._store, "put_snapshot", slow_put)
    first = asyncio.create_task(hub._store_snapshot(replica))
    await eventually(lambda: stores, what="the first store to begin")
    # Asked again while it waits: nothing more (a second store would wait here too).
    await asyncio.wait_for(hub._store_snapshot(replica), 5)
    go_on.set()
    await first
    assert len(stores) == 1
    await hub._store_snapshot(replica)  # and once it is over, a new one may go
    assert len(stores) == 2


async def test_an_event_larger_than_the_broker_takes_is_refused_as_such(nats_session):
    # The broker takes 1 MiB a message (its max_payload), headers included; the gateway's
    # own event limit is 1 MiB of encoded JSON, so an event near it, stored with its entry
    # and headers, does not fit. nats-py checks the payload alone: the server refused the
    # message and closed the node's connection, and the append failed as "JetStream does
    # not answer" (503, worth a retry that fails the same way). It is refused as too large
    # (413) before it is sent, and the stream and the hub go on.
    async with two_nodes(hub_config(nats_session, compression="none")) as (a, _):
        await a.create("big")
        await a.create("beside")
        payload = "x" * 1_048_500  # with its JSON: within the gateway's 1 MiB

        async def beside() -> int:
            return (await a.append("beside", Event.message({"n": 1}))).seq

        big, other = await asyncio.gather(
            a.append("big", Event.message({"p": payload})), beside(), return_exceptions=True
        )
        assert isinstance(big, EventTooLarge), big
        assert "max_payload" in str(big) and big.code == "event_too_large"
        assert other == 1
        assert (await a.append("big", Event.message({"p": "small"}))).seq == 1
        assert (await a.append("beside", Event.done())).seq == 2
