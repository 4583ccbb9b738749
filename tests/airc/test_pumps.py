"""The two AIRC pumps, in process and with a small send window: direct (the hub calls back as
events are appended) and tasked (for a hub whose `Subscription.listen` returns False, a task
waits for each batch). Both deliver whole streams and release them once acknowledged."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator

import pytest

from airlane.backends.synthetic import SyntheticBackend, SyntheticConfig
from airlane.client import AircClient, RequestRejected
from airlane.core.events import Event
from airlane.gateway import Gateway
from airlane.hub import MemoryHub
from airlane.hub.memory import _MemorySubscription
from airlane.security import ANONYMOUS
from airlane.transports.airc import AircServerConfig, AircTcpServer
from airlane.wire.airc import AircConfig
from tests.waiting import eventually

REQUEST = {"model": "m", "messages": [{"role": "user", "content": "tasked"}], "max_tokens": 200}


@pytest.fixture(params=["direct", "tasked"])
async def server(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[AircTcpServer]:
    if request.param == "tasked":
        monkeypatch.setattr(_MemorySubscription, "listen", lambda self, callback: False)
    gateway = Gateway(MemoryHub(), SyntheticBackend(SyntheticConfig(speed=0)))
    await gateway.start()
    # A small window, so that the pump waits for ACKs many times per stream.
    config = AircServerConfig(connection=AircConfig(send_window=4))
    airc = AircTcpServer(gateway, config)
    sock = socket.create_server(("127.0.0.1", 0))
    sock.setblocking(False)
    await airc.start(sock)
    try:
        yield airc
    finally:
        await airc.aclose()
        await gateway.aclose()


async def test_pump_delivers_whole_streams(server: AircTcpServer) -> None:
    async with await AircClient.tcp(*server.address) as client:
        reference = None
        for _ in range(3):
            events = [event async for event in await client.generate(REQUEST)]
            assert events[-1].kind == "done"
            text = "".join(event.text for event in events)
            assert reference in (None, text)
            reference = text
        # Each binding is released once the client has acknowledged its last frame.
        await eventually(
            lambda: not any(session.streams for session in server.sessions),
            what="every stream binding released",
        )


async def test_events_larger_than_the_connection_queue_wait_for_room_and_none_is_lost(
    server: AircTcpServer,
) -> None:
    # A batch is taken from the cursor by frames of window (4 here), but each of these
    # events is some sixty frames: two streams' batches are more than the connection's 4 MiB
    # send queue. What does not fit must wait for room (it was taken from the cursor and then
    # refused: lost, or the connection ended). Three per stream: the stream keeps 4 MiB.
    blob = "x" * 1_000_000
    names = ("big/a", "big/b")
    for name in names:
        for n in range(3):
            await server.gateway.publish(ANONYMOUS, name, Event.message({"n": n, "blob": blob}))
        await server.gateway.publish(ANONYMOUS, name, Event.done())
    async with await AircClient.tcp(*server.address) as client:

        async def read(name: str) -> list[int]:
            subscription = await client.subscribe(name)
            return [
                event.data["payload"]["n"]
                async for event in subscription
                if event.kind == "message"
            ]

        got = await asyncio.wait_for(asyncio.gather(*(read(name) for name in names)), 60)
    assert got == [[0, 1, 2], [0, 1, 2]]


async def test_past_max_subscriptions_a_request_is_refused_and_the_connection_serves_on() -> None:
    gateway = Gateway(MemoryHub(), SyntheticBackend(SyntheticConfig(speed=0)))
    await gateway.start()
    airc = AircTcpServer(gateway, AircServerConfig(max_subscriptions=2))
    sock = socket.create_server(("127.0.0.1", 0))
    sock.setblocking(False)
    await airc.start(sock)
    try:
        for name in ("cap/a", "cap/b", "cap/c"):
            await gateway.publish(ANONYMOUS, name, Event.message({"n": name}))
        async with await AircClient.tcp(*airc.address) as client:
            await client.subscribe("cap/a")
            await client.subscribe("cap/b")
            with pytest.raises(RequestRejected) as refused:
                await client.subscribe("cap/c")
            assert refused.value.code == "too_many_subscriptions"
            assert "at most 2" in refused.value.message
            with pytest.raises(RequestRejected) as generation:  # refused before it starts
                await client.generate(REQUEST)
            assert generation.value.code == "too_many_subscriptions"
            assert gateway.hub.stats().streams == 3
            await client.unsubscribe("cap/a")  # room again, on the same connection
            third = await client.subscribe("cap/c")
            first = await asyncio.wait_for(anext(aiter(third)), 5)
            assert first.data["payload"] == {"n": "cap/c"}
    finally:
        await airc.aclose()
        await gateway.aclose()
