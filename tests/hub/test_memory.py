"""`MemoryHub` against the hub contract, plus its own limits."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from airlane.core import Event, OrphanMode, OrphanPolicy
from airlane.hub import HubFull, MemoryHub, MemoryHubConfig, StreamEnded, StreamNotFound
from tests.hub.contract import HubContract, drain


@pytest.fixture
async def hub() -> AsyncIterator[MemoryHub]:
    hub = MemoryHub(MemoryHubConfig(tick_s=0.05, ended_ttl_s=60))
    await hub.start()
    yield hub
    await hub.aclose()


class TestMemoryHubContract(HubContract):
    """The shared contract."""


async def test_stream_and_subscriber_limits():
    hub = MemoryHub(MemoryHubConfig(max_streams=2, max_subscribers=1))
    await hub.create("a")
    await hub.create("b")
    with pytest.raises(HubFull):
        await hub.create("c")
    sub = await hub.subscribe("a")
    with pytest.raises(HubFull):
        await hub.subscribe("b")
    await sub.aclose()
    await hub.aclose()


async def test_ended_streams_expire():
    hub = MemoryHub(MemoryHubConfig(tick_s=0.05, ended_ttl_s=0.1))
    await hub.start()
    await hub.create("x")
    await hub.cancel("x")
    await asyncio.sleep(1.3)
    assert hub.stats().streams == 0
    await hub.aclose()


async def test_one_tenant_cannot_take_the_whole_hub():
    hub = MemoryHub(MemoryHubConfig(max_streams=10, max_tenant_streams=3))
    for n in range(3):
        await hub.create(f"@flood/s{n}")
    with pytest.raises(HubFull, match="this tenant holds 3 streams"):
        await hub.create("@flood/s3")
    await hub.create("@other/s0")  # another tenant still has room
    for n in range(4):
        await hub.create(f"plain{n}")  # the default tenant: bound by max_streams only
    await hub.delete("@flood/s0")
    await hub.create("@flood/s3")  # a deleted stream gives its place back
    await hub.aclose()


async def test_named_streams_leave_room_for_generations():
    hub = MemoryHub(MemoryHubConfig(max_streams=10, generation_share=0.3))
    for n in range(7):
        await hub.create(f"named{n}")
    with pytest.raises(HubFull, match="kept for generations"):
        await hub.create("named7")
    for n in range(3):  # a generation has an orphan policy: the reserve is its
        await hub.create(f"gen{n}", orphan=OrphanPolicy(OrphanMode.KEEP))
    with pytest.raises(HubFull, match="10 streams, its limit"):
        await hub.create("gen3", orphan=OrphanPolicy(OrphanMode.KEEP))
    with pytest.raises(ValueError, match="generation_share"):
        MemoryHubConfig(generation_share=1.0)
    await hub.aclose()


async def test_idle_streams_end_and_read_ones_do_not():
    hub = MemoryHub(MemoryHubConfig(tick_s=0.05, idle_ttl_s=0.3, ended_ttl_s=60))
    await hub.start()
    await hub.create("idle")
    await hub.create("read")
    reader = await hub.subscribe("read")
    await hub.append("idle", Event.message({"n": 1}))
    await asyncio.sleep(1.5)  # the sweep runs about once a second
    idle = await hub.info("idle")
    assert idle.ended and idle.finish_reason == "expired"
    assert not (await hub.info("read")).ended  # someone reads it: not idle
    await reader.aclose()
    await hub.aclose()


async def test_aclose_releases_waiting_readers():
    hub = MemoryHub()
    await hub.start()
    await hub.create("w")
    sub = await hub.subscribe("w")
    waiter = asyncio.create_task(drain(sub))
    await asyncio.sleep(0.01)
    await hub.aclose()
    assert await asyncio.wait_for(waiter, 1) == []


async def test_a_cancelled_wait_leaves_other_readers_waiting_and_nothing_behind(hub):
    await hub.create("w")
    quitter, stayer = await hub.subscribe("w"), await hub.subscribe("w")
    for _ in range(3):  # as a heartbeat interrupts an idle reader
        waiting = asyncio.create_task(quitter.next_batch())
        await asyncio.sleep(0.01)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
    staying = asyncio.create_task(stayer.next_batch())
    await asyncio.sleep(0.01)
    assert len(hub._streams["w"].waiters) == 1
    await hub.append("w", Event.delta("x"))
    assert [e.text for e in await staying] == ["x"]
    assert [e.text for e in quitter.poll()] == ["x"]
    assert hub._streams["w"].waiters == []
    await quitter.aclose()
    await stayer.aclose()


async def test_the_appender_appends_and_wakes_readers_before_it_returns(hub):
    await hub.create("s")
    append = hub.appender("s")
    assert append is not None
    woken: list[str] = []
    async with await hub.subscribe("s") as subscription:
        subscription.listen(lambda: woken.append("ready"))
        append([Event.delta("a"), Event.delta("b")])
        assert woken == ["ready"]  # in the appender's own call
        assert "".join(event.text for event in subscription.poll()) == "ab"  # coalesced
        append([Event.done("stop")])
        with pytest.raises(StreamEnded):
            append([Event.delta("late")])
    assert (await hub.info("s")).last_seq == 3


async def test_an_appender_for_a_stream_that_is_gone_says_so(hub):
    append = hub.appender("never-made")
    assert append is not None
    with pytest.raises(StreamNotFound):
        append([Event.delta("a")])
