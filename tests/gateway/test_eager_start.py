"""Producers start eagerly: the first batch exists when `Gateway.generate` returns, the rest
runs in a task, and cancelling the stream stops that task (`airlane.runtime.eager`)."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import AsyncGenerator

import pytest

from airlane.backends.base import GenerationRequest, LoadTestSpec
from airlane.backends.synthetic import SyntheticBackend
from airlane.core import Event, Kind
from airlane.gateway import Gateway
from airlane.hub import MemoryHub
from airlane.runtime.eager import start_eagerly, yield_to_loop
from airlane.security import AllowAll
from tests.waiting import eventually, settle


async def make_gateway(backend: object) -> Gateway:
    hub = MemoryHub()
    await hub.start()
    return Gateway(hub, backend)  # type: ignore[arg-type]


async def test_the_first_batch_is_appended_before_generate_returns() -> None:
    gateway = await make_gateway(SyntheticBackend())
    principal = AllowAll().authenticate(None)
    request = GenerationRequest(model="m", loadtest=LoadTestSpec(chunks=50, mode="paced"))
    info = await gateway.generate(principal, request)
    assert (await gateway.info(principal, info.stream_id)).last_seq == 1  # no loop turn yet
    async with await gateway.subscribe(principal, info.stream_id) as subscription:
        events = []
        while batch := await asyncio.wait_for(subscription.next_batch(), 5):
            events.extend(batch)
    chunks = [e for e in events if e.kind is Kind.MESSAGE]
    assert len(chunks) == 50
    assert events[-1].kind is Kind.DONE
    await gateway.aclose()


class SlowBackend:
    """Yields one event, then waits for ever (until cancelled)."""

    name = "slow"
    cancelled = False

    async def stream(self, request: GenerationRequest) -> AsyncGenerator[list[Event], None]:
        yield [Event.delta("first")]
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            SlowBackend.cancelled = True
            raise
        yield [Event.delta("never")]

    async def aclose(self) -> None:
        pass


async def test_cancelling_the_stream_stops_the_rest_of_an_eager_producer() -> None:
    gateway = await make_gateway(SlowBackend())
    principal = AllowAll().authenticate(None)
    info = await gateway.generate(principal, GenerationRequest(model="m"))
    assert (await gateway.info(principal, info.stream_id)).last_seq == 1
    assert gateway.running_generations == 1
    assert await gateway.cancel(principal, info.stream_id)
    await eventually(lambda: gateway.running_generations == 0, what="the producer to stop")
    assert SlowBackend.cancelled
    await gateway.aclose()


async def test_start_eagerly_finishes_in_place_or_hands_over() -> None:
    ran: list[str] = []

    async def quick() -> None:
        ran.append("quick")

    async def waits() -> None:
        ran.append("before")
        await asyncio.sleep(0)
        ran.append("after")

    assert start_eagerly(quick()) is None
    task = start_eagerly(waits())
    assert ran == ["quick", "before"]
    assert task is not None
    await task
    assert ran == ["quick", "before", "after"]


async def test_an_error_before_the_first_wait_reaches_the_caller() -> None:
    async def fails() -> None:
        raise ValueError("at once")

    with pytest.raises(ValueError, match="at once"):
        start_eagerly(fails())


async def test_a_cancel_before_the_task_first_runs_reaches_the_coroutine() -> None:
    seen: list[str] = []

    async def waits_for_ever() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise
        except GeneratorExit:  # what a coroutine left to the garbage collector would see
            seen.append("closed")
            raise

    task = start_eagerly(waits_for_ever())
    assert task is not None
    task.cancel()  # before the task's first step
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == ["cancelled"]


async def test_a_cancel_after_the_awaited_future_completed_is_not_lost() -> None:
    loop = asyncio.get_running_loop()
    future: asyncio.Future[int] = loop.create_future()
    seen: list[str] = []

    async def waits() -> None:
        try:
            await future
            seen.append("resumed")
            await asyncio.Event().wait()  # only a lost cancel would get here
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    task = start_eagerly(waits())
    assert task is not None
    await settle()  # the task has taken its first step: it now waits on the future
    future.set_result(1)
    task.cancel()  # in the same turn: the future is done, the driver has not run yet
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == ["cancelled"]


async def test_a_bare_yield_first_gives_the_loop_one_turn() -> None:
    ran: list[str] = []

    async def yields() -> None:
        ran.append("before")
        await yield_to_loop()
        ran.append("after")

    task = start_eagerly(yields(), name="yields")
    assert task is not None and task.get_name() == "yields"
    asyncio.get_running_loop().call_soon(ran.append, "next turn")
    await task
    assert ran == ["before", "next turn", "after"]
    assert "yields" in repr(task)


async def test_a_cancelled_task_is_freed_without_the_collector() -> None:
    """The cancel passes through the wrapper's ``throw``: its frame, kept by the exception's
    traceback, must not keep the exception (a cycle only the collector would free)."""

    class Marker:
        pass

    async def waits(marker: Marker) -> None:
        await asyncio.Event().wait()

    marker = Marker()
    gone = weakref.ref(marker)
    task = start_eagerly(waits(marker))
    del marker
    await asyncio.sleep(0)
    gc.disable()
    try:
        assert task is not None
        task.cancel()
        await asyncio.wait([task])
        assert task.cancelled()
        del task
        assert gone() is None
    finally:
        gc.enable()
