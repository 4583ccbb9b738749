"""Timed streams pushed: paced load tests (`PacedFeed`, and the schedule it shares with the
pulled generator, `PacedSchedule`) and synthetic text (`TimedFeed`): the same events at the
same due times as `SyntheticBackend.stream`, stopped by a cancel or a refusal."""

from __future__ import annotations

import asyncio
import gc
import time

import orjson
import pytest

from airlane.backends.base import BackendError, Feed, FeedingBackend, GenerationRequest
from airlane.backends.paced import PacedFeed, PacedSchedule, TimedFeed
from airlane.backends.pacing import Pacer
from airlane.backends.synthetic import SyntheticBackend, SyntheticConfig, SyntheticScript
from airlane.core import Event, Kind
from airlane.hub import StreamEnded

from .pausing import PausingSink
from .test_synthetic_backend import LoadTestSpec, check_chunk, request


def schedule(count: int, cap: int = 8, start_ns: int = 1_000_000_000) -> PacedSchedule:
    """Chunks every 20 ms whose bytes are ``index:due_ns``."""
    return PacedSchedule(
        start_ns,
        20_000_000,
        count,
        cap,
        encode=lambda index, due_ns: b"%d:%d" % (index, due_ns),
        event=lambda raw: Event.message("", raw=raw),
    )


def chunks(batch: list[Event]) -> list[tuple[int, int]]:
    pairs = (event.raw.split(b":") for event in batch if event.raw is not None)
    return [(int(index), int(due)) for index, due in pairs]


def test_the_schedule_releases_the_next_chunk_and_whatever_is_already_due() -> None:
    plan = schedule(10, cap=3)
    start = 1_000_000_000
    assert chunks(plan.take(start)) == [(1, start)]  # the first is due at once, alone
    assert plan.due_ns == start + 20_000_000
    # 50 ms later: chunks 2 and 3 are due (20 and 40 ms), 4 is not (60 ms).
    due = [(2, start + 20_000_000), (3, start + 40_000_000)]
    assert chunks(plan.take(start + 50_000_000)) == due
    # Far behind: every due chunk, but at most the cap in one batch.
    assert [index for index, _ in chunks(plan.take(start + 10**9))] == [4, 5, 6]
    assert [index for index, _ in chunks(plan.take(start + 10**9))] == [7, 8, 9]
    assert not plan.finished
    assert [index for index, _ in chunks(plan.take(start + 10**9))] == [10]
    assert plan.finished and plan.index == 10


def test_a_schedule_without_chunks_is_finished_from_the_start() -> None:
    assert schedule(0).finished


async def collect_feed(feed: Feed) -> list[list[Event]]:
    batches: list[list[Event]] = []
    await asyncio.wait_for(feed.run(batches.append), 10)
    return batches


def paced(chunks: int, interval_ms: float = 15) -> GenerationRequest:
    return request(loadtest=LoadTestSpec(chunks=chunks, mode="paced", interval_ms=interval_ms))


async def test_the_feed_pushes_the_streams_chunks_at_their_due_times() -> None:
    backend = SyntheticBackend()
    assert isinstance(backend, FeedingBackend)
    before = time.monotonic_ns()
    feed = backend.feed(paced(6))  # its clock starts here
    assert isinstance(feed, PacedFeed)
    received: list[tuple[int, int]] = []

    def sink(batch: list[Event]) -> None:
        for event in batch:
            if event.kind is Kind.MESSAGE:
                ts = check_chunk(event.raw, len(received) + 1)["ts"]
                received.append((ts, time.monotonic_ns()))
        sinks.append([event.kind for event in batch])

    sinks: list[list[Kind]] = []
    await asyncio.wait_for(feed.run(sink), 10)
    stamps = [ts for ts, _ in received]
    assert [ts - stamps[0] for ts in stamps] == [i * 15_000_000 for i in range(6)]
    assert before <= stamps[0]
    assert all(arrival >= ts for ts, arrival in received)  # never before its due time
    # One batch per chunk, the usage and terminal events with the last.
    assert sinks[:5] == [[Kind.MESSAGE]] * 5
    assert sinks[5] == [Kind.MESSAGE, Kind.USAGE, Kind.DONE]


