"""The hub contract suite: every `Hub` implementation must pass it.

Subclass `HubContract` and provide an async ``hub`` fixture that yields a started hub whose
housekeeping tick is short (tests wait on orphan deadlines).
"""

from __future__ import annotations

import asyncio
import time

import pytest

from airlane.core import (
    Event,
    Kind,
    OrphanMode,
    OrphanPolicy,
    Position,
    Retention,
    StreamTooLarge,
)
from airlane.hub import (
    Hub,
    InvalidResume,
    StreamEnded,
    StreamExists,
    StreamNotFound,
    Subscription,
)


async def drain(sub: Subscription, timeout: float = 5.0) -> list[Event]:
    """Everything ``sub`` receives until its stream is over for it."""
    out: list[Event] = []
    async with asyncio.timeout(timeout):
        while batch := await sub.next_batch():
            out.extend(batch)
    return out


def text_of(events: list[Event]) -> str:
    """Rebuild the content text from frames the way a client does."""
    text = ""
    for event in events:
        if event.kind is Kind.SNAPSHOT:
            assert event.data is not None
            text = event.data["text"]["content"]
        elif event.kind is Kind.DELTA:
            text += event.text
    return text


class HubContract:
    """Behaviour every hub shares. Tests get a started ``hub`` fixture."""

    async def test_append_assigns_seq_and_readers_get_events_in_order(self, hub: Hub):
        await hub.create("s1")
        seqs = [(await hub.append("s1", Event.delta(t))).seq for t in "abc"]
        await hub.append("s1", Event.done())
        assert seqs == [1, 2, 3]
        async with await hub.subscribe("s1") as sub:
            events = await drain(sub)
        assert text_of(events) == "abc" and events[-1].kind is Kind.DONE
        assert sub.finished and sub.position.seq == 4

    async def test_append_many_is_seen_as_one_append_per_event(self, hub: Hub):
        await hub.create("batch", retention=Retention(max_events=3))
        sub = await hub.subscribe("batch")
        reader = asyncio.create_task(drain(sub))
        await asyncio.sleep(0.01)
        appended = await hub.append_many("batch", [Event.delta(t) for t in "abcde"])
        assert [e.seq for e in appended] == [1, 2, 3, 4, 5]
        assert all(e.ts_ns == appended[0].ts_ns > 0 for e in appended)
        await hub.append_many("batch", [Event.usage(completion_tokens=9), Event.done()])
        events = await reader
        assert text_of(events) == "abcde" and events[-1].kind is Kind.DONE
        info = await hub.info("batch")
        assert info.last_seq == 7 and info.retained_events == 3 and info.first_retained_seq == 5
        assert info.usage["completion_tokens"] == 9
        await sub.aclose()

    async def test_append_many_refuses_what_follows_the_end(self, hub: Hub):
        await hub.create("batch-end")
        with pytest.raises(StreamNotFound):
            await hub.append_many("nope", [Event.delta("x")])
        with pytest.raises(StreamEnded):
            await hub.append_many("batch-end", [Event.delta("a"), Event.done(), Event.delta("b")])
        info = await hub.info("batch-end")
        assert info.last_seq == 2 and info.ended
        with pytest.raises(StreamEnded):
            await hub.append_many("batch-end", [Event.delta("c")])
        assert await hub.append_many("batch-end", []) == []

    async def test_text_past_the_stream_limit_is_refused_and_not_stored(self, hub: Hub):
        # Folding keeps all text in the snapshot, so a stream's text is capped over its life,
        # retained or folded: the batch that would pass the cap is refused whole.
        await hub.create("capped", retention=Retention(max_events=2, max_text_chars=10))
        await hub.append_many("capped", [Event.delta("abcd"), Event.delta("efgh")])
        with pytest.raises(StreamTooLarge, match="limit of 10"):
            await hub.append_many("capped", [Event.delta("i"), Event.delta("jkl")])
        await hub.append("capped", Event.message({"n": 1}))  # what folding drops is not text
        await hub.append("capped", Event.delta("ij"))
        await hub.append("capped", Event.done())
        async with await hub.subscribe("capped") as sub:
            assert text_of(await drain(sub)) == "abcdefghij"
        assert (await hub.info("capped")).last_seq == 5

    async def test_appends_on_their_way_to_the_store_count_toward_the_text_limit(self, hub: Hub):
        # A hub that stores elsewhere queues appends for the broker: the limit counts them, so
        # appends made at once cannot pass it together (each alone would fit).
        await hub.create("racing", retention=Retention(max_text_chars=10))
        sink = hub.appender("racing")
        assert sink is not None
        sink([Event.delta("abcd")])
        sink([Event.delta("efg")])
        with pytest.raises(StreamTooLarge, match="limit of 10"):
            sink([Event.delta("hijk")])
        await hub.settle("racing")
        appends = [hub.append_many("racing", [Event.delta(t)]) for t in ("h", "ij", "k")]
        outcomes = await asyncio.gather(*appends, return_exceptions=True)
        assert [type(o) for o in outcomes if isinstance(o, BaseException)] == [StreamTooLarge]
        await hub.append("racing", Event.done())
        async with await hub.subscribe("racing") as sub:
            assert text_of(await drain(sub)) == "abcdefghij"  # "k" was refused

    async def test_create_twice_and_unknown_streams(self, hub: Hub):
        info = await hub.create("agents/1/events")
        with pytest.raises(StreamExists):
            await hub.create("agents/1/events")
        again = await hub.create("agents/1/events", exist_ok=True)
        assert again.epoch == info.epoch
        with pytest.raises(StreamNotFound):
            await hub.append("nope", Event.delta("x"))
        with pytest.raises(StreamNotFound):
            await hub.subscribe("nope")
        with pytest.raises(ValueError):
            await hub.create("bad id with spaces")

    async def test_stream_ids_are_those_held_oldest_first(self, hub: Hub):
        before = hub.stream_ids()
        for name in ("list/a", "list/b", "list/c"):
            await hub.create(name)
        await hub.delete("list/b")
        assert [s for s in hub.stream_ids() if s not in before] == ["list/a", "list/c"]

    async def test_live_tail_wakes_every_subscriber(self, hub: Hub):
        await hub.create("live")
        subs = [await hub.subscribe("live") for _ in range(5)]
        readers = [asyncio.create_task(drain(s)) for s in subs]
        await asyncio.sleep(0.01)
        for i in range(20):
            await hub.append("live", Event.delta(str(i % 10)))
            if i % 5 == 0:
                await asyncio.sleep(0)
        await hub.append("live", Event.done())
        results = await asyncio.gather(*readers)
        assert all(text_of(r) == "01234567890123456789" for r in results)
        for sub in subs:
            await sub.aclose()

    async def test_resume_from_a_position_gets_exactly_the_rest(self, hub: Hub):
        info = await hub.create("r")
        for t in "hello":
            await hub.append("r", Event.delta(t))
        await hub.append("r", Event.done())
        for seq in range(6):
            async with await hub.subscribe("r", resume=Position(info.epoch, seq)) as sub:
                assert text_of(await drain(sub)) == "hello"[seq:]

    async def test_a_reader_keeping_deltas_apart_gets_each_with_its_own_seq(self, hub: Hub):
        info = await hub.create("apart")
        for t in "hello":
            await hub.append("apart", Event.delta(t))
        await hub.append("apart", Event.done())
        async with await hub.subscribe("apart", resume=Position(info.epoch, 1)) as sub:
            sub.keep_deltas_apart()
            events = await drain(sub)
        assert [(e.text, e.seq) for e in events[:-1]] == [("e", 2), ("l", 3), ("l", 4), ("o", 5)]

    async def test_a_reader_resuming_at_the_end_of_an_ended_stream_is_exhausted(self, hub: Hub):
        info = await hub.create("end")
        await hub.append("end", Event.delta("x"))
        async with await hub.subscribe("end", resume=Position(info.epoch, 1)) as live:
            assert not live.exhausted
            await hub.append("end", Event.done())
            assert not live.exhausted
            await drain(live)
            assert live.exhausted
        async with await hub.subscribe("end", resume=Position(info.epoch, 2)) as late:
            assert late.exhausted
            assert await drain(late) == []

    async def test_bad_resume_positions(self, hub: Hub):
        info = await hub.create("b")
        await hub.append("b", Event.delta("x"))
        with pytest.raises(InvalidResume):
            await hub.subscribe("b", resume=Position(info.epoch, 5))
        await hub.append("b", Event.done())
        async with await hub.subscribe("b", resume=Position("stale", 1)) as sub:
            events = await drain(sub)
        assert events[0].kind is Kind.SNAPSHOT and events[0].data is not None
        assert events[0].data["reset"] is True and text_of(events) == "x"

    async def test_retention_gives_far_behind_readers_a_snapshot(self, hub: Hub):
        info = await hub.create("ret", retention=Retention(max_events=3))
        for t in "abcdefgh":
            await hub.append("ret", Event.delta(t))
        await hub.append("ret", Event.done())
        async with await hub.subscribe("ret", resume=Position(info.epoch, 1)) as sub:
            events = await drain(sub)
        assert events[0].kind is Kind.SNAPSHOT
        assert text_of(events) == "abcdefgh"
        snapshot = await hub.snapshot("ret")
        assert snapshot.data is not None and snapshot.data["text"]["content"] == "abcdefgh"

    async def test_cancel_ends_the_stream_and_tells_the_producer(self, hub: Hub):
        await hub.create("c")
        stopped = asyncio.Event()
        hub.on_cancel("c", stopped.set)
        await hub.append("c", Event.delta("partial"))
        sub = await hub.subscribe("c")
        assert await hub.cancel("c") is True
        assert stopped.is_set()
        assert await hub.cancel("c") is False
        with pytest.raises(StreamEnded):
            await hub.append("c", Event.delta("late"))
        events = await drain(sub)
        assert events[-1].kind is Kind.DONE and events[-1].data is not None
        assert events[-1].data["finish_reason"] == "cancelled"
        info = await hub.info("c")
        assert info.ended and info.finish_reason == "cancelled"
        await sub.aclose()

    async def test_orphan_policy_cancel_now_and_grace(self, hub: Hub):
        await hub.create("o1", orphan=OrphanPolicy(OrphanMode.CANCEL))
        await hub.create("o2", orphan=OrphanPolicy(OrphanMode.GRACE, grace_s=0.3))
        for sid in ("o1", "o2"):
            sub = await hub.subscribe(sid)
            await sub.aclose()
        sub2 = await hub.subscribe("o2")  # comes back within the grace period
        await asyncio.sleep(0.6)
        assert (await hub.info("o1")).finish_reason == "cancelled"
        assert not (await hub.info("o2")).ended
        await sub2.aclose()
        await asyncio.sleep(0.6)
        assert (await hub.info("o2")).finish_reason == "cancelled"

    async def test_orphan_policy_keep_generates_on_until_keep_s(self, hub: Hub):
        await hub.create("kept", orphan=OrphanPolicy(OrphanMode.KEEP, keep_s=0.5))
        sub = await hub.subscribe("kept")
        await sub.aclose()  # orphaned: kept for a later resume, generating on
        await asyncio.sleep(0.25)
        assert not (await hub.info("kept")).ended
        await hub.append("kept", Event.delta("on"))
        await asyncio.sleep(0.6)  # past keep_s: cancelled
        info = await hub.info("kept")
        assert info.finish_reason == "cancelled" and info.last_seq == 2
        async with await hub.subscribe("kept") as late:  # what it made is there to resume
            assert text_of(await drain(late)) == "on"

    async def test_named_streams_without_policy_survive_without_readers(self, hub: Hub):
        await hub.create("room")
        sub = await hub.subscribe("room")
        await sub.aclose()
        await asyncio.sleep(0.3)
        assert not (await hub.info("room")).ended

    async def test_info_reports_usage_and_counts(self, hub: Hub):
        await hub.create("u")
        sub = await hub.subscribe("u", subscriber="alice")
        await hub.append("u", Event.delta("a", tokens=3))
        async with asyncio.timeout(5):
            assert await sub.next_batch()  # alice reads it live
        late = await hub.subscribe("u", subscriber="bob")  # after it: history, replayed
        late.poll()
        info = await hub.info("u")
        assert info.last_seq == 1 and info.subscribers == 2 and not info.ended
        assert info.usage["completion_tokens"] == 3
        assert info.usage["delivered_tokens"] == {"alice": 3}
        assert info.usage["replayed_tokens"] == {"bob": 3}
        await late.aclose()
        await sub.aclose()
        assert (await hub.info("u")).subscribers == 0

    async def test_a_late_reader_is_replayed_history_then_served_live(self, hub: Hub):
        await hub.create("h")
        for text in "abc":
            await hub.append("h", Event.delta(text))
        late = await hub.subscribe("h", subscriber="carol")  # comes after three: history
        for text in "de":
            await hub.append("h", Event.delta(text))
        await hub.append("h", Event.done())
        frames: list[Event] = []
        async with asyncio.timeout(5):
            while batch := await late.next_batch():
                late.mark_written(batch, time.monotonic_ns())
                frames.extend(batch)
        assert text_of(frames) == "abcde"
        usage = (await hub.info("h")).usage
        assert usage["replayed_tokens"] == {"carol": 3}
        assert usage["delivered_tokens"] == {"carol": 2}
        assert 1 <= usage["replayed_events"] <= 3  # "abc", merged or not
        # Latency samples: "d" and "e" (merged or not) and the done; none for the history.
        assert 2 <= usage["gateway_latency_ms"]["samples"] <= 3
        await late.aclose()

    async def test_delete_releases_waiting_readers(self, hub: Hub):
        await hub.create("d")
        sub = await hub.subscribe("d")
        waiter = asyncio.create_task(drain(sub))
        await asyncio.sleep(0.01)
        await hub.delete("d")
        events = await waiter
        assert events and events[-1].kind is Kind.DONE
        with pytest.raises(StreamNotFound):
            await hub.info("d")
        await sub.aclose()

    async def test_many_streams_concurrently(self, hub: Hub):
        async def produce(sid: str) -> None:
            for i in range(30):
                await hub.append(sid, Event.delta(f"{i},"))
                await asyncio.sleep(0)
            await hub.append(sid, Event.done())

        async def consume(sid: str) -> str:
            async with await hub.subscribe(sid) as sub:
                return text_of(await drain(sub))

        ids = [f"gen-{i}" for i in range(50)]
        for sid in ids:
            await hub.create(sid)
        consumers = [asyncio.create_task(consume(sid)) for sid in ids]
        await asyncio.gather(*(produce(sid) for sid in ids))
        expected = "".join(f"{i}," for i in range(30))
        assert await asyncio.gather(*consumers) == [expected] * 50
