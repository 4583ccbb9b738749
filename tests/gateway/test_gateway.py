"""The gateway service in-process: producers, cancellation, errors, the security gate."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator

import pytest

from airlane.backends import BackendError, GenerationRequest, SyntheticBackend, SyntheticConfig
from airlane.core import Event, Kind, OrphanMode, OrphanPolicy, Retention, StreamTooLarge
from airlane.gateway import Gateway, GatewayConfig
from airlane.hub import HubFull, MemoryHub, MemoryHubConfig
from airlane.security import ANONYMOUS, ApiKeyPolicy, PermissionDenied, Principal, Unauthenticated
from tests.hub.contract import drain, text_of
from tests.waiting import eventually


class EndlessBackend:
    """A generation that never ends by itself: three deltas, then a wait for more that never
    come (``waiting`` is set then), until it is closed; records whether it was. With
    ``fail_with``, that is raised instead of the fourth delta."""

    name = "endless"

    def __init__(self, fail_with: Exception | None = None) -> None:
        self.closed = asyncio.Event()
        self.waiting = asyncio.Event()
        self.fail_with = fail_with

    async def stream(self, request: GenerationRequest) -> AsyncGenerator[list[Event], None]:
        try:
            for i in range(3):
                yield [Event.delta(f"{i} ")]
            if self.fail_with is not None:
                raise self.fail_with
            self.waiting.set()
            await asyncio.Event().wait()
        finally:
            self.closed.set()

    async def aclose(self) -> None:
        pass


@pytest.fixture
async def hub() -> AsyncIterator[MemoryHub]:
    hub = MemoryHub(MemoryHubConfig(tick_s=0.02))
    yield hub
    await hub.aclose()


def request(**fields: object) -> GenerationRequest:
    return GenerationRequest(model="m", messages=[{"role": "user", "content": "hi"}], **fields)  # type: ignore[arg-type]


async def test_a_generation_runs_to_done_and_matches_its_snapshot(hub: MemoryHub):
    gateway = Gateway(hub, SyntheticBackend(SyntheticConfig(speed=0)))
    await gateway.start()
    info = await gateway.generate(ANONYMOUS, request(seed=7, max_tokens=20))
    async with await gateway.subscribe(ANONYMOUS, info.stream_id) as sub:
        events = await drain(sub)
    assert events[-1].kind is Kind.DONE
    snapshot = await gateway.snapshot(ANONYMOUS, info.stream_id)
    assert snapshot.data is not None and text_of(events) == snapshot.data["text"]["content"]
    await gateway.aclose()


class ScriptedBackend:
    """Yields the given batches as they are."""

    name = "scripted"

    def __init__(self, batches: list[list[Event]]) -> None:
        self.batches = batches

    async def stream(self, request: GenerationRequest) -> AsyncGenerator[list[Event], None]:
        for batch in self.batches:
            yield batch

    async def aclose(self) -> None:
        pass


@pytest.mark.parametrize(
    ("batches", "expected"),
    [
        ([[Event.delta("a"), Event.delta("b")], [Event.done("length")]], "length"),
        (
            [[Event.delta("a")], [Event.delta("b"), Event.done("length"), Event.delta("late")]],
            "length",
        ),
        ([[Event.delta("a"), Event.delta("b")]], "stop"),  # no terminal: the gateway ends it
    ],
)
async def test_backend_batches_are_appended_in_order_up_to_the_end(hub, batches, expected):
    gateway = Gateway(hub, ScriptedBackend(batches))
    await gateway.start()
    info = await gateway.generate(ANONYMOUS, request())
    async with await gateway.subscribe(ANONYMOUS, info.stream_id) as sub:
        events = await drain(sub)
    assert text_of(events) == "ab" and events[-1].kind is Kind.DONE
    assert events[-1].data is not None and events[-1].data["finish_reason"] == expected
    assert (await gateway.info(ANONYMOUS, info.stream_id)).last_seq == 3
    await gateway.aclose()


async def test_a_generation_that_reaches_the_text_limit_ends_with_length(hub: MemoryHub):
    batches = [[Event.delta("abc")] for _ in range(10)]
    config = GatewayConfig(retention=Retention(max_text_chars=8))
    gateway = Gateway(hub, ScriptedBackend(batches), config=config)
    await gateway.start()
    info = await gateway.generate(ANONYMOUS, request())
    async with await gateway.subscribe(ANONYMOUS, info.stream_id) as sub:
        events = await drain(sub)
    assert text_of(events) == "abcabc" and events[-1].kind is Kind.DONE
    assert events[-1].data is not None and events[-1].data["finish_reason"] == "length"
    await gateway.create_named(ANONYMOUS, "notes")
    await gateway.publish(ANONYMOUS, "notes", Event.delta("x" * 8))  # named streams too
    with pytest.raises(StreamTooLarge):
        await gateway.publish(ANONYMOUS, "notes", Event.delta("y"))
    await gateway.aclose()


async def test_cancel_closes_the_backend_iterator(hub: MemoryHub):
    backend = EndlessBackend()
    gateway = Gateway(hub, backend)
    await gateway.start()
    info = await gateway.generate(ANONYMOUS, request())
    await asyncio.wait_for(backend.waiting.wait(), 1)  # mid-generation
    assert await gateway.cancel(ANONYMOUS, info.stream_id)
    await asyncio.wait_for(backend.closed.wait(), 1)
    assert (await gateway.info(ANONYMOUS, info.stream_id)).finish_reason == "cancelled"
    await eventually(lambda: gateway.running_generations == 0, what="the producer to end")
    await gateway.aclose()


async def test_orphan_policy_cancel_stops_the_producer_when_the_last_reader_leaves(hub):
    backend = EndlessBackend()
    gateway = Gateway(hub, backend, config=GatewayConfig(orphan=OrphanPolicy(OrphanMode.CANCEL)))
    await gateway.start()
    info = await gateway.generate(ANONYMOUS, request())
    sub = await gateway.subscribe(ANONYMOUS, info.stream_id)
    await sub.next_batch()
    await sub.aclose()
    await asyncio.wait_for(backend.closed.wait(), 1)
    await gateway.aclose()


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (BackendError("upstream said no", code="upstream_error"), "upstream_error"),
        (RuntimeError("bug"), "internal_error"),
    ],
)
async def test_backend_failures_end_the_stream_with_an_error_event(hub, error, code):
    gateway = Gateway(hub, EndlessBackend(fail_with=error))
    await gateway.start()
    info = await gateway.generate(ANONYMOUS, request())
    async with await gateway.subscribe(ANONYMOUS, info.stream_id) as sub:
        events = await drain(sub)
    assert events[-1].kind is Kind.ERROR and events[-1].data is not None
    assert events[-1].data["code"] == code
    await gateway.aclose()


async def test_generation_limit(hub):
    gateway = Gateway(hub, EndlessBackend(), config=GatewayConfig(max_generations=1))
    await gateway.start()
    await gateway.generate(ANONYMOUS, request())
    with pytest.raises(HubFull):
        await gateway.generate(ANONYMOUS, request())
    await gateway.aclose()


async def test_publish_creates_named_streams(hub):
    gateway = Gateway(hub, EndlessBackend())
    event = await gateway.publish(ANONYMOUS, "agents/1/events", Event.message({"step": 1}))
    assert event.seq == 1
    assert (await gateway.info(ANONYMOUS, "agents/1/events")).last_seq == 1


async def test_the_security_gate_is_asked_before_every_operation(hub):
    policy = ApiKeyPolicy({"k1": "alice"})
    with pytest.raises(Unauthenticated):
        policy.authenticate(None)
    with pytest.raises(Unauthenticated):
        policy.authenticate("wrong")
    alice = policy.authenticate("k1")
    assert alice == Principal("alice", tenant="alice")
    gateway = Gateway(hub, EndlessBackend(), security=policy)
    with pytest.raises(PermissionDenied):
        await gateway.publish(ANONYMOUS, "s", Event.message(1))
    await gateway.publish(alice, "s", Event.message(1))
    await gateway.aclose()
