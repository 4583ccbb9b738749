"""`SSEPump` in memory: heartbeats only on idle waits, every event delivered, disconnects.

Each test runs twice: with the hub calling the pump back (direct mode, `Subscription.listen`)
and with a subscription that cannot, so the pump waits in `next_batch` (tasked mode, what a
hub without call-backs gets). The heartbeat tests run in loop time (`tests.waiting.virtual_time`):
the pump's ping timer and the producer's pauses are on one clock that moves only when nothing
else can run, so "idle for three ping periods" is exact, whatever the machine's load."""

from __future__ import annotations

import asyncio
from collections.abc import MutableMapping
from typing import Any

import pytest

from airlane.core import Channel, Event
from airlane.hub import MemoryHub, Subscription, memory
from airlane.transports.http.metrics import HttpMetrics
from airlane.transports.http.sse_pump import SSEPump
from tests.waiting import elapse, eventually, settle, virtual_time

PING = b": ping\n\n"


def render(batch: list[Event]) -> bytes:
    return b"".join(b"data: %b\n\n" % e.text.encode() for e in batch if e.text)


class Peer:
    """An ASGI client that records the body and can disconnect. ``receiving`` is set once the
    pump (direct mode) or its watcher (tasked mode) waits in ``receive``: the pump is running
    and waiting for events."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.gone = asyncio.Event()
        self.receiving = asyncio.Event()

    async def send(self, message: MutableMapping[str, Any]) -> None:
        self.parts.append(message["body"])

    async def receive(self) -> MutableMapping[str, Any]:
        self.receiving.set()
        await self.gone.wait()
        return {"type": "http.disconnect"}


@pytest.fixture(params=["direct", "tasked"], autouse=True)
def pump_mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "tasked":
        monkeypatch.setattr(memory._MemorySubscription, "listen", Subscription.listen)
    return str(request.param)


async def pump_stream(ping_s: float, produce: Any) -> tuple[bool, list[bytes]]:
    hub = MemoryHub()
    await hub.create("s")
    peer = Peer()
    pump = SSEPump(
        peer.send,
        peer.receive,
        ping_s=ping_s,
        batch_limit=64,
        metrics=HttpMetrics(hub.stats, lambda: 0),
    )
    async with await hub.subscribe("s") as sub:
        producer = asyncio.create_task(produce(hub, peer))
        result = await asyncio.wait_for(pump.pump(sub, render), timeout=10)
        await producer
    await hub.aclose()
    return result, peer.parts


@virtual_time
async def test_pings_only_while_idle_and_every_event_arrives() -> None:
    async def produce(hub: MemoryHub, peer: Peer) -> None:
        for i in range(40):  # busy: an event every 5 ms, well within the ping interval
            await hub.append("s", Event.delta(f"{i}"))
            await elapse(0.005)
        busy = len(peer.parts)
        assert PING not in peer.parts[:busy]
        await elapse(0.35)  # idle: three ping periods, in loop time
        await hub.append_many("s", [Event.delta("last"), Event.done()])

    ended, parts = await pump_stream(0.1, produce)
    assert ended
    assert parts.count(PING) == 3  # exact: 0.1, 0.2 and 0.3 s into the idle spell
    data = b"".join(p for p in parts if p != PING)
    assert data == b"".join(b"data: %b\n\n" % t.encode() for t in [*map(str, range(40)), "last"])


@virtual_time
async def test_a_ping_due_as_data_arrives_loses_nothing() -> None:
    # Appends land on each ping deadline (in the same loop turn as the ping timer, the race
    # itself) or just around it, inside and outside the timer's slack.
    offsets = [0.0, -0.0005, 0.0, 0.0005, 0.0, -0.0015, 0.0, 0.0015]

    async def produce(hub: MemoryHub, peer: Peer) -> None:
        for i in range(30):
            await elapse(0.02 + offsets[i % len(offsets)])
            await hub.append("s", Event.delta(f"{i}"))
        await hub.append("s", Event.done())

    ended, parts = await pump_stream(0.02, produce)
    assert ended
    data = b"".join(p for p in parts if p != PING)
    assert data == b"".join(b"data: %d\n\n" % i for i in range(30))


@virtual_time
async def test_a_disconnect_while_idle_ends_the_pump() -> None:
    async def produce(hub: MemoryHub, peer: Peer) -> None:
        await elapse(0.15)  # idle for three ping periods, in loop time
        peer.gone.set()

    ended, parts = await pump_stream(0.05, produce)
    assert not ended and parts.count(PING) >= 2  # at 0.05 and 0.1 s at least


def _pump(hub: MemoryHub, peer: Peer, receive: Any = None) -> SSEPump:
    """A pump writing to ``peer``, reading ``receive`` (default: the peer's)."""
    return SSEPump(
        peer.send,
        receive or peer.receive,
        ping_s=5,
        batch_limit=64,
        metrics=HttpMetrics(hub.stats, lambda: 0),
    )


async def test_direct_mode_needs_no_watcher_task(pump_mode: str) -> None:
    """Direct: the pump's own task waits for the disconnect; tasked: a watcher task does."""
    hub = MemoryHub()
    await hub.create("s")
    peer = Peer()
    async with await hub.subscribe("s") as sub:
        running = asyncio.create_task(_pump(hub, peer).pump(sub, render))
        await asyncio.wait_for(peer.receiving.wait(), 5)
        names = {task.get_name() for task in asyncio.all_tasks()}
        assert ("sse-disconnect-watch" in names) is (pump_mode == "tasked")
        await hub.append("s", Event.done())
        assert await asyncio.wait_for(running, 5) is True
    await hub.aclose()


@pytest.mark.parametrize("order", ["end-leave", "leave-end", "end-step-leave"])
async def test_an_end_and_a_disconnect_in_one_turn_leave_no_stray_cancel(order: str) -> None:
    """The run ends as the client leaves, in either order within one loop turn: the pump
    returns either outcome, and the task that ran it goes on undisturbed (no cancellation
    left behind for its next await)."""
    hub = MemoryHub()
    await hub.create("s")
    peer = Peer()

    async def run(sub: Subscription) -> str:
        await _pump(hub, peer).pump(sub, render)
        await settle()  # a stray cancel would land here, in any of the turns it takes
        return "finished"

    async with await hub.subscribe("s") as sub:
        running = asyncio.create_task(run(sub))
        await asyncio.wait_for(peer.receiving.wait(), 5)
        if order == "leave-end":
            peer.gone.set()
            await hub.append("s", Event.done())
        else:
            await hub.append("s", Event.done())
            if order == "end-step-leave":
                # The end is decided before the disconnect arrives, and the wake-up for it
                # runs while the disconnect is already waiting to be read.
                await asyncio.sleep(0)
            peer.gone.set()
        assert await asyncio.wait_for(running, 5) == "finished"
    await hub.aclose()


async def test_cancelling_the_pump_from_outside_still_cancels_it() -> None:
    """A server shutting down cancels the request's task: the pump must not swallow that."""
    hub = MemoryHub()
    await hub.create("s")
    peer = Peer()
    async with await hub.subscribe("s") as sub:
        running = asyncio.create_task(_pump(hub, peer).pump(sub, render))
        await asyncio.wait_for(peer.receiving.wait(), 5)
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(running, 5)
    await hub.aclose()


async def test_request_messages_while_pumping_are_not_a_disconnect() -> None:
    """A late ``http.request`` (the rest of a body) is read and ignored."""
    hub = MemoryHub()
    await hub.create("s")
    peer = Peer()
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    receives = 0
    read_it = asyncio.Event()  # the message was read and the pump reads on

    async def receive() -> dict[str, Any]:
        nonlocal receives
        receives += 1
        if receives == 2:
            read_it.set()
        return await queue.get()

    pump = _pump(hub, peer, receive)
    async with await hub.subscribe("s") as sub:
        running = asyncio.create_task(pump.pump(sub, render))
        queue.put_nowait({"type": "http.request", "body": b"", "more_body": False})
        await asyncio.wait_for(read_it.wait(), 5)
        assert not running.done()
        await hub.append_many("s", [Event.delta("x"), Event.done()])
        assert await asyncio.wait_for(running, 5) is True
    assert b"data: x\n\n" in peer.parts
    await hub.aclose()


class BlockingPeer(Peer):
    """A peer whose ``send`` waits, while ``blocked``, until ``release`` is set: a server
    applying backpressure. ``held`` is set once a send waits."""

    def __init__(self) -> None:
        super().__init__()
        self.blocked = False
        self.release = asyncio.Event()
        self.held = asyncio.Event()

    async def send(self, message: MutableMapping[str, Any]) -> None:
        if self.blocked:
            self.held.set()
            await self.release.wait()
        self.parts.append(message["body"])


@pytest.mark.parametrize("end", ["terminal", "budget"])
async def test_a_last_batch_the_server_makes_wait_is_still_written(end: str) -> None:
    """The run's end (the stream's terminal event, or ``max_events`` reached) comes with a
    write the server makes wait: the pump returns once that write is done, and writes
    nothing past the budget."""
    hub = MemoryHub()
    await hub.create("s")
    peer = BlockingPeer()
    async with await hub.subscribe("s") as sub:
        max_events = 2 if end == "budget" else None
        running = asyncio.create_task(_pump(hub, peer).pump(sub, render, max_events=max_events))
        await hub.append("s", Event.delta("a"))
        await eventually(lambda: peer.parts == [b"data: a\n\n"], what="the first write")
        peer.blocked = True
        # (On another channel: two deltas of one channel would be coalesced into one frame.)
        last = Event.done() if end == "terminal" else Event.delta("c", channel=Channel.REASONING)
        await hub.append_many("s", [Event.delta("b"), last])
        await asyncio.wait_for(peer.held.wait(), 5)  # the last batch's write waits
        await settle()
        assert not running.done()  # still writing the last batch
        peer.release.set()
        assert await asyncio.wait_for(running, 5) is (end == "terminal")
    await hub.aclose()
    assert b"".join(peer.parts) == b"data: a\n\ndata: b\n\n"
