"""Airlane's HTTP/1.1 server (`airlane.transports.http.server`, `HttpProtocol`) with real
sockets on 127.0.0.1: keep-alive and pipelining, request bodies (chunked, 100-continue, flow
control), bounds and malformed requests, the client leaving, failing applications, the scope,
the lifespan and the graceful shutdown. Raw sockets where the bytes matter, httpx elsewhere."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from airlane.transports.http.server import HttpServer, LifespanFailed, ServerSettings
from airlane.transports.http.server.cycle import RequestCycle
from tests.asgi_server import Served, serving

App = Callable[[dict[str, Any], Any, Any], Awaitable[None]]
WAIT_S = 10.0
"""Bound of every wait in these tests."""


async def until(condition: Callable[[], bool]) -> None:
    """Wait until ``condition()`` holds (the server's state, which has no event to wait on),
    at most `WAIT_S`."""
    async with asyncio.timeout(WAIT_S):
        while not condition():
            await asyncio.sleep(0.005)


async def text_response(send: Any, body: bytes, status: int = 200, **extra: Any) -> None:
    headers = [(b"content-type", b"text/plain"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": status, "headers": headers, **extra})
    await send({"type": "http.response.body", "body": body})


async def read_body(receive: Any) -> bytes:
    parts = []
    while True:
        message = await receive()
        assert message["type"] == "http.request", message
        parts.append(message["body"])
        if not message.get("more_body"):
            return b"".join(parts)


async def echo(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answers with the request's method, path and body."""
    if scope["type"] != "http":
        return
    body = await read_body(receive)
    await text_response(send, f"{scope['method']} {scope['path']} ".encode() + body)


class Raw:
    """A raw client connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, served: Served) -> Raw:
        reader, writer = await asyncio.open_connection(served.host, served.port)
        return cls(reader, writer)

    def send(self, data: bytes) -> None:
        self.writer.write(data)

    async def head(self) -> tuple[int, dict[bytes, bytes]]:
        """A response's status and headers."""
        raw = await asyncio.wait_for(self.reader.readuntil(b"\r\n\r\n"), WAIT_S)
        line, *fields = raw[:-4].split(b"\r\n")
        headers = {}
        for field in fields:
            name, _, value = field.partition(b":")
            headers[name.strip().lower()] = value.strip()
        return int(line.split()[1]), headers

    async def response(self) -> tuple[int, dict[bytes, bytes], bytes]:
        """A whole response (content-length or chunked)."""
        status, headers = await self.head()
        if b"content-length" in headers:
            size = int(headers[b"content-length"])
            body = await asyncio.wait_for(self.reader.readexactly(size), WAIT_S)
        elif headers.get(b"transfer-encoding") == b"chunked":
            body = await self.chunked()
        else:
            body = await asyncio.wait_for(self.reader.read(), WAIT_S)
        return status, headers, body

    async def chunked(self) -> bytes:
        parts = []
        while True:
            size = int(await asyncio.wait_for(self.reader.readline(), WAIT_S), 16)
            data = await asyncio.wait_for(self.reader.readexactly(size + 2), WAIT_S)
            if size == 0:
                return b"".join(parts)
            parts.append(data[:-2])

    async def closed(self) -> bool:
        """Whether the server closes the connection (EOF) within the bound."""
        try:
            rest = await asyncio.wait_for(self.reader.read(), WAIT_S)
        except (ConnectionError, TimeoutError):
            return False
        return rest == b""

    def close(self) -> None:
        self.writer.close()


def get(path: str, *extra: str) -> bytes:
    lines = [f"GET {path} HTTP/1.1", "Host: t", *extra, "", ""]
    return "\r\n".join(lines).encode()


# -- keep-alive and pipelining ------------------------------------------------------------


async def test_pipelined_requests_are_answered_in_order_on_one_connection() -> None:
    """Three requests in one write; the first answers last in time, yet first on the wire."""
    release = asyncio.Event()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] == "/slow":
            await asyncio.wait_for(release.wait(), WAIT_S)
        await text_response(send, scope["path"].encode())

    async with serving(app) as served:
        raw = await Raw.open(served)
        raw.send(get("/slow") + get("/a") + get("/b"))
        read = asyncio.ensure_future(raw.response())
        await asyncio.sleep(0)  # the slow one is in flight; the others wait behind it
        assert not read.done()
        release.set()
        bodies = [(await read)[2], (await raw.response())[2], (await raw.response())[2]]
        assert bodies == [b"/slow", b"/a", b"/b"]
        raw.send(get("/again"))  # the connection is kept alive
        assert (await raw.response())[2] == b"/again"
        raw.close()


