"""The ``airlane.http.write_body`` extension (`BodyWriter`): body parts written in place while
uvicorn's response is in a state to take them, nothing written (and False) in every other
state, so that the caller's ASGI ``send`` handles those as it always did."""

from __future__ import annotations

import asyncio
import gc
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
import uvicorn

from airlane.server import DEFAULT_TCP_KEEPALIVE_S, bind_socket
from airlane.transports.http.http_protocol import WRITE_BODY, BodyWriter, UpgradingHttpProtocol


class _Transport:
    def __init__(self) -> None:
        self.written: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.written.append(data)


class _Cycle(SimpleNamespace):
    """A stand-in that can be weakly referenced, as uvicorn's cycle can."""


def _cycle(**state: Any) -> _Cycle:
    """What `BodyWriter` reads of uvicorn's `RequestResponseCycle`, in the writable state."""
    values: dict[str, Any] = {
        "chunked_encoding": True,
        "response_started": True,
        "response_complete": False,
        "disconnected": False,
        "flow": SimpleNamespace(write_paused=False),
        "transport": _Transport(),
    }
    values.update(state)
    return _Cycle(**values)


def test_a_part_goes_out_as_one_chunk() -> None:
    cycle = _cycle()
    writer = BodyWriter(cycle)
    assert writer.write(b"data: 1\n\n")
    assert writer.write(b"x" * 300)
    assert cycle.transport.written == [b"9\r\ndata: 1\n\n\r\n", b"12c\r\n" + b"x" * 300 + b"\r\n"]


@pytest.mark.parametrize(
    "state",
    [
        {"chunked_encoding": None},  # a HEAD response, or not decided yet
        {"chunked_encoding": False},  # a Content-Length response
        {"response_started": False},
        {"response_complete": True},
        {"disconnected": True},
        {"flow": SimpleNamespace(write_paused=True)},  # flow control: ASGI send waits
    ],
)
def test_every_other_state_writes_nothing(state: dict[str, Any]) -> None:
    cycle = _cycle(**state)
    assert not BodyWriter(cycle).write(b"data: 1\n\n")
    assert cycle.transport.written == []


def test_an_empty_part_is_not_written_as_the_last_chunk() -> None:
    cycle = _cycle()
    assert not BodyWriter(cycle).write(b"")  # b"0\r\n\r\n" would end the body
    assert cycle.transport.written == []


def test_the_writer_does_not_keep_the_response_alive() -> None:
    cycle = _cycle()
    writer = BodyWriter(cycle)
    del cycle
    gc.collect()
    assert not writer.write(b"data: 1\n\n")


async def test_uvicorn_responses_through_the_extension() -> None:
    """A real uvicorn with `UpgradingHttpProtocol`: the extension is in every request's scope,
    writes the parts of a streamed response, and declines a HEAD and a sized response."""
    seen: dict[str, list[bool]] = {}

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        write = scope.get("extensions", {}).get(WRITE_BODY)
        assert write is not None
        sized = scope["path"] == "/sized"
        headers = [(b"content-length", b"6")] if sized else []
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        results = [write(b"abc"), write(b"def")]
        seen[f"{scope['method']} {scope['path']}"] = results
        if sized or scope["method"] == "HEAD":
            body = b"" if scope["method"] == "HEAD" else b"abcdef"
            await send({"type": "http.response.body", "body": body})
        else:
            await send({"type": "http.response.body", "body": b"!", "more_body": False})

    sock = bind_socket("127.0.0.1", 0, DEFAULT_TCP_KEEPALIVE_S)
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, http=UpgradingHttpProtocol, lifespan="off", log_level="warning")
    server = uvicorn.Server(config)
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        async with asyncio.timeout(10):
            while not server.started:
                await asyncio.sleep(0.01)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as client:
            streamed = await client.get("/streamed")
            sized = await client.get("/sized")
            head = await client.head("/streamed")
    finally:
        server.should_exit = True
        await serving
        sock.close()
    assert streamed.content == b"abcdef!"
    assert seen["GET /streamed"] == [True, True]
    assert sized.content == b"abcdef" and seen["GET /sized"] == [False, False]
    assert head.status_code == 200 and seen["HEAD /streamed"] == [False, False]
