"""Fixtures for RSocket over real sockets: a gateway process, and clients of the ``rsocket``
package (PyPI; nobody here wrote it) over TCP and WebSocket."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import orjson
import pytest
from rsocket.awaitable.awaitable_rsocket import AwaitableRSocket
from rsocket.exceptions import RSocketProtocolError
from rsocket.extensions.helpers import authenticate_bearer, composite, route
from rsocket.extensions.mimetypes import WellKnownMimeTypes
from rsocket.helpers import single_transport_provider
from rsocket.payload import Payload
from rsocket.rsocket_client import RSocketClient
from rsocket.transports.tcp import TransportTCP

from tests.client.conftest import PACED_SYNTHETIC
from tests.servers import ServerProcess, run_server

__all__ = ["API_KEY", "Open", "call", "chat", "open_client", "payload"]

API_KEY = "rsocket-test-key"

Open = Callable[..., contextlib.AbstractAsyncContextManager[AwaitableRSocket]]


@pytest.fixture(scope="package")
def gateway() -> Iterator[ServerProcess]:
    """One gateway for the RSocket tests (about 2 ms per token)."""
    with run_server(config=PACED_SYNTHETIC) as running:
        assert running.rsocket is not None, "the gateway did not announce its RSocket listener"
        yield running


def payload(route_name: str, body: Any = None, *, token: str | None = None) -> Payload:
    """A request: JSON data, composite metadata naming the route (and a bearer token)."""
    items = [route(route_name)]
    if token is not None:
        items.append(authenticate_bearer(token))
    data = b"" if body is None else orjson.dumps(body)
    return Payload(data, composite(*items))


def chat(text: str = "hello", max_tokens: int = 20) -> dict[str, Any]:
    """A chat request for the synthetic backend."""
    return {
        "model": "airlane-synthetic",
        "messages": [{"role": "user", "content": text}],
        "max_tokens": max_tokens,
    }


@contextlib.asynccontextmanager
async def open_client(
    server: ServerProcess, transport: str = "tcp", **options: Any
) -> AsyncIterator[AwaitableRSocket]:
    """An ``rsocket`` client connected to ``server`` (composite metadata, JSON data)."""
    options.setdefault("metadata_encoding", WellKnownMimeTypes.MESSAGE_RSOCKET_COMPOSITE_METADATA)
    options.setdefault("data_encoding", WellKnownMimeTypes.APPLICATION_JSON)
    if transport == "tcp":
        assert server.rsocket is not None
        host, port = server.rsocket
        reader, writer = await asyncio.open_connection(host, port)
        transport_ = TransportTCP(reader, writer)
        async with RSocketClient(single_transport_provider(transport_), **options) as client:
            yield AwaitableRSocket(client)
        return
    from rsocket.transports.websockets_transport import WebsocketsTransport
    from websockets.asyncio.client import connect

    url = server.url.replace("http://", "ws://") + "/v1/rsocket"
    async with connect(url) as websocket:
        transport_ = WebsocketsTransport()
        handler = asyncio.create_task(transport_.handler(websocket))
        try:
            async with RSocketClient(single_transport_provider(transport_), **options) as client:
                yield AwaitableRSocket(client)
        finally:
            handler.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await handler


async def call(
    client: AwaitableRSocket, route_name: str, body: Any = None, *, expect_error: bool = False
) -> Any:
    """A request-response, its answer decoded; with ``expect_error``, the ERROR's message."""
    if not expect_error:
        answer = await client.request_response(payload(route_name, body))
        return orjson.loads(answer.data)
    # The package raises RuntimeError for APPLICATION_ERROR, its own error for the rest.
    with pytest.raises((RSocketProtocolError, RuntimeError)) as refused:
        await client.request_response(payload(route_name, body))
    error = refused.value
    return error.data if isinstance(error, RSocketProtocolError) else str(error)


@pytest.fixture(params=["tcp", "ws"])
def transport(request: pytest.FixtureRequest) -> str:
    """Each transport in turn."""
    return str(request.param)