async def test_the_parser_rests_while_a_response_streams_and_comes_back_for_more() -> None:
    """While a chunked response streams and its request has been read, the connection lets
    its parser go (seven objects fewer per idle stream for the garbage collector); a request
    pipelined meanwhile, and one after the stream ended, are read by a new parser."""
    release = asyncio.Event()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] == "/stream":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"first,", "more_body": True})
            await asyncio.wait_for(release.wait(), WAIT_S)
            await send({"type": "http.response.body", "body": b"last", "more_body": False})
            return
        await text_response(send, scope["path"].encode())

    async with serving(app) as served:
        raw = await Raw.open(served)
        raw.send(get("/stream"))
        state = served.server._state
        assert state is not None
        await until(lambda: len(state.connections) == 1)
        (connection,) = state.connections
        await until(lambda: connection.parser is None)  # resting
        raw.send(get("/a"))
        await until(lambda: connection.parser is not None)  # back for the pipelined request
        release.set()
        assert (await raw.response())[2] == b"first,last"
        assert (await raw.response())[2] == b"/a"
        raw.send(get("/b"))
        assert (await raw.response())[2] == b"/b"
        raw.close()


async def test_a_connection_close_request_closes_after_its_response() -> None:
    async with serving(echo) as served:
        raw = await Raw.open(served)
        raw.send(get("/x", "Connection: close") + get("/dropped"))
        status, headers, _ = await raw.response()
        assert status == 200 and headers[b"connection"] == b"close"
        assert await raw.closed()


async def test_past_the_pipeline_bound_it_answers_what_it_read_and_closes() -> None:
    async with serving(echo, max_pipelined=2) as served:
        raw = await Raw.open(served)
        raw.send(b"".join(get(f"/{n}") for n in range(6)))
        bodies = []
        while len(bodies) < 6:
            try:
                bodies.append((await raw.response())[2])
            except asyncio.IncompleteReadError:
                break
        assert bodies == [b"GET /0 ", b"GET /1 ", b"GET /2 "]
        assert await raw.closed()


async def test_an_idle_keep_alive_connection_is_closed() -> None:
    async with serving(echo, keep_alive_s=0.2) as served:
        raw = await Raw.open(served)
        raw.send(get("/x"))
        assert (await raw.response())[0] == 200
        assert await raw.closed()


async def test_an_http_10_client_gets_a_body_that_ends_with_the_connection() -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"one ", "more_body": True})
            await send({"type": "http.response.body", "body": b"two"})

    async with serving(app) as served:
        raw = await Raw.open(served)
        raw.send(b"GET / HTTP/1.0\r\n\r\n")
        status, headers, body = await raw.response()
        assert status == 200 and b"transfer-encoding" not in headers
        assert headers[b"connection"] == b"close" and body == b"one two"


# -- request bodies -----------------------------------------------------------------------


async def test_a_chunked_request_body_is_streamed_to_receive() -> None:
    async with serving(echo) as served:
        raw = await Raw.open(served)
        raw.send(b"POST /up HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n")
        raw.send(b"5\r\nhello\r\n")
        raw.send(b"6\r\n world\r\n0\r\n\r\n")
        assert (await raw.response())[2] == b"POST /up hello world"


async def test_100_continue_is_sent_when_the_application_reads_the_body() -> None:
    async with serving(echo) as served:
        raw = await Raw.open(served)
        raw.send(
            b"POST /c HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n"
        )
        assert (await raw.head())[0] == 100
        raw.send(b"body")
        assert (await raw.response())[2] == b"POST /c body"


