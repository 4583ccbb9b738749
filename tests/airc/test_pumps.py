"""The two AIRC pumps, in process and with a small send window: direct (the hub calls back as
events are appended) and tasked (for a hub whose `Subscription.listen` returns False, a task
waits for each batch). Both deliver whole streams and release them once acknowledged."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator

import pytest

from airlane.backends.synthetic import SyntheticBackend, SyntheticConfig
from airlane.client import AircClient
from airlane.gateway import Gateway
from airlane.hub import MemoryHub
from airlane.hub.memory import _MemorySubscription
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