async def test_the_feed_carries_what_the_stream_carries() -> None:
    backend = SyntheticBackend()
    pulled = [event async for batch in backend.stream(paced(5, 1)) for event in batch]
    feed = backend.feed(paced(5, 1))
    assert feed is not None
    pushed = [event for batch in await collect_feed(feed) for event in batch]
    assert [event.kind for event in pushed] == [event.kind for event in pulled]

    def without_ts(event: Event) -> object:
        if event.raw is None:
            return event.data
        body = orjson.loads(event.raw)
        del body["ts"]
        return body

    assert [without_ts(event) for event in pushed] == [without_ts(event) for event in pulled]


async def test_an_empty_load_test_feeds_only_its_end() -> None:
    feed = SyntheticBackend().feed(paced(0))
    assert feed is not None
    batches = await collect_feed(feed)
    assert [[event.kind for event in batch] for batch in batches] == [[Kind.USAGE, Kind.DONE]]


async def test_only_timed_streams_have_a_feed() -> None:
    assert isinstance(SyntheticBackend().feed(request()), TimedFeed)  # text at speed 1
    backend = SyntheticBackend(SyntheticConfig(speed=0))
    assert backend.feed(request()) is None  # text that never waits
    assert backend.feed(request(loadtest=LoadTestSpec(chunks=5, mode="burst"))) is None
    with pytest.raises(BackendError, match="invalid load-test spec"):
        backend.feed(request(loadtest=LoadTestSpec(chunks=-1, mode="paced")))