async def test_no_100_continue_when_the_application_answers_without_the_body() -> None:
    async def refuse(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            await text_response(send, b"too big", 413)

    async with serving(refuse) as served:
        raw = await Raw.open(served)
        raw.send(
            b"POST /c HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\nExpect: 100-continue\r\n\r\n"
        )
        status, headers, body = await raw.response()
        # The body never came: the connection cannot be reused, and says so.
        assert (status, body, headers[b"connection"]) == (413, b"too big", b"close")
        assert await raw.closed()


async def test_reading_stops_while_the_application_does_not_read_the_body() -> None:
    """4 MB sent to an application that has not read any: the server buffers at most its
    high-water mark and one read, then stops reading; the body arrives whole once read."""
    cycles: list[RequestCycle] = []
    go = asyncio.Event()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        cycles.append(receive.__self__)
        await asyncio.wait_for(go.wait(), WAIT_S)
        await text_response(send, b"%d" % len(await read_body(receive)))

    size = 4 << 20
    async with serving(app, body_high_water=65536) as served:
        raw = await Raw.open(served)
        raw.send(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % size)
        raw.send(b"x" * size)
        await until(lambda: bool(cycles) and cycles[0].buffered > 65536)
        # Past the mark the connection stopped reading at once, with what one read brought.
        assert not cycles[0].connection.reading
        assert cycles[0].buffered <= 65536 + (1 << 20)
        go.set()
        assert (await raw.response())[2] == b"%d" % size


# -- bounds and malformed requests --------------------------------------------------------


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"NONSENSE\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost: t\r\nBad Header\r\n\r\n", 400),
        (get("/" + "a" * 10_000), 414),
        (get("/", *(f"X-{n}: 1" for n in range(200))), 431),
        (get("/", "X-Big: " + "v" * 70_000), 431),
    ],
    ids=["garbage", "bad-header", "long-target", "many-headers", "big-header"],
)
async def test_a_refused_request_gets_its_status_and_the_server_goes_on(
    request_bytes: bytes, status: int, caplog: pytest.LogCaptureFixture
) -> None:
    async with serving(echo) as served:
        raw = await Raw.open(served)
        raw.send(request_bytes)
        got, headers, body = await raw.response()
        assert (got, headers[b"connection"]) == (status, b"close")
        assert b"Traceback" not in body and len(body) < 200
        assert await raw.closed()
        async with httpx.AsyncClient(base_url=served.url) as client:
            assert (await client.get("/fine")).text == "GET /fine "
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_a_malformed_request_after_a_good_one_is_answered_in_its_turn() -> None:
    async with serving(echo) as served:
        raw = await Raw.open(served)
        raw.send(get("/ok") + b"NONSENSE\r\n\r\n")
        assert (await raw.response())[:3:2] == (200, b"GET /ok ")
        assert (await raw.response())[0] == 400
        assert await raw.closed()


# -- the client leaving -------------------------------------------------------------------


