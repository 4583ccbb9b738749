"""Airlane's WebSocket server (`airlane.transports.http.ws_protocol.WebSocketProtocol`) with
real sockets on 127.0.0.1 and the ``websockets`` client: the handshake (subprotocols, HTTP
refusals, 403), close codes both ways, pings and their timeout, the size limit (1009),
permessage-deflate, flow control, sending on a closing socket, and the shutdown's 1012."""

from __future__ import annotations

import asyncio
import base64
import logging
import os
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from airlane.transports.http.server import ClientDisconnected
from airlane.transports.http.ws_protocol import SEND_MANY, SEND_MANY_TYPE, WRITE_NOW
from tests.asgi_server import Served, serving

WAIT_S = 10.0
"""Bound of every wait in these tests."""


async def until(condition: Any) -> None:
    """Wait until ``condition()`` holds (server state with no event to wait on), at most
    `WAIT_S`."""
    async with asyncio.timeout(WAIT_S):
        while not condition():
            await asyncio.sleep(0.005)


class Echo:
    """Accepts (with the first subprotocol offered), echoes each message, and records what it
    received, ending with the ``websocket.disconnect``."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        self.scopes: list[dict[str, Any]] = []
        self.done = asyncio.Event()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            return
        self.scopes.append(scope)
        try:
            assert (await receive())["type"] == "websocket.connect"
            offered = scope["subprotocols"]
            await send({"type": "websocket.accept", "subprotocol": offered[0] if offered else None})
            while True:
                message = await receive()
                self.received.append(message)
                if message["type"] == "websocket.disconnect":
                    return
                if message.get("text") == "close please":
                    await send({"type": "websocket.close", "code": 4001, "reason": "as asked"})
                    continue
                await send({**message, "type": "websocket.send"})
        finally:
            self.done.set()


def ws_url(served: Served, path: str = "/ws") -> str:
    return served.ws_url + path


async def test_messages_both_ways_and_the_scope() -> None:
    app = Echo()
    async with (
        serving(app) as served,
        connect(ws_url(served, "/ws%21?x=1"), compression=None) as ws,
    ):
        await ws.send("text")
        assert await ws.recv() == "text"
        await ws.send(b"\x00bytes")
        assert await ws.recv() == b"\x00bytes"
    (scope,) = app.scopes
    assert (scope["type"], scope["scheme"], scope["http_version"]) == ("websocket", "ws", "1.1")
    assert (scope["path"], scope["raw_path"], scope["query_string"]) == ("/ws!", b"/ws%21", b"x=1")
    assert "method" not in scope
    assert {SEND_MANY, WRITE_NOW, "websocket.http.response"} <= set(scope["extensions"])


async def test_the_subprotocol_the_application_chooses() -> None:
    offered: Any = ["b.v1", "a.v1"]
    async with serving(Echo()) as served, connect(ws_url(served), subprotocols=offered) as ws:
        assert ws.subprotocol == "b.v1"


async def test_a_close_from_the_application_carries_its_code_and_reason() -> None:
    app = Echo()
    async with serving(app) as served:
        async with connect(ws_url(served)) as ws:
            await ws.send("close please")
            with pytest.raises(ConnectionClosed):
                await asyncio.wait_for(ws.recv(), WAIT_S)
            assert (ws.close_code, ws.close_reason) == (4001, "as asked")
        await asyncio.wait_for(app.done.wait(), WAIT_S)
    assert app.received[-1] == {"type": "websocket.disconnect", "code": 4001, "reason": "as asked"}


async def test_a_close_from_the_client_reaches_the_application_with_its_code() -> None:
    app = Echo()
    async with serving(app) as served:
        async with connect(ws_url(served)) as ws:
            await ws.close(4002, "bye")
        await asyncio.wait_for(app.done.wait(), WAIT_S)
    assert app.received[-1] == {"type": "websocket.disconnect", "code": 4002, "reason": "bye"}


async def test_a_client_that_vanishes_is_a_1006() -> None:
    app = Echo()
    async with serving(app) as served:
        ws = await connect(ws_url(served))
        ws.transport.abort()
        await asyncio.wait_for(app.done.wait(), WAIT_S)
    assert app.received[-1]["code"] == 1006


async def test_a_handshake_refused_with_an_http_response() -> None:
    """The ASGI denial response: its status, headers and body reach the client."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            return
        await receive()
        body = b'{"error": "no"}'
        await send(
            {
                "type": "websocket.http.response.start",
                "status": 404,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "websocket.http.response.body", "body": body[:5], "more_body": True})
        await send({"type": "websocket.http.response.body", "body": body[5:]})

    async with serving(app) as served:
        with pytest.raises(InvalidStatus) as refused:
            async with connect(ws_url(served)):
                pass
    response = refused.value.response
    assert response.status_code == 404 and response.body == b'{"error": "no"}'
    assert response.headers["content-type"] == "application/json"


@pytest.mark.parametrize("how", ["close", "return"])
async def test_a_handshake_closed_or_left_before_accept_is_a_403(how: str) -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            return
        await receive()
        if how == "close":
            await send({"type": "websocket.close"})

    async with serving(app) as served:
        with pytest.raises(InvalidStatus) as refused:
            async with connect(ws_url(served)):
                pass
    assert refused.value.response.status_code == 403