class RefusingSink:
    """Takes two batches, then refuses, as a hub does once the stream was cancelled."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, batch: list[Event]) -> None:
        self.calls += 1
        if self.calls == 3:
            raise StreamEnded("cancelled meanwhile")


async def test_a_refusing_sink_stops_the_feed_and_its_reason_is_raised() -> None:
    feed = SyntheticBackend().feed(paced(1000, 1))
    assert feed is not None
    sink = RefusingSink()
    with pytest.raises(StreamEnded, match="cancelled meanwhile"):
        await asyncio.wait_for(feed.run(sink), 10)
    await asyncio.sleep(0.02)
    assert sink.calls == 3


async def test_a_feed_runs_once() -> None:
    feed = SyntheticBackend().feed(paced(1))
    assert feed is not None
    await collect_feed(feed)
    with pytest.raises(RuntimeError, match="runs once"):
        await feed.run(lambda batch: None)


async def test_a_refused_feed_leaves_no_reference_cycle() -> None:
    """An exception set on the feed's future holds the frames that hold the feed; were the
    future kept, every refused feed would wait for a full collection to be freed."""
    backend = SyntheticBackend()

    async def refused_once() -> None:
        feed = backend.feed(paced(100, 1))
        assert feed is not None
        with pytest.raises(StreamEnded):
            await feed.run(RefusingSink())

    await refused_once()  # warm: first-use caches are not what this is about
    gc.collect()
    gc.disable()
    try:
        for _ in range(5):
            await refused_once()
        assert gc.collect() == 0
    finally:
        gc.enable()


# -- text with its own timing: `TimedFeed` -----------------------------------------------------

FAST = SyntheticConfig(ttft_ms=5, itl_ms=2, itl_jitter_ms=1, default_max_tokens=40)

TOOL = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}


def kinds_and_texts(events: list[Event]) -> list[tuple[object, ...]]:
    return [(e.kind, e.channel, e.text, e.data) for e in events]


@pytest.mark.parametrize(
    "fields",
    [{}, {"reasoning": True}, {"tools": [TOOL], "tool_choice": "required"}, {"max_tokens": 3}],
    ids=["text", "reasoning", "tools", "short"],
)
async def test_text_is_fed_as_it_is_streamed(fields: dict[str, object]) -> None:
    backend = SyntheticBackend(FAST)
    pulled = [event async for batch in backend.stream(request(**fields)) for event in batch]
    feed = backend.feed(request(**fields))
    assert isinstance(feed, TimedFeed)
    pushed = [event for batch in await collect_feed(feed) for event in batch]
    assert kinds_and_texts(pushed) == kinds_and_texts(pulled)
    assert pushed[-1].kind is Kind.DONE


async def test_fed_text_is_never_early() -> None:
    speed = 4.0
    config = SyntheticConfig(ttft_ms=40, itl_ms=20, itl_jitter_ms=10, speed=speed)
    due_ns = [round(due_s / speed * 1e9) for due_s, _ in SyntheticScript(request(), config)]
    before = time.monotonic_ns()
    feed = SyntheticBackend(config).feed(request())  # its clock starts here
    assert feed is not None
    arrivals: list[int] = []
    await asyncio.wait_for(
        feed.run(lambda batch: arrivals.extend([time.monotonic_ns()] * len(batch))), 10
    )
    assert len(arrivals) == len(due_ns)
    assert all(at >= before + due for at, due in zip(arrivals, due_ns, strict=True))


async def test_a_timed_feed_hands_over_what_is_due_at_most_cap_at_once() -> None:
    pacer = Pacer.for_loop(None)
    now = time.monotonic_ns()
    items = [(now - 1_000_000, Event.delta(str(i))) for i in range(5)]  # all due already
    items.append((now + 5_000_000, Event.done("stop")))
    batches = await collect_feed(TimedFeed(pacer, iter(items), cap=2))
    assert [[event.text for event in batch] for batch in batches] == [
        ["0", "1"],
        ["2", "3"],
        ["4"],
        [""],
    ]
    assert await collect_feed(TimedFeed(pacer, iter([]), cap=2)) == []  # nothing to feed


def timed_feed(timed: str, count: int, interval_ms: int) -> Feed:
    """A paced load test of ``count`` chunks, or synthetic text of ``count`` tokens, one
    every ``interval_ms``."""
    if timed == "paced":
        feed = SyntheticBackend().feed(paced(count, interval_ms))
    else:
        text = SyntheticBackend(SyntheticConfig(ttft_ms=1, itl_ms=interval_ms))
        feed = text.feed(request(max_tokens=count))
    assert feed is not None
    return feed


@pytest.mark.parametrize("timed", ["paced", "text"])
async def test_cancelling_the_run_stops_the_feed(timed: str) -> None:
    feed = timed_feed(timed, 1000 if timed == "paced" else 5000, 5)
    batches: list[list[Event]] = []
    task = asyncio.create_task(feed.run(batches.append))
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    fed = len(batches)
    assert 1 <= fed < 1000
    await asyncio.sleep(0.05)  # the step still filed with the pacer comes and does nothing
    assert len(batches) == fed


@pytest.mark.parametrize("timed", ["paced", "text"])
async def test_a_paused_feed_hands_over_nothing_until_resumed_then_everything_in_order(
    timed: str,
) -> None:
    unpaused = [event for batch in await collect_feed(timed_feed(timed, 60, 1)) for event in batch]
    feed = timed_feed(timed, 60, 1)
    sink = PausingSink(feed)
    batches = sink.batches
    task = asyncio.create_task(feed.run(sink))
    await asyncio.sleep(0.15)  # 150 ms: every step fell due meanwhile
    assert len(batches) == 1 and not task.done()
    feed.resume()  # the step that fell due is taken now, the rest as filed
    await asyncio.wait_for(task, 10)
    events = sink.events
    assert [event.kind for event in events] == [event.kind for event in unpaused]
    if timed == "paced":
        for n, event in enumerate(events[:60]):
            check_chunk(event.raw, n + 1)  # every chunk, in order
    else:
        assert [event.text for event in events] == [event.text for event in unpaused]
