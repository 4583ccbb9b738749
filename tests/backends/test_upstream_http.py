"""The upstream HTTP/1.1 client: its sans-I/O parser, then the pool against real servers.

The parser is fed each fixture whole, one byte at a time, and split at every boundary
(STYLE.md section 7). The client is tested against small scripted servers on 127.0.0.1
(`asyncio.start_server`), which write exactly the bytes a test wants, when it wants.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import shutil
import ssl
import subprocess
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import pytest

from airlane.backends import (
    http11,
    openai_chunks,
    upstream_config,
    upstream_connection,
    upstream_errors,
    upstream_http,
)
from airlane.backends.http11 import (
    ResponseEnd,
    ResponseEvent,
    ResponseHead,
    ResponseParser,
    encode_request,
)
from airlane.backends.upstream_config import (
    Origin,
    UpstreamLimits,
    UpstreamTimeouts,
    split_url,
)
from airlane.backends.upstream_errors import (
    TimeoutPhase,
    UpstreamConnectError,
    UpstreamDisconnected,
    UpstreamProtocolError,
    UpstreamTimeout,
)
from airlane.backends.upstream_http import ConnectionPool, UpstreamResponse

# -- the parser, sans I/O --------------------------------------------------------------------

SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
CHUNKED = (
    SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n"
    b"f\r\ndata: caf\xc3\xa9 1\n\n\r\n"
    b"09;ext=1\r\ndata: 2\n\n\r\n"
    b"0\r\nX-Trailer: t\r\n\r\n"
)
CONTENT_LENGTH = b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\nhello world"
INTERIM = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
NO_CONTENT = b"HTTP/1.1 204 No Content\r\nServer: x\r\n\r\n"
CLOSES = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok"

WHOLE = [
    (CHUNKED, b"data: caf\xc3\xa9 1\n\ndata: 2\n\n", True),
    (CONTENT_LENGTH, b"hello world", True),
    (INTERIM, b"ok", True),
    (NO_CONTENT, b"", True),
    (CLOSES, b"ok", False),
]


def parse(pieces: list[bytes], *, eof: bool = False) -> tuple[ResponseParser, list[ResponseEvent]]:
    parser = ResponseParser()
    events: list[ResponseEvent] = []
    for piece in pieces:
        events += parser.receive_data(piece)
    if eof:
        events += parser.receive_eof()
    return parser, events


def check(events: list[ResponseEvent], body: bytes, keep_alive: bool) -> ResponseHead:
    head = events[0]
    assert isinstance(head, ResponseHead)
    assert b"".join(e for e in events if isinstance(e, bytes)) == body
    assert events[-1] == ResponseEnd(keep_alive=keep_alive)
    assert sum(isinstance(e, ResponseHead) for e in events) == 1
    return head


@pytest.mark.parametrize(("raw", "body", "keep_alive"), WHOLE)
def test_parser_whole(raw: bytes, body: bytes, keep_alive: bool) -> None:
    parser, events = parse([raw])
    check(events, body, keep_alive)
    assert parser.complete and parser.reusable


@pytest.mark.parametrize(("raw", "body", "keep_alive"), WHOLE)
def test_parser_one_byte_at_a_time(raw: bytes, body: bytes, keep_alive: bool) -> None:
    _, events = parse([raw[i : i + 1] for i in range(len(raw))])
    check(events, body, keep_alive)


@pytest.mark.parametrize(("raw", "body", "keep_alive"), WHOLE)
def test_parser_split_at_every_boundary(raw: bytes, body: bytes, keep_alive: bool) -> None:
    for cut in range(len(raw) + 1):
        _, events = parse([raw[:cut], raw[cut:]])
        check(events, body, keep_alive)


def test_parser_reads_head_fields() -> None:
    _, events = parse([CHUNKED])
    head = check(events, b"data: caf\xc3\xa9 1\n\ndata: 2\n\n", True)
    assert (head.status, head.reason) == (200, "OK")
    assert head.header("content-type") == "text/event-stream"
    assert head.header("x-missing") is None


def test_parser_body_delimited_by_close() -> None:
    raw = b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: 1\n\n"
    for cut in range(len(raw) + 1):
        parser, events = parse([raw[:cut], raw[cut:]], eof=True)
        check(events, b"data: 1\n\n", False)
        assert parser.complete


def test_parser_marks_trailing_bytes() -> None:
    parser, events = parse([CONTENT_LENGTH + b"HTTP/1.1 200 OK\r\n"])
    check(events, b"hello world", True)
    assert not parser.reusable
    parser, _ = parse([CONTENT_LENGTH, b"garbage"])
    assert not parser.reusable


@pytest.mark.parametrize(
    ("pieces", "words"),
    [
        ([b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"], "chunk size"),
        ([b"SMTP ready\r\n\r\n"], "malformed"),
        ([b"HTTP/1.1 200 OK\r\nX: " + b"a" * 70_000], "limit of 65536"),
        (
            [b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\n"],
            "switched",
        ),
    ],
)
def test_parser_rejects_malformed_responses(pieces: list[bytes], words: str) -> None:
    parser = ResponseParser()
    with pytest.raises(UpstreamProtocolError, match=words):
        for piece in pieces:
            parser.receive_data(piece)
    with pytest.raises(UpstreamProtocolError):  # spent: the same error again
        parser.receive_data(b"more")


def test_a_closed_parser_holds_no_cycle_and_is_spent_mid_response() -> None:
    done, _ = parse([CHUNKED])
    assert done.complete
    done.close()  # after the response: nothing changes but the cycle with llhttp
    assert done.complete and done.receive_data(b"") == []
    cut = ResponseParser()
    cut.receive_data(CHUNKED[:-20])
    cut.close()
    with pytest.raises(UpstreamDisconnected, match="closed"):
        cut.receive_data(CHUNKED[-20:])
    gc.collect()
    gc.disable()
    try:
        parser = ResponseParser()
        parser.receive_data(CHUNKED)
        parser.close()
        del parser
        assert gc.collect() == 0  # llhttp's call-backs no longer hold the parser
    finally:
        gc.enable()


def test_parser_head_limit_counts_across_reads() -> None:
    parser = ResponseParser(max_head_bytes=100)
    parser.receive_data(b"HTTP/1.1 200 OK\r\n")
    with pytest.raises(UpstreamProtocolError, match="limit of 100"):
        for _ in range(20):
            parser.receive_data(b"X-Long: aaaaaaaaaa\r\n")


@pytest.mark.parametrize(
    ("raw", "where"),
    [(b"HTTP/1.1 200 OK\r\nContent-", "head"), (CHUNKED[:-20], "body"), (b"", "head")],
)
def test_parser_end_of_connection_mid_response(raw: bytes, where: str) -> None:
    parser = ResponseParser()
    parser.receive_data(raw)
    with pytest.raises(UpstreamDisconnected, match=f"middle of the {where}"):
        parser.receive_eof()


def test_encode_request() -> None:
    raw = encode_request("POST", "/v1/x?a=1", [("Host", "h:1"), ("X-Key", "v")], b"{}")
    assert raw == b"POST /v1/x?a=1 HTTP/1.1\r\nHost: h:1\r\nX-Key: v\r\nContent-Length: 2\r\n\r\n{}"


@pytest.mark.parametrize(
    ("method", "target", "header"),
    [
        ("PO ST", "/", ("Host", "h")),
        ("POST", "/a b", ("Host", "h")),
        ("POST", "/\r\nX: y", ("Host", "h")),
        ("POST", "/", ("Host", "h\r\nX-Injected: 1")),
        ("POST", "/", ("Bad Name", "v")),
    ],
)
def test_encode_request_refuses_what_would_split_the_request(
    method: str, target: str, header: tuple[str, str]
) -> None:
    with pytest.raises(ValueError):
        encode_request(method, target, [header], b"")


@pytest.mark.parametrize(
    ("url", "origin", "target", "authority"),
    [
        ("http://127.0.0.1:8000/v1", Origin("http", "127.0.0.1", 8000), "/v1", "127.0.0.1:8000"),
        ("https://API.example.com/v1?x=1", Origin("https", "api.example.com", 443), "/v1?x=1",
         "api.example.com"),
        ("http://[::1]:80", Origin("http", "::1", 80), "/", "[::1]"),
    ],
)  # fmt: skip
def test_split_url(url: str, origin: Origin, target: str, authority: str) -> None:
    assert split_url(url) == (origin, target)
    assert origin.authority == authority


@pytest.mark.parametrize(
    "url", ["localhost:8000", "ftp://h/", "/v1", "http://h:99999/", "http://u:p@h/", "http://h:0/"]
)
def test_split_url_refuses(url: str) -> None:
    with pytest.raises(ValueError):
        split_url(url)


def test_configuration_is_checked() -> None:
    with pytest.raises(ValueError):
        UpstreamTimeouts(idle=0)
    with pytest.raises(ValueError):
        UpstreamLimits(max_connections=0)


# -- a scripted server -----------------------------------------------------------------------


@dataclass
class Request:
    """One request as the server read it."""

    connection: int
    """Which accepted connection (0, 1, ...) carried it."""
    number: int
    """Its position on that connection (0 for the first)."""
    head: bytes
    body: bytes
    reader: asyncio.StreamReader

    async def until_client_leaves(self) -> bool:
        """Wait for the client to close the connection (as a generating server would)."""
        with contextlib.suppress(ConnectionError):
            while await self.reader.read(65536):
                pass
        return False


Script = Callable[[Request, asyncio.StreamWriter], Awaitable[bool]]
"""Answers one request; returns True to keep the connection for another."""


@dataclass
class Server:
    """An HTTP/1.1 server on 127.0.0.1 that runs ``script`` for each request."""

    script: Script
    requests: list[Request] = field(default_factory=list)
    connections: int = 0
    closed: list[int] = field(default_factory=list)
    """Connections whose client went away (or that the script ended), in order."""

    async def __aenter__(self) -> Server:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._server.close()
        await self._server.wait_closed()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def wait_closed(self, count: int = 1) -> None:
        async with asyncio.timeout(5):
            while len(self.closed) < count:
                await asyncio.sleep(0.005)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = self.connections
        self.connections += 1
        try:
            for number in range(1000):
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                length = 0
                for line in head.split(b"\r\n"):
                    name, _, value = line.partition(b":")
                    if name.lower() == b"content-length":
                        length = int(value)
                body = await reader.readexactly(length)
                request = Request(connection, number, head, body, reader)
                self.requests.append(request)
                if not await self.script(request, writer):
                    return
        finally:
            self.closed.append(connection)
            writer.close()


def chunked(*pieces: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


async def respond(writer: asyncio.StreamWriter, raw: bytes) -> bool:
    writer.write(raw)
    await writer.drain()
    return True


def answer(raw: bytes) -> Script:
    async def script(request: Request, writer: asyncio.StreamWriter) -> bool:
        return await respond(writer, raw)

    return script


async def get(pool: ConnectionPool, body: bytes = b"{}") -> UpstreamResponse:
    return await pool.request("POST", "/v1/chat/completions", [("X-Test", "1")], body)


async def read_all(response: UpstreamResponse) -> bytes:
    body = b""
    while data := await response.read():
        body += data
    return body


def pool_for(server: Server, **limits: float) -> ConnectionPool:
    return ConnectionPool(
        Origin.from_url(server.url),
        timeouts=UpstreamTimeouts(
            first_byte=limits.pop("first_byte", 5), idle=limits.pop("idle", 5), pool=5
        ),
        limits=UpstreamLimits(**limits),  # type: ignore[arg-type]
    )


# -- bodies ----------------------------------------------------------------------------------


async def test_chunked_body_arrives_as_it_is_sent() -> None:
    pieces = [b"data: %d\n\n" % i for i in range(5)]

    async def script(request: Request, writer: asyncio.StreamWriter) -> bool:
        writer.write(SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n")
        for piece in pieces:
            await asyncio.sleep(0.01)
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
        writer.write(b"0\r\n\r\n")
        return True

    async with Server(script) as server:
        pool = pool_for(server)
        async with await get(pool, b'{"a": 1}') as response:
            assert response.status == 200
            assert response.header("content-type") == "text/event-stream"
            reads = []
            while data := await response.read():
                reads.append(data)
            assert response.complete
        await pool.aclose()
    assert b"".join(reads) == b"".join(pieces)
    assert len(reads) >= 3, "each paced chunk is its own read"
    (request,) = server.requests
    assert request.body == b'{"a": 1}'
    assert request.head.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
    assert b"\r\nHost: 127.0.0.1:%d\r\n" % server.port in request.head


async def test_content_length_body() -> None:
    async with Server(answer(CONTENT_LENGTH)) as server:
        pool = pool_for(server)
        async with await get(pool) as response:
            assert await read_all(response) == b"hello world"
        await pool.aclose()


async def test_body_delimited_by_close() -> None:
    async def script(request: Request, writer: asyncio.StreamWriter) -> bool:
        await respond(writer, b"HTTP/1.0 200 OK\r\n\r\nuntil the end")
        return False

    async with Server(script) as server:
        pool = pool_for(server)
        async with await get(pool) as response:
            assert await read_all(response) == b"until the end"
        assert pool.connections == 0
        await pool.aclose()


async def test_response_written_one_byte_at_a_time() -> None:
    raw = CHUNKED

    async def script(request: Request, writer: asyncio.StreamWriter) -> bool:
        for i in range(len(raw)):
            writer.write(raw[i : i + 1])
            await writer.drain()
            if i % 7 == 0:
                await asyncio.sleep(0)
        return True

    async with Server(script) as server:
        pool = pool_for(server)
        async with await get(pool) as response:
            assert await read_all(response) == b"data: caf\xc3\xa9 1\n\ndata: 2\n\n"
        await pool.aclose()


async def test_error_status_is_a_response_with_its_body() -> None:
    raw = b"HTTP/1.1 429 Too Many Requests\r\nContent-Length: 9\r\n\r\nslow down"
    async with Server(answer(raw)) as server:
        pool = pool_for(server)
        async with await get(pool) as response:
            assert (response.status, response.reason) == (429, "Too Many Requests")
            assert await response.read_up_to(4) == b"slow down"
        assert pool.idle_connections == 1, "a complete error response keeps its connection"
        await pool.aclose()


# -- keep-alive and the pool -----------------------------------------------------------------


async def test_keep_alive_reuses_the_connection() -> None:
    async with Server(answer(CONTENT_LENGTH)) as server:
        pool = pool_for(server)
        for _ in range(3):
            async with await get(pool) as response:
                await read_all(response)
        assert [r.connection for r in server.requests] == [0, 0, 0]
        assert pool.connections == 1
        await pool.aclose()
        await server.wait_closed()


async def test_connection_close_is_honoured() -> None:
    async with Server(answer(CLOSES)) as server:
        pool = pool_for(server)
        for _ in range(2):
            async with await get(pool) as response:
                await read_all(response)
        assert [r.connection for r in server.requests] == [0, 1]
        await pool.aclose()


async def test_expired_idle_connection_is_not_reused() -> None:
    async with Server(answer(CONTENT_LENGTH)) as server:
        pool = pool_for(server, keepalive_expiry=0.05)
        for _ in range(2):
            async with await get(pool) as response:
                await read_all(response)
            await asyncio.sleep(0.1)
        assert [r.connection for r in server.requests] == [0, 1]
        await pool.aclose()


async def test_idle_connection_closed_by_the_server_leaves_the_pool() -> None:
    async def script(request: Request, writer: asyncio.StreamWriter) -> bool:
        await respond(writer, CONTENT_LENGTH)
        return False  # then close, as a server's idle timeout would

    async with Server(script) as server:
        pool = pool_for(server)
        async with await get(pool) as response:
            await read_all(response)
        async with asyncio.timeout(5):
            while pool.connections:
                await asyncio.sleep(0.005)
        assert pool.idle_connections == 0
        async with await get(pool) as response:
            assert await read_all(response) == b"hello world"
        await pool.aclose()


async def test_stale_keep_alive_connection_is_retried_once() -> None:
    async def script(request: Request, writer: asyncio.StreamWriter) -> bool:
        if request.number == 1:
            return False  # closes without answering: the keep-alive race
        return await respond(writer, CONTENT_LENGTH)

    async with Server(script) as server:
        pool = pool_for(server)
        for _ in range(2):
            async with await get(pool) as response:
                assert await read_all(response) == b"hello world"
        assert [(r.connection, r.number) for r in server.requests] == [(0, 0), (0, 1), (1, 0)]
        await pool.aclose()


async def test_pool_is_bounded() -> None:
    release = asyncio.Event()

    async def script(request: Request, writer: asyncio.StreamWriter) -> bool:
        writer.write(SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n")
        await release.wait()
        return await respond(writer, chunked(b"data: end\n\n"))

    async with Server(script) as server:
        pool = ConnectionPool(
            Origin.from_url(server.url),
            timeouts=UpstreamTimeouts(pool=0.2),
            limits=UpstreamLimits(max_connections=2),
        )
        first, second = await get(pool), await get(pool)
        with pytest.raises(UpstreamTimeout) as caught:
            await get(pool)
        assert caught.value.phase is TimeoutPhase.POOL
        assert "waiting for a free connection" in str(caught.value)
        third = asyncio.create_task(get(pool))
        await asyncio.sleep(0.05)
        assert not third.done()
        release.set()
        async with first:
            assert await read_all(first) == b"data: end\n\n"
        async with await third as response, second:
            await read_all(response)
        assert server.connections == 2
        assert pool.connections <= 2
        await pool.aclose()


# -- failures --------------------------------------------------------------------------------


async def test_connection_refused() -> None:
    async with Server(answer(b"")) as server:
        url = server.url
    pool = ConnectionPool(Origin.from_url(url))
    with pytest.raises(UpstreamConnectError, match=f"cannot connect to upstream {url}"):
        await get(pool)
    await pool.aclose()


async def test_drop_mid_stream_is_a_clear_error_after_the_data() -> None:
    async def script(request: Request, writer: asyncio.StreamWriter) -> bool:
        await respond(writer, SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
        return False

    async with Server(script) as server:
        pool = pool_for(server)
        async with await get(pool) as response:
            assert await response.read() == b"hello"
            with pytest.raises(UpstreamDisconnected, match="middle of the body"):
                await response.read()
        assert pool.connections == 0
        await pool.aclose()


async def test_drop_before_the_head() -> None:
    async def script(request: Request, writer: asyncio.StreamWriter) -> bool:
        await respond(writer, b"HTTP/1.1 200 OK\r\nContent-")
        return False

    async with Server(script) as server:
        pool = pool_for(server)
        with pytest.raises(UpstreamDisconnected, match="middle of the head"):
            await get(pool)
        await pool.aclose()


async def test_malformed_response() -> None:
    async with Server(answer(b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n")) as server:
        pool = pool_for(server)
        with pytest.raises(UpstreamProtocolError, match="malformed"):
            await get(pool)
        await pool.aclose()


async def test_first_byte_timeout() -> None:
    async def script(request: Request, writer: asyncio.StreamWriter) -> bool:
        return await request.until_client_leaves()

    async with Server(script) as server:
        pool = pool_for(server, first_byte=0.1)
        with pytest.raises(UpstreamTimeout) as caught:
            await get(pool)
        assert caught.value.phase is TimeoutPhase.FIRST_BYTE
        await server.wait_closed()
        await pool.aclose()


async def test_idle_timeout_after_some_data() -> None:
    async def script(request: Request, writer: asyncio.StreamWriter) -> bool:
        writer.write(SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n")
        for _ in range(4):  # steady data keeps the response alive past the idle limit
            writer.write(chunked(b"x")[:-5])
            await asyncio.sleep(0.05)
        return await request.until_client_leaves()

    async with Server(script) as server:
        pool = pool_for(server, idle=0.12)
        async with await get(pool) as response:
            received = b""
            with pytest.raises(UpstreamTimeout, match="timed out waiting for data") as caught:
                while True:
                    received += await response.read()
        assert caught.value.phase is TimeoutPhase.IDLE
        assert received == b"xxxx"
        await server.wait_closed()
        await pool.aclose()


async def test_a_slow_reader_pauses_the_connection_and_is_not_timed_out() -> None:
    payload = bytes(range(256)) * 4096  # 1 MiB

    async def script(request: Request, writer: asyncio.StreamWriter) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(payload))
        writer.write(payload)
        await writer.drain()
        return True

    async with Server(script) as server:
        pool = pool_for(server, max_buffered_bytes=16 * 1024, idle=0.1)
        async with await get(pool) as response:
            await asyncio.sleep(0.3)  # longer than the idle timeout, reading nothing
            conn = response._conn
            assert conn._reading_paused
            assert conn._buffered < 16 * 1024 + 256 * 1024
            assert await read_all(response) == payload
        await pool.aclose()


# -- leaving a response early ----------------------------------------------------------------


async def test_leaving_early_closes_the_connection() -> None:
    async def script(request: Request, writer: asyncio.StreamWriter) -> bool:
        await respond(writer, SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
        return await request.until_client_leaves()

    async with Server(script) as server:
        pool = pool_for(server)
        reader_started = asyncio.Event()

        async def reader() -> None:
            async with await get(pool) as response:
                await response.read()
                reader_started.set()
                await response.read()

        task = asyncio.create_task(reader())
        await reader_started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert pool.connections == 0
        await server.wait_closed()  # the upstream saw the abort
        await pool.aclose()


async def test_drain_on_close_returns_the_connection_when_the_body_ends() -> None:
    async def script(request: Request, writer: asyncio.StreamWriter) -> bool:
        await respond(writer, SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n")
        await respond(writer, chunked(b"data: [DONE]\n\n")[:-5])
        await asyncio.sleep(0.05)
        return await respond(writer, b"0\r\n\r\n")

    async with Server(script) as server:
        pool = pool_for(server)
        async with await get(pool) as response:
            assert await response.read() == b"data: [DONE]\n\n"
            response.drain_on_close()
        assert pool.idle_connections == 0, "still draining"
        async with asyncio.timeout(5):
            while not pool.idle_connections:
                await asyncio.sleep(0.005)
        async with await get(pool) as response:
            await read_all(response)
        assert [r.connection for r in server.requests] == [0, 0]
        await pool.aclose()


async def test_drain_gives_up_on_a_body_that_does_not_end() -> None:
    async def script(request: Request, writer: asyncio.StreamWriter) -> bool:
        await respond(writer, SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n")
        return await request.until_client_leaves()

    async with Server(script) as server:
        pool = ConnectionPool(
            Origin.from_url(server.url),
            timeouts=UpstreamTimeouts(drain=0.05),
            limits=UpstreamLimits(max_connections=1),
        )
        async with await get(pool) as response:
            response.drain_on_close()
        await server.wait_closed()
        assert pool.connections == 0
        # The slot came back when the drain gave up: the only one is usable again.
        async with asyncio.timeout(1):
            response = await get(pool)
        response.close()
        await server.wait_closed(2)
        await pool.aclose()


async def test_aclose_fails_a_response_being_read() -> None:
    async def script(request: Request, writer: asyncio.StreamWriter) -> bool:
        await respond(writer, SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n")
        return await request.until_client_leaves()

    async with Server(script) as server:
        pool = pool_for(server)
        response = await get(pool)
        await pool.aclose()
        with pytest.raises(UpstreamDisconnected, match="closed"):
            await response.read()
        response.close()
        with pytest.raises(RuntimeError):
            await get(pool)


# -- TLS -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


async def test_https_upstream(certificate: tuple[Path, Path]) -> None:
    cert, key = certificate
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(cert, key)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        await reader.readexactly(2)
        writer.write(CHUNKED)
        await writer.drain()
        await reader.read()  # until the client goes away
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=server_context)
    port = server.sockets[0].getsockname()[1]
    client_context = ssl.create_default_context(cafile=str(cert))
    pool = ConnectionPool(Origin("https", "127.0.0.1", port), ssl_context=client_context)
    async with await get(pool) as response:
        assert await read_all(response) == b"data: caf\xc3\xa9 1\n\ndata: 2\n\n"
    untrusted = ConnectionPool(Origin("https", "127.0.0.1", port))
    with pytest.raises(UpstreamConnectError, match=r"CERTIFICATE_VERIFY_FAILED|certificate"):
        await get(untrusted)
    await pool.aclose()
    await untrusted.aclose()
    server.close()
    await server.wait_closed()


@pytest.mark.parametrize(
    "module",
    [http11, openai_chunks, upstream_config, upstream_connection, upstream_errors, upstream_http],
)
def test_every_exported_name_exists(module: ModuleType) -> None:
    for name in module.__all__:
        assert hasattr(module, name), f"{module.__name__}.{name}"