async def test_an_application_failing_after_accept_closes_with_1011(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            return
        await receive()
        await send({"type": "websocket.accept"})
        raise ValueError("a bug")

    async with serving(app) as served, connect(ws_url(served)) as ws:
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(ws.recv(), WAIT_S)
        assert ws.close_code == 1011 and "a bug" not in (ws.close_reason or "")
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "/ws" in errors[0].getMessage()


async def test_a_message_over_the_limit_is_closed_with_1009() -> None:
    app = Echo()
    async with serving(app, ws_max_message_bytes=1000) as served:
        async with connect(ws_url(served), compression=None) as ws:
            await ws.send("x" * 1000)
            assert await ws.recv() == "x" * 1000
            await ws.send("x" * 1001)
            with pytest.raises(ConnectionClosed):
                await asyncio.wait_for(ws.recv(), WAIT_S)
            assert ws.close_code == 1009
        await asyncio.wait_for(app.done.wait(), WAIT_S)
    assert app.received[-1]["code"] == 1009


async def test_invalid_utf8_in_a_text_message_is_closed_with_1007() -> None:
    app = Echo()
    async with serving(app) as served:
        reader, writer = await _raw_handshake(served)
        writer.write(bytes((0x81, 0x82)) + b"\0\0\0\0" + b"\xff\xfe")  # text, masked, invalid
        await asyncio.wait_for(app.done.wait(), WAIT_S)
        frame = await asyncio.wait_for(reader.read(4), WAIT_S)
        writer.close()
    assert frame[0] == 0x88 and int.from_bytes(frame[2:4], "big") == 1007  # Close, 1007
    assert app.received[-1]["code"] == 1007


@pytest.mark.parametrize("enabled", [True, False])
async def test_permessage_deflate_is_negotiated_when_enabled(enabled: bool) -> None:
    async with (
        serving(Echo(), ws_compression=enabled) as served,
        connect(ws_url(served), compression="deflate") as ws,
    ):
        assert bool(ws.protocol.extensions) is enabled
        await ws.send("a" * 5000)
        assert await ws.recv() == "a" * 5000


async def test_the_server_pings_and_a_client_that_answers_stays() -> None:
    async with (
        serving(Echo(), ws_ping_s=0.05) as served,
        connect(ws_url(served), ping_interval=None) as ws,
    ):
        pings = 0
        original = ws.protocol.receive_data

        def counting(data: bytes) -> None:
            nonlocal pings
            pings += data.count(b"\x89\x04")  # a ping frame with its 4-byte payload
            original(data)

        ws.protocol.receive_data = counting  # type: ignore[method-assign]
        await until(lambda: pings >= 3)
        await ws.send("still here")
        assert await ws.recv() == "still here"


async def test_a_client_that_does_not_answer_pings_is_closed_with_1011() -> None:
    app = Echo()
    async with serving(app, ws_ping_s=0.1) as served:
        _, writer = await _raw_handshake(served)  # reads nothing, answers nothing
        await asyncio.wait_for(app.done.wait(), WAIT_S)
        writer.close()
    assert app.received[-1] == {
        "type": "websocket.disconnect",
        "code": 1011,
        "reason": "keepalive ping timeout",
    }


async def test_reading_stops_while_the_application_does_not_receive() -> None:
    """Messages the application has not read are bounded: past `ws_max_queued` the
    connection stops reading; once read, every message arrives, in order."""
    go = asyncio.Event()
    got: list[str] = []
    protocols: list[Any] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            return
        protocols.append(receive.__self__)
        await receive()
        await send({"type": "websocket.accept"})
        await asyncio.wait_for(go.wait(), WAIT_S)
        while (message := await receive())["type"] == "websocket.receive":
            got.append(message["text"])
            if len(got) == 200:
                await send({"type": "websocket.send", "text": "all"})

    async with (
        serving(app, ws_max_queued=4) as served,
        connect(ws_url(served), compression=None) as ws,
    ):
        for n in range(200):
            await ws.send(f"m{n}")
        await until(lambda: bool(protocols) and protocols[0].queued >= 4)
        assert not protocols[0].reading
        go.set()
        assert await asyncio.wait_for(ws.recv(), WAIT_S) == "all"
    assert got == [f"m{n}" for n in range(200)]


async def test_sending_on_a_closing_socket_raises_client_disconnected() -> None:
    """The peer's Close: a data message sent after it raises `ClientDisconnected` (an
    OSError), ``send_many`` too, and ``websocket.close`` does nothing."""
    outcome: list[str] = []
    done = asyncio.Event()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "websocket":
            return
        try:
            await receive()
            await send({"type": "websocket.accept"})
            assert (await receive())["type"] == "websocket.disconnect"
            for message in (
                {"type": "websocket.send", "text": "late"},
                {"type": SEND_MANY_TYPE, "bytes": [b"late"]},
            ):
                try:
                    await send(message)
                except ClientDisconnected as exc:
                    assert isinstance(exc, OSError)
                    outcome.append("raised")
            await send({"type": "websocket.close", "code": 1000})
            outcome.append("closed quietly")
        finally:
            done.set()

    async with serving(app) as served:
        async with connect(ws_url(served)) as ws:
            await ws.close()
        await asyncio.wait_for(done.wait(), WAIT_S)
    assert outcome == ["raised", "raised", "closed quietly"]


async def test_shutdown_closes_open_websockets_with_1012(caplog: pytest.LogCaptureFixture) -> None:
    app = Echo()
    async with serving(app) as served:
        ws = await connect(ws_url(served))
        await ws.send("hi")
        assert await ws.recv() == "hi"
        await asyncio.wait_for(served.server.shutdown(), WAIT_S)
        with pytest.raises(ConnectionClosed):
            await asyncio.wait_for(ws.recv(), WAIT_S)
        assert ws.close_code == 1012
    assert app.received[-1]["code"] == 1012
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]


async def _raw_handshake(served: Served) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection(served.host, served.port)
    key = base64.b64encode(os.urandom(16))
    writer.write(
        b"GET /ws HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: " + key + b"\r\n\r\n"
    )
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WAIT_S)
    assert head.startswith(b"HTTP/1.1 101 ")
    return reader, writer
