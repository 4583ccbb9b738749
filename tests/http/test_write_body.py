"""The ``airlane.http.write_body`` extension (`BodyWriter`): body parts written in place while
the response is in a state to take them, nothing written (and False) in every other state, so
that the caller's ASGI ``send`` handles those as it always did."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from airlane.transports.http.http_protocol import WRITE_BODY, BodyWriter
from airlane.transports.http.server.cycle import RequestCycle
from airlane.transports.http.server.flow import WriteFlow
from tests.asgi_server import serving


class _Transport:
    def __init__(self) -> None:
        self.written: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.written.append(data)

    def close(self) -> None:
        pass


class _Connection:
    """What a `RequestCycle` asks of its `HttpProtocol`."""

    def __init__(self) -> None:
        self.transport = _Transport()
        self.flow = WriteFlow()
        self.stopping = False
        self.loop = None  # receive() is not used here
        self.completed: list[RequestCycle] = []

    def date(self) -> bytes:
        return b"date: x\r\n"

    def alt_svc(self) -> bytes:
        return b""

    def body_wanted(self) -> None:
        pass

    def body_taken(self) -> None:
        pass

    def streaming(self) -> None:
        pass

    def response_complete(self, cycle: RequestCycle) -> None:
        self.completed.append(cycle)


def _cycle(method: str = "GET", version: str = "1.1") -> tuple[RequestCycle, _Connection]:
    connection = _Connection()
    scope = {"type": "http", "method": method, "http_version": version, "path": "/"}
    cycle = RequestCycle(connection, scope, keep_alive=True, wants_continue=False)  # type: ignore[arg-type]
    cycle.end_of_request()
    return cycle, connection


def _run(coro: Any) -> None:
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(coro)
    finally:
        loop.close()


def _started(headers: list[tuple[bytes, bytes]] | None = None, **kwargs: Any) -> RequestCycle:
    cycle, connection = _cycle(**kwargs)
    _run(cycle.send({"type": "http.response.start", "status": 200, "headers": headers or []}))
    connection.transport.written.clear()
    return cycle


def test_a_part_goes_out_as_one_chunk() -> None:
    cycle = _started()
    writer = BodyWriter(cycle)
    assert writer.write(b"data: 1\n\n")
    assert writer.write(b"x" * 300)
    assert cycle.transport.written == [b"9\r\ndata: 1\n\n\r\n", b"12c\r\n" + b"x" * 300 + b"\r\n"]


def _not_started() -> RequestCycle:
    return _cycle()[0]


def _sized() -> RequestCycle:
    return _started([(b"content-length", b"6")])


def _head() -> RequestCycle:
    return _started(method="HEAD")


def _http_10() -> RequestCycle:
    return _started(version="1.0")  # no chunks for an HTTP/1.0 client: written until close


def _complete() -> RequestCycle:
    cycle = _started()
    _run(cycle.send({"type": "http.response.body", "body": b"", "more_body": False}))
    return cycle


def _disconnected() -> RequestCycle:
    cycle = _started()
    cycle.lost()
    return cycle


def _paused() -> RequestCycle:
    cycle = _started()
    cycle.connection.flow.pause()
    cycle.writes_paused(True)  # flow control: ASGI send waits
    return cycle


@pytest.mark.parametrize(
    "make",
    [_not_started, _sized, _head, _http_10, _complete, _disconnected, _paused],
    ids=["not-started", "content-length", "head", "http-1.0", "complete", "disconnected", "paused"],
)
def test_every_other_state_writes_nothing(make: Callable[[], RequestCycle]) -> None:
    cycle = make()
    written = list(cycle.transport.written)
    assert not BodyWriter(cycle).write(b"data: 1\n\n")
    assert cycle.transport.written == written


def test_writes_go_through_again_once_resumed() -> None:
    cycle = _paused()
    cycle.connection.flow.resume()
    cycle.writes_paused(False)
    assert BodyWriter(cycle).write(b"x")


def test_an_empty_part_is_not_written_as_the_last_chunk() -> None:
    cycle = _started()
    assert not BodyWriter(cycle).write(b"")  # b"0\r\n\r\n" would end the body
    assert cycle.transport.written == []


def test_the_writer_does_not_keep_the_response_alive() -> None:
    cycle = _started()
    writer = BodyWriter(cycle)
    del cycle
    gc.collect()
    assert not writer.write(b"data: 1\n\n")


async def test_responses_through_the_extension() -> None:
    """A real server: the extension is in every request's scope, writes the parts of a
    streamed response, and declines a HEAD and a sized response."""
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

    async with serving(app) as served, httpx.AsyncClient(base_url=served.url) as client:
        streamed = await client.get("/streamed")
        sized = await client.get("/sized")
        head = await client.head("/streamed")
    assert streamed.content == b"abcdef!"
    assert seen["GET /streamed"] == [True, True]
    assert sized.content == b"abcdef" and seen["GET /sized"] == [False, False]
    assert head.status_code == 200 and seen["HEAD /streamed"] == [False, False]
