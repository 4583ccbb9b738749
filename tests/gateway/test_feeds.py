"""The gateway runs a backend's feed into the hub's appender where both exist, and iterates
the backend's stream everywhere else; either way the stream ends, and a cancel stops it."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncGenerator, Callable, Sequence

from airlane.backends.base import Feed, GenerationRequest, LoadTestSpec, Sink
from airlane.backends.synthetic import SyntheticBackend
from airlane.core import Event, Kind
from airlane.gateway import Gateway
from airlane.hub import MemoryHub
from airlane.hub.jetstream import jetstream_hub
from airlane.security import AllowAll
from tests.hub.test_jetstream import hub_config
from tests.natsserver import NatsServer
from tests.waiting import eventually

PRINCIPAL = AllowAll().authenticate(None)


def paced(chunks: int, interval_ms: float = 2) -> GenerationRequest:
    return GenerationRequest(
        model="m", loadtest=LoadTestSpec(chunks=chunks, mode="paced", interval_ms=interval_ms)
    )


class PullOnlyHub(MemoryHub):
    """A hub whose appends must wait: no appender, as JetStream's."""

    def appender(self, stream_id: str) -> Callable[[Sequence[Event]], int] | None:
        return None


class CountingBackend(SyntheticBackend):
    """The synthetic backend, counting how its streams were taken."""

    def __init__(self) -> None:
        super().__init__()
        self.fed = self.pulled = 0

    def feed(self, request: GenerationRequest) -> Feed | None:
        feed = super().feed(request)
        self.fed += feed is not None
        return feed

    def stream(self, request: GenerationRequest) -> AsyncGenerator[list[Event], None]:
        self.pulled += 1
        return super().stream(request)

    @property
    def pending_steps(self) -> int:
        """Steps filed with the loop's pacer and not yet called (a stopped feed's included:
        the pacer keeps them until their millisecond comes)."""
        pacer = self._pacer  # the synthetic backend's, made with its first feed
        return 0 if pacer is None else pacer.sleepers


async def read_all(gateway: Gateway, stream_id: str) -> list[Event]:
    events: list[Event] = []
    async with await gateway.subscribe(PRINCIPAL, stream_id) as subscription:
        while batch := await asyncio.wait_for(subscription.next_batch(), 5):
            events.extend(batch)
    return events


async def run_one(hub: MemoryHub, backend: CountingBackend, chunks: int) -> list[Event]:
    await hub.start()
    gateway = Gateway(hub, backend)
    try:
        info = await gateway.generate(PRINCIPAL, paced(chunks))
        return await read_all(gateway, info.stream_id)
    finally:
        await gateway.aclose()


async def test_a_paced_load_test_is_fed_where_the_hub_appends_at_once() -> None:
    backend = CountingBackend()
    events = await run_one(MemoryHub(), backend, 20)
    assert (backend.fed, backend.pulled) == (1, 0)
    assert [event.kind for event in events].count(Kind.MESSAGE) == 20
    assert events[-1].kind is Kind.DONE
    assert events[-1].data["usage"]["completion_tokens"] == 20 * 16


async def test_it_is_pulled_where_appends_must_wait() -> None:
    backend = CountingBackend()
    events = await run_one(PullOnlyHub(), backend, 20)
    assert (backend.fed, backend.pulled) == (0, 1)
    assert [event.kind for event in events].count(Kind.MESSAGE) == 20
    assert events[-1].kind is Kind.DONE


