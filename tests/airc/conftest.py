"""Fixtures for AIRC over real sockets: a gateway process, and clients over TCP and WebSocket."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import pytest

from airlane.client.airc import AircClient
from tests.client.conftest import PACED_SYNTHETIC
from tests.servers import ServerProcess, run_server

Connect = Callable[..., Awaitable[AircClient]]


@pytest.fixture(scope="package")
def gateway() -> Iterator[ServerProcess]:
    """One gateway for the AIRC tests (about 2 ms per token)."""
    with run_server(config=PACED_SYNTHETIC) as running:
        assert running.airc is not None, "the gateway did not announce its AIRC listener"
        yield running


def connector(server: ServerProcess, transport: str) -> Connect:
    """A function that opens an `AircClient` to ``server`` over ``transport``."""

    async def connect(api_key: str | None = None, **options: object) -> AircClient:
        if transport == "tcp":
            assert server.airc is not None
            host, port = server.airc
            return await AircClient.tcp(host, port, api_key, **options)
        return await AircClient.websocket(server.url, api_key, **options)

    return connect


@pytest.fixture(params=["tcp", "ws"])
def connect(request: pytest.FixtureRequest, gateway: ServerProcess) -> Connect:
    """Opens clients over each transport in turn."""
    return connector(gateway, request.param)


@pytest.fixture
async def client(connect: Connect) -> AsyncIterator[AircClient]:
    """A connected client over each transport in turn."""
    async with await connect() as opened:
        yield opened
