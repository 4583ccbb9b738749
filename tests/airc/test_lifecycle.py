"""AIRC and the security gate, and AIRC sessions when the gateway shuts down."""

from __future__ import annotations

import asyncio
import signal

import httpx
import pytest
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed as WsConnectionClosed
from websockets.exceptions import InvalidStatus

from airlane.client import ConnectFailed, ConnectionLost, RequestRejected
from tests.client.conftest import PACED_SYNTHETIC
from tests.servers import run_server

from .conftest import connector

REQUEST = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


async def test_api_keys_over_tcp_and_websocket() -> None:
    with run_server("--api-key", "alice=secret-key", config=PACED_SYNTHETIC) as gateway:
        tcp, ws = connector(gateway, "tcp"), connector(gateway, "ws")
        # Plain TCP carries no credentials: requests are refused until AUTH.
        async with await tcp() as anonymous:
            with pytest.raises(RequestRejected) as refused:
                await anonymous.generate(REQUEST)
            assert refused.value.code == "unauthenticated"
            assert await anonymous.authenticate("secret-key") == "alice"
            assert [e async for e in await anonymous.generate(REQUEST)][-1].kind == "done"
        with pytest.raises(ConnectFailed):
            await tcp("wrong-key")
        async with await tcp("secret-key") as keyed:
            assert [e async for e in await keyed.generate(REQUEST)][-1].kind == "done"
        # WebSocket: the key travels in the handshake, as for every /v1/ws subprotocol.
        async with await ws("secret-key") as keyed_ws:
            assert [e async for e in await keyed_ws.generate(REQUEST)][-1].kind == "done"
        url = gateway.url.replace("http://", "ws://") + "/v1/ws"
        with pytest.raises((WsConnectionClosed, InvalidStatus)) as closed:
            async with ws_connect(url, subprotocols=["airc.v1.2"], proxy=None) as bare:  # type: ignore[list-item]
                await asyncio.wait_for(bare.recv(), 10)
        if isinstance(closed.value, WsConnectionClosed):
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 4401


async def test_shutdown_says_goaway_to_every_session() -> None:
    with run_server(config=PACED_SYNTHETIC) as gateway:
        # A named stream with no producer never ends on its own.
        published = httpx.post(
            f"{gateway.url}/v1/streams/agents/7/events",
            json={"kind": "message", "payload": {"step": 1}},
            timeout=10,
        )
        assert published.status_code == 200, published.text
        client = await connector(gateway, "tcp")()
        stream = await client.subscribe("agents/7")
        assert (await anext(stream)).data["payload"] == {"step": 1}
        gateway.process.send_signal(signal.SIGINT)
        with pytest.raises(ConnectionLost, match="server shutting down"):
            async with asyncio.timeout(15):
                async for _ in stream:
                    pass
        await client.aclose()
        gateway.process.wait(15)  # exits (130, as after Ctrl-C) once every session is closed


async def test_airc_listener_can_be_turned_off() -> None:
    with run_server("--airc-port", "-1", config=PACED_SYNTHETIC) as gateway:
        assert gateway.airc is None