async def test_cancelling_a_fed_stream_stops_its_feed() -> None:
    hub = MemoryHub()
    await hub.start()
    backend = CountingBackend()
    gateway = Gateway(hub, backend)
    try:
        info = await gateway.generate(PRINCIPAL, paced(100_000, 1))
        assert gateway.running_generations == 1
        async with await gateway.subscribe(PRINCIPAL, info.stream_id) as subscription:
            seen = 0
            while seen < 3:  # a few of the pacer's steps: the feed is under way
                seen += len(await asyncio.wait_for(subscription.next_batch(), 5))
        assert await gateway.cancel(PRINCIPAL, info.stream_id)
        await eventually(lambda: gateway.running_generations == 0, what="the feed to stop")
        ended = await gateway.info(PRINCIPAL, info.stream_id)
        # Nothing is appended after the end: the stopped feed's next step, still filed with
        # the pacer, comes due and does nothing.
        await eventually(lambda: backend.pending_steps == 0, what="the filed step to run")
        assert (await gateway.info(PRINCIPAL, info.stream_id)).last_seq == ended.last_seq
        events = await read_all(gateway, info.stream_id)
        assert events[-1].kind is Kind.DONE
        assert events[-1].data["finish_reason"] == "cancelled"
    finally:
        await gateway.aclose()


class BrokenFeed:
    """Feeds one batch, then fails."""

    async def run(self, sink: Sink) -> None:
        sink([Event.delta("first")])
        await asyncio.sleep(0)
        raise RuntimeError("the feed broke")


class BrokenFeedBackend(SyntheticBackend):
    def feed(self, request: GenerationRequest) -> Feed | None:
        return BrokenFeed()


async def test_a_failing_feed_ends_its_stream_with_an_error() -> None:
    hub = MemoryHub()
    await hub.start()
    gateway = Gateway(hub, BrokenFeedBackend())
    try:
        info = await gateway.generate(PRINCIPAL, paced(5))
        events = await read_all(gateway, info.stream_id)
        assert [event.kind for event in events] == [Kind.DELTA, Kind.ERROR]
        assert events[-1].data["code"] == "internal_error"
    finally:
        await gateway.aclose()


class OpenEndedFeed:
    """Feeds one batch and returns without a terminal event (breaking the feed's rule)."""

    async def run(self, sink: Sink) -> None:
        sink([Event.delta("only")])


class OpenEndedFeedBackend(SyntheticBackend):
    def feed(self, request: GenerationRequest) -> Feed | None:
        return OpenEndedFeed()


async def test_a_feed_that_leaves_its_stream_open_still_leaves_it_ended() -> None:
    hub = MemoryHub()
    await hub.start()
    gateway = Gateway(hub, OpenEndedFeedBackend())
    try:
        info = await gateway.generate(PRINCIPAL, paced(5))
        events = await read_all(gateway, info.stream_id)
        assert [event.kind for event in events] == [Kind.DELTA, Kind.DONE]
        assert events[-1].data["finish_reason"] == "stop"
    finally:
        await gateway.aclose()


async def test_a_fed_producer_is_held_back_while_the_broker_is_stopped(
    nats_server: NatsServer,
) -> None:
    """5,000 chunks a second, and a broker stopped (SIGSTOP) for 2.5 s: unchecked, more than
    the hub queues (4,096 events) would fall due meanwhile and end the generation with
    ``hub_unavailable``. Held back, it is late, and whole."""
    hub = jetstream_hub(hub_config(nats_server))
    await hub.start()
    backend = CountingBackend()
    gateway = Gateway(hub, backend)
    chunks = 8000
    try:
        info = await gateway.generate(PRINCIPAL, paced(chunks, interval_ms=0.2))
        assert nats_server.process is not None
        nats_server.process.send_signal(signal.SIGSTOP)
        try:
            await asyncio.sleep(2.5)
        finally:
            nats_server.process.send_signal(signal.SIGCONT)
        stream = hub._streams[info.stream_id]
        await eventually(lambda: stream.log.terminal is not None, timeout=20)
        events = await read_all(gateway, info.stream_id)
    finally:
        await gateway.aclose()
        await hub.aclose()
    assert backend.fed == 1
    assert [event.kind for event in events if event.kind is Kind.ERROR] == []
    assert events[-1].kind is Kind.DONE and events[-1].seq == chunks + 2  # after the usage
    assert [event.seq for event in events] == list(range(events[0].seq, chunks + 3))