async def test_a_client_that_leaves_mid_body_is_seen_by_receive() -> None:
    seen: list[str] = []
    done = asyncio.Event()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        try:
            while (message := await receive())["type"] == "http.request":
                seen.append("part")
            seen.append(message["type"])
        finally:
            done.set()

    async with serving(app) as served:
        raw = await Raw.open(served)
        raw.send(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\nhalf")
        await until(lambda: bool(seen))
        raw.writer.transport.abort()
        await asyncio.wait_for(done.wait(), WAIT_S)
    assert seen == ["part", "http.disconnect"]


async def test_a_client_that_leaves_mid_stream_ends_the_response(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A streamed response whose client goes: ``receive`` says ``http.disconnect``, what is
    sent after is dropped without an error, and nothing is logged."""
    outcome: list[str] = []
    done = asyncio.Event()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        try:
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
            await read_body(receive)
            outcome.append((await receive())["type"])
            await send({"type": "http.response.body", "body": b"late", "more_body": True})
            outcome.append("sent after")
        finally:
            done.set()

    async with serving(app) as served:
        raw = await Raw.open(served)
        raw.send(get("/stream"))
        await raw.head()
        raw.writer.transport.abort()
        await asyncio.wait_for(done.wait(), WAIT_S)
    assert outcome == ["http.disconnect", "sent after"]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_a_request_task_still_running_after_its_client_left_is_cancelled() -> None:
    running, cancelled = asyncio.Event(), asyncio.Event()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        running.set()
        try:
            await asyncio.Event().wait()  # never reads receive, never ends by itself
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async with serving(app, disconnect_grace_s=0.1) as served:
        raw = await Raw.open(served)
        raw.send(get("/forever"))
        await asyncio.wait_for(running.wait(), WAIT_S)
        raw.writer.transport.abort()
        await asyncio.wait_for(cancelled.wait(), WAIT_S)


# -- failing applications -----------------------------------------------------------------


async def test_an_application_error_before_the_response_is_a_500(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            raise ValueError("a bug")

    async with serving(app) as served:
        raw = await Raw.open(served)
        raw.send(get("/boom"))
        status, headers, body = await raw.response()
        assert (status, headers[b"connection"]) == (500, b"close")
        assert b"a bug" not in body and b"Traceback" not in body
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "GET /boom" in errors[0].getMessage()


async def test_an_application_error_mid_response_closes_the_connection(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"part", "more_body": True})
            raise ValueError("a bug")

    async with serving(app) as served:
        raw = await Raw.open(served)
        raw.send(get("/boom"))
        assert (await raw.head())[0] == 200
        data = await asyncio.wait_for(raw.reader.read(), WAIT_S)
        assert data == b"4\r\npart\r\n"  # no last chunk: the response does not look whole
    assert len([r for r in caplog.records if r.levelno >= logging.ERROR]) == 1


async def test_responses_without_a_body() -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            status = int(scope["path"][1:])
            await send({"type": "http.response.start", "status": status, "headers": []})
            await send({"type": "http.response.body", "body": b"ignored"})

    async with serving(app) as served:
        raw = await Raw.open(served)
        for status in (204, 304):
            raw.send(get(f"/{status}"))
            got, headers = await raw.head()
            assert got == status and b"transfer-encoding" not in headers
        raw.send(b"HEAD /200 HTTP/1.1\r\nHost: t\r\n\r\n")
        assert (await raw.head())[0] == 200
        raw.send(get("/200"))  # nothing was written for those: the next response is next
        _, _, body = await raw.response()
        assert body == b"ignored"


# -- the scope ----------------------------------------------------------------------------


async def test_the_scope() -> None:
    scopes: list[dict[str, Any]] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            scopes.append(scope)
            await text_response(send, b"")

    async with serving(app, root_path="/api") as served:
        raw = await Raw.open(served)
        raw.send(get("/a%20b/c?x=1&y=%20", "X-Mixed-Case: Value"))
        await raw.response()
        port = raw.writer.get_extra_info("sockname")[1]
    (scope,) = scopes
    assert scope["type"] == "http" and scope["asgi"]["version"] == "3.0"
    assert (scope["http_version"], scope["method"], scope["scheme"]) == ("1.1", "GET", "http")
    assert (scope["root_path"], scope["path"]) == ("/api", "/api/a b/c")
    assert (scope["raw_path"], scope["query_string"]) == (b"/a%20b/c", b"x=1&y=%20")
    assert (b"x-mixed-case", b"Value") in scope["headers"]
    assert scope["client"] == ("127.0.0.1", port)
    assert scope["server"] == ("127.0.0.1", served.port)
    assert "airlane.http.write_body" in scope["extensions"]


# -- lifespan and shutdown ----------------------------------------------------------------


async def test_the_lifespan_runs_around_the_server() -> None:
    events: list[str] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                events.append(message["type"])
                scope["state"]["ready"] = True
                await send({"type": f"{message['type']}.complete"})
                if message["type"] == "lifespan.shutdown":
                    return
        else:
            await text_response(send, b"%r" % scope["state"].get("ready"))

    async with serving(app) as served, httpx.AsyncClient(base_url=served.url) as client:
        assert (await client.get("/")).text == "True"
        assert events == ["lifespan.startup"]
    assert events == ["lifespan.startup", "lifespan.shutdown"]


async def test_a_failed_startup_is_raised() -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        await receive()
        raise OSError("cannot reach the hub")

    server = HttpServer(app)
    with pytest.raises(LifespanFailed, match="cannot reach the hub"):
        await server.start(None)  # type: ignore[arg-type]  # it fails before taking the socket


async def test_shutdown_lets_a_request_finish_and_closes_idle_connections(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """In flight: finishes within the grace, its connection closed after it; idle: closed at
    once; no new connections are taken."""
    started, finish = asyncio.Event(), asyncio.Event()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] == "/slow":
            started.set()
            await asyncio.wait_for(finish.wait(), WAIT_S)
        await text_response(send, b"done")

    async with serving(app, graceful_s=WAIT_S) as served:
        idle = await Raw.open(served)
        idle.send(get("/quick"))
        await idle.response()
        busy = await Raw.open(served)
        busy.send(get("/slow"))
        await asyncio.wait_for(started.wait(), WAIT_S)
        stopping = asyncio.ensure_future(served.server.shutdown())
        assert await idle.closed()
        finish.set()
        status, headers, body = await busy.response()
        assert (status, body, headers[b"connection"]) == (200, b"done", b"close")
        await asyncio.wait_for(stopping, WAIT_S)
        assert served.server.acceptor is not None
        assert not served.server.acceptor.is_serving()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_shutdown_cancels_what_outlasts_the_grace(caplog: pytest.LogCaptureFixture) -> None:
    """A stream that would never end: cancelled after the grace, its response cut short
    (the connection closes), no traceback logged."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
        await asyncio.Event().wait()

    async with serving(app, graceful_s=0.2) as served:
        raw = await Raw.open(served)
        raw.send(get("/stream"))
        await raw.head()
        await asyncio.wait_for(served.server.shutdown(), WAIT_S)
        assert await asyncio.wait_for(raw.reader.read(), WAIT_S) == b"9\r\ndata: 1\n\n\r\n"
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING or r.exc_info]


def test_settings_take_the_websocket_limits_of_the_http_config() -> None:
    from airlane.transports.http import HttpConfig

    http = HttpConfig(ws_ping_s=7.0, max_ws_message_bytes=1234, ws_compression=False)
    settings = ServerSettings.from_http(http, graceful_s=1.0)
    assert (settings.ws_ping_s, settings.ws_max_message_bytes) == (7.0, 1234)
    assert (settings.ws_compression, settings.graceful_s) == (False, 1.0)
