"""`WebSocketPump` in memory: every event in order, backpressure, a shared lock, the end.

Each test runs three ways: written from the hub's call-back through a ``write_now`` call
(direct), with no ``write_now`` (what an ASGI server without the extension gets), and with a
subscription that cannot call back (a hub without `Subscription.listen`): the last two wait
in `next_batch` and send through ASGI."""

from __future__ import annotations

import asyncio
from collections.abc import MutableMapping
from typing import Any

import pytest

from airlane.core import Channel, Event
from airlane.hub import MemoryHub, Subscription, memory
from airlane.transports.http.metrics import HttpMetrics
from airlane.transports.http.ws_pump import WebSocketPump
from tests.waiting import eventually, settle


def frames(batch: list[Event]) -> list[bytes]:
    return [event.text.encode() for event in batch if event.text]


class Socket:
    """The connection as the pump sees it: ``write_now`` takes messages unless ``paused``;
    ``send`` (ASGI) waits while ``blocked`` (``held`` is set once one does). Both record to
    one ordered list of writes."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, list[bytes]]] = []
        self.paused = False
        self.blocked = False
        self.release = asyncio.Event()
        self.held = asyncio.Event()
        self.fail: Exception | None = None

    def write_now(self, messages: list[bytes], binary: bool) -> bool:
        assert not binary
        if self.paused:
            return False
        self.writes.append(("direct", list(messages)))
        return True

    async def send(self, message: MutableMapping[str, Any]) -> None:
        if self.fail is not None:
            raise self.fail
        if self.blocked:
            self.held.set()
            await self.release.wait()
        if message["type"] == "websocket.send_many":
            self.writes.append(("asgi", list(message["texts"])))
        else:
            self.writes.append(("asgi", [message["text"].encode()]))

    def messages(self) -> list[bytes]:
        return [m for _, batch in self.writes for m in batch]


@pytest.fixture(params=["direct", "no-write-now", "no-listen"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "no-listen":
        monkeypatch.setattr(memory._MemorySubscription, "listen", Subscription.listen)
    return str(request.param)


def make_pump(
    sub: Subscription, hub: MemoryHub, socket: Socket, mode: str, lock: asyncio.Lock | None = None
) -> WebSocketPump:
    return WebSocketPump(
        sub,
        frames,
        send=socket.send,
        binary=False,
        send_many=True,
        write_now=None if mode == "no-write-now" else socket.write_now,
        metrics=HttpMetrics(hub.stats, lambda: 0),
        batch_limit=64,
        lock=lock,
    )


async def started(mode: str) -> tuple[MemoryHub, Subscription]:
    hub = MemoryHub()
    await hub.create("s")
    return hub, await hub.subscribe("s")


async def test_every_event_arrives_in_order_and_the_run_ends_with_the_stream(mode: str) -> None:
    hub, sub = await started(mode)
    socket = Socket()
    running = asyncio.create_task(make_pump(sub, hub, socket, mode).run())
    for i in range(30):
        await hub.append("s", Event.delta(f"{i}"))
        if i % 3 == 0:
            await asyncio.sleep(0)
    await hub.append("s", Event.done())
    await asyncio.wait_for(running, 5)
    assert b"".join(socket.messages()) == "".join(map(str, range(30))).encode()
    expected = "asgi" if mode != "direct" else "direct"
    assert {how for how, _ in socket.writes} == {expected}
    await sub.aclose()
    await hub.aclose()


async def test_a_write_the_server_makes_wait_holds_back_the_rest_and_the_end(mode: str) -> None:
    """Paused: the batch goes through ASGI ``send``, which waits; nothing else is written
    before it, and the run ends (at the terminal event) only once it is done."""
    hub, sub = await started(mode)
    socket = Socket()
    running = asyncio.create_task(make_pump(sub, hub, socket, mode).run())
    await hub.append("s", Event.delta("a"))
    await eventually(lambda: socket.messages() == [b"a"], what="a written")
    socket.paused = socket.blocked = True
    await hub.append("s", Event.delta("b"))
    await asyncio.wait_for(socket.held.wait(), 5)  # b's send waits
    await hub.append_many("s", [Event.delta("c", channel=Channel.REASONING), Event.done()])
    await settle()
    assert not running.done()
    assert socket.messages() == [b"a"]
    socket.paused = False
    socket.release.set()
    await asyncio.wait_for(running, 5)
    assert socket.messages() == [b"a", b"b", b"c"]
    if mode == "direct":
        # b waited in send; c went on directly once b was written.
        assert [how for how, _ in socket.writes] == ["direct", "asgi", "direct"]
    await sub.aclose()
    await hub.aclose()


async def test_a_held_lock_keeps_another_writers_message_first(mode: str) -> None:
    """A session's reply holds the socket's lock while its send waits: the stream's events
    go after it, never around it."""
    hub, sub = await started(mode)
    socket = Socket()
    lock = asyncio.Lock()
    running = asyncio.create_task(make_pump(sub, hub, socket, mode, lock).run())
    await asyncio.sleep(0)
    socket.blocked = True

    async def reply() -> None:
        async with lock:
            await socket.send({"type": "websocket.send", "text": "subscribed"})

    replying = asyncio.create_task(reply())
    await asyncio.wait_for(socket.held.wait(), 5)  # the reply's send waits, holding the lock
    socket.blocked = False  # later sends do not wait; the reply's already does
    await hub.append_many("s", [Event.delta("x"), Event.done()])
    await settle()
    assert socket.messages() == []
    socket.release.set()
    await asyncio.wait_for(asyncio.gather(replying, running), 5)
    assert socket.messages() == [b"subscribed", b"x"]
    await sub.aclose()
    await hub.aclose()


async def test_cancelling_mid_write_stops_the_write_too(mode: str) -> None:
    hub, sub = await started(mode)
    socket = Socket()
    running = asyncio.create_task(make_pump(sub, hub, socket, mode).run())
    await asyncio.sleep(0)
    socket.paused = socket.blocked = True
    await hub.append("s", Event.delta("a"))
    await asyncio.wait_for(socket.held.wait(), 5)  # a's send waits
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    socket.release.set()
    await settle()  # a send left waiting would now write
    assert socket.writes == []  # the waiting send was cancelled, not left to write later
    assert not [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    await sub.aclose()
    await hub.aclose()


async def test_a_failing_send_ends_the_run_with_its_error(mode: str) -> None:
    hub, sub = await started(mode)
    socket = Socket()
    socket.paused = True
    socket.fail = ConnectionResetError("gone")
    running = asyncio.create_task(make_pump(sub, hub, socket, mode).run())
    await hub.append("s", Event.delta("a"))
    with pytest.raises(ConnectionResetError):
        await asyncio.wait_for(running, 5)
    await sub.aclose()
    await hub.aclose()


async def test_a_deleted_stream_ends_the_run(mode: str) -> None:
    hub, sub = await started(mode)
    socket = Socket()
    running = asyncio.create_task(make_pump(sub, hub, socket, mode).run())
    await hub.append("s", Event.delta("a"))
    await eventually(lambda: socket.messages() == [b"a"], what="a written")
    await hub.delete("s")
    await asyncio.wait_for(running, 5)
    assert socket.messages()[0] == b"a"
    await sub.aclose()
    await hub.aclose()
