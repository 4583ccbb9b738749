"""A `/v1/ws` session that ends releases every cursor it holds, even when pumps ended by raising
(a client gone mid-write): one pump's failure must not leave the others' subscriptions open."""

from __future__ import annotations

import asyncio

from airlane.backends.synthetic import SyntheticBackend
from airlane.gateway import Gateway
from airlane.hub import MemoryHub
from airlane.security import ANONYMOUS
from airlane.transports.http.config import HttpConfig
from airlane.transports.http.context import AppContext
from airlane.transports.http.metrics import HttpMetrics
from airlane.transports.http.websocket import JSON_PROTOCOL, WebSocketSession


async def test_closing_a_session_releases_every_cursor_whatever_its_pumps_raised() -> None:
    hub = MemoryHub()
    gateway = Gateway(hub, SyntheticBackend())
    await gateway.start()
    try:
        context = AppContext(gateway, HttpConfig(), HttpMetrics(gateway.stats, lambda: 0))

        async def send(message: object) -> None:
            raise ConnectionResetError("the client is gone")

        session = WebSocketSession(context, ANONYMOUS, send, JSON_PROTOCOL)

        async def gone() -> None:
            raise ConnectionResetError("the client is gone")

        for name in ("a", "b", "c"):
            await gateway.create_named(ANONYMOUS, name)
            subscription = await gateway.subscribe(ANONYMOUS, name)
            task = asyncio.create_task(gone() if name != "b" else asyncio.Event().wait())
            session._pumps[name] = (subscription, task)
        await asyncio.sleep(0)  # the failing pumps have raised before the session closes
        assert hub.stats().subscribers == 3
        await session.aclose()
        assert hub.stats().subscribers == 0
    finally:
        await gateway.aclose()
