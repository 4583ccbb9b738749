"""Connections handed between sibling processes' `Handoff` ends (here two ends in one loop, each
with its own socket, as two workers have): the connection keeps working from its new owner,
a sibling that is gone or unknown refuses without touching the connection, anything that is not
a connection is dropped, and closing removes the socket. Then through `HttpServer`: a request
one server hands over is answered by the other on the same connection (the next one may go on
again), a small body goes along once it has all arrived (other bodies stay), and placing a
request goes to a sibling whose board slot says it produces clearly fewer streams."""

from __future__ import annotations

import array
import asyncio
import contextlib
import os
import resource
import socket
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from airlane.runtime.handoff import MAX_REQUEST_BYTES, Handoff, handoff_path
from airlane.runtime.loadboard import LoadBoard
from airlane.transports.http.asgi import HAND_OVER_EXTENSION, HANDED_OVER, PLACE_EXTENSION
from airlane.transports.http.http_protocol import HANDED_BODY_BYTES
from airlane.transports.http.server import HttpServer
from tests.waiting import eventually

HEAD = b"GET /x HTTP/1.1\r\nhost: here\r\n\r\n"


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A directory whose socket paths fit ``sun_path`` (pytest's may not)."""
    with tempfile.TemporaryDirectory(prefix="ho-") as directory:
        yield Path(directory)


@contextlib.contextmanager
def tcp_pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    """A loopback connection: (the client's end, the server's accepted end)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        client = socket.create_connection(server.getsockname(), timeout=5)
        accepted, _ = server.accept()
    with client, accepted:
        yield client, accepted


@contextlib.contextmanager
def no_descriptor_left() -> Iterator[None]:
    """This process without a free descriptor: the limit lowered to the highest in use and
    the gaps below it filled (all undone after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    filler: list[int] = []
    try:
        highest = max(int(fd) for fd in os.listdir("/proc/self/fd"))
        resource.setrlimit(resource.RLIMIT_NOFILE, (highest + 1, hard))
        with contextlib.suppress(OSError):
            while True:
                filler.append(os.dup(0))
        yield
    finally:
        for fd in filler:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@contextlib.asynccontextmanager
async def siblings(tmp_path: Path) -> AsyncIterator[tuple[Handoff, Handoff, list[Any]]]:
    """Two ends, ``a.1`` and ``b.2``; what each takes in lands in the list as (name, conn,
    head)."""
    taken: list[Any] = []
    a, b = Handoff(tmp_path, "a.1"), Handoff(tmp_path, "b.2")
    a.start(lambda conn, head: taken.append(("a", conn, head)))
    b.start(lambda conn, head: taken.append(("b", conn, head)))
    try:
        yield a, b, taken
    finally:
        a.close()
        b.close()
        for _, conn, _ in taken:
            conn.close()


async def test_a_handed_connection_works_from_its_new_owner(short_tmp: Path) -> None:
    async with siblings(short_tmp) as (a, b, taken):
        with tcp_pair() as (client, accepted):
            assert a.send("b.2", accepted.fileno(), HEAD)
            accepted.close()  # what the sender does next: the connection lives on in b
            await eventually(lambda: taken, what="b takes it")
            [(name, conn, head)] = taken
            assert (name, head) == ("b", HEAD)
            assert conn.getpeername() == client.getsockname()
            conn.setblocking(True)
            conn.sendall(b"from b")
            assert client.recv(100) == b"from b"
            client.sendall(b"to b")
            assert conn.recv(100) == b"to b"
        assert (a.sent, b.received, a.refused) == (1, 1, 0)


async def test_a_sibling_gone_or_unknown_refuses_and_leaves_the_connection_alone(
    short_tmp: Path,
) -> None:
    async with siblings(short_tmp) as (a, b, taken):
        with tcp_pair() as (client, accepted):
            assert not a.send("nobody.9", accepted.fileno(), HEAD)
            assert not a.send("a.1", accepted.fileno(), HEAD)  # not to itself
            assert not a.send("b.2", accepted.fileno(), b"x" * (MAX_REQUEST_BYTES + 1))
            assert a.send("b.2", accepted.fileno(), HEAD)  # the link to b is open now
            await eventually(lambda: taken, what="b takes it")
            b.close()
            assert not handoff_path(short_tmp, "b.2").exists()
            assert not a.send("b.2", accepted.fileno(), HEAD)  # the link broke with b
            accepted.sendall(b"still here")
            assert client.recv(100) == b"still here"
        assert a.refused == 3  # (the one to itself is not an attempt)


async def test_a_connection_handed_in_with_no_descriptor_left_is_counted_lost(
    short_tmp: Path,
) -> None:
    # Both ends are in this process: once it is sent, the process is left without a free
    # descriptor, so the kernel cannot give b the connection and closes it.
    async with siblings(short_tmp) as (a, b, taken):
        with tcp_pair() as (_, accepted):
            assert a.send("b.2", accepted.fileno(), HEAD)  # (the link is open from here)
            await eventually(lambda: taken, what="b takes the first")
        with tcp_pair() as (client, accepted):
            assert a.send("b.2", accepted.fileno(), HEAD)
            accepted.close()
            with no_descriptor_left():
                await eventually(lambda: b.lost == 1, what="b finds no room for it")
            assert len(taken) == 1 and b.received == 1
            assert client.recv(100) == b""  # closed, not left hanging


async def test_a_link_that_comes_while_out_of_descriptors_is_taken_once_there_is_room(
    short_tmp: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with siblings(short_tmp) as (a, b, taken):
        with tcp_pair() as (_, accepted):
            assert a.send("b.2", accepted.fileno(), HEAD)  # a opens its link to b here
            with no_descriptor_left():
                await asyncio.sleep(0.35)  # b cannot accept the link
            tries = [r for r in caplog.records if "Too many open files" in r.getMessage()]
            assert 1 <= len(tries) <= 5  # one every RETRY_S, not a loop
            await eventually(lambda: taken, what="b takes it once it can")
            assert b.received == 1 and b.lost == 0


async def test_what_is_not_one_connection_is_dropped(short_tmp: Path) -> None:
    async with siblings(short_tmp) as (_, b, taken):
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as link:
            link.connect(os.fspath(b.path))
            read_end, write_end = os.pipe()
            try:
                link.send(b"no descriptor")
                rights = array.array("i", [read_end])
                link.sendmsg([HEAD], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, rights)])
                with tcp_pair() as (_, accepted):
                    rights = array.array("i", [accepted.fileno()])
                    link.sendmsg([HEAD], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, rights)])
                    await eventually(lambda: taken, what="the real one")
            finally:
                os.close(read_end)
                os.close(write_end)
        assert [name for name, _, _ in taken] == ["b"] and b.received == 1


async def _serve(
    tmp_path: Path, name: str, app: Any, board: LoadBoard | None = None
) -> tuple[HttpServer, Handoff, int]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    handoff = Handoff(tmp_path, name)
    handoff.board = board
    server = HttpServer(app, handoff=handoff)
    await server.start(sock)
    return server, handoff, sock.getsockname()[1]


async def _lifespan(receive: Any, send: Any) -> None:
    """A test application's lifespan: nothing to start or stop."""
    while (await receive())["type"] != "lifespan.shutdown":
        await send({"type": "lifespan.startup.complete"})
    await send({"type": "lifespan.shutdown.complete"})


def _app(name: str, offered: list[tuple[str, bool]]) -> Any:
    """Answers with its name, the request and its body; ``a`` hands every request offered
    to ``b.2`` (``/place``: through the place extension)."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        extensions = scope["extensions"]
        pass_to = extensions.get(HAND_OVER_EXTENSION)
        offered.append((name, pass_to is not None))
        if name == "a" and pass_to is not None:
            place = extensions.get(PLACE_EXTENSION)
            handed = await place() if scope["path"] == "/place" else await pass_to("b.2")
            if handed:
                offered.append(("a handed it over", scope[HANDED_OVER]))
                return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        text = f"{name} answers {scope['method']} {scope['path']}?{scope['query_string'].decode()}"
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": text.encode() + b" " + body})

    return app


@contextlib.asynccontextmanager
async def two_servers(
    tmp_path: Path, board: LoadBoard | None = None
) -> AsyncIterator[tuple[int, Handoff, list[tuple[str, bool]]]]:
    """Servers ``a.1`` (its port given) and ``b.2`` running `_app`, and what was offered."""
    offered: list[tuple[str, bool]] = []
    server_a, _, port = await _serve(tmp_path, "a.1", _app("a", offered), board)
    server_b, handoff_b, _ = await _serve(tmp_path, "b.2", _app("b", offered))
    try:
        yield port, handoff_b, offered
    finally:
        await server_a.shutdown()
        await server_b.shutdown()


async def test_a_request_handed_over_is_answered_by_the_sibling_on_the_same_connection(
    short_tmp: Path,
) -> None:
    async with two_servers(short_tmp) as (port, handoff_b, offered):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /v1/x?q=1 HTTP/1.1\r\nhost: h\r\nx-y: z\r\n\r\n")
        response = await reader.readuntil(b"0\r\n\r\n")  # (chunked)
        assert response.startswith(b"HTTP/1.1 200") and b"b answers GET /v1/x?q=1" in response
        # The connection is b's now: b answers the request it took in, and is offered the
        # next one (b's application keeps it).
        writer.write(b"GET /again HTTP/1.1\r\nhost: h\r\n\r\n")
        assert b"b answers GET /again?" in await reader.readuntil(b"0\r\n\r\n")
        assert offered == [("a", True), ("a handed it over", True), ("b", False), ("b", True)]
        assert handoff_b.received == 1
        writer.close()


async def test_a_small_body_goes_along_once_all_of_it_is_there(short_tmp: Path) -> None:
    async with two_servers(short_tmp) as (port, handoff_b, offered):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        # The body comes a moment after the head: the hand-over waits for it.
        writer.write(b"POST /p HTTP/1.1\r\nhost: h\r\ncontent-length: 11\r\n\r\nhello")
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(b" world")
        assert b"b answers POST /p? hello world" in await reader.readuntil(b"0\r\n\r\n")
        assert offered[:2] == [("a", True), ("a handed it over", True)]
        writer.close()
        # Not offered: a chunked body, one larger than a hand-over carries, one whose client
        # waits to be asked for it (100-continue).
        offered.clear()
        big = HANDED_BODY_BYTES + 1
        chunked = b"transfer-encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n"
        for head in (
            b"POST /c HTTP/1.1\r\nhost: h\r\n" + chunked,
            b"POST /l HTTP/1.1\r\nhost: h\r\ncontent-length: %d\r\n\r\n%b" % (big, b"x" * big),
            b"POST /e HTTP/1.1\r\nhost: h\r\ncontent-length: 2\r\nexpect: 100-continue\r\n\r\nhi",
        ):
            reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
            writer.write(head)
            assert b"a answers POST" in await reader.readuntil(b"0\r\n\r\n")
            writer.close()
        assert offered == [("a", False)] * 3
        assert handoff_b.received == 1


async def test_a_client_gone_before_its_body_came_leaves_nothing_handed(short_tmp: Path) -> None:
    async with two_servers(short_tmp) as (port, handoff_b, offered):
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"POST /p HTTP/1.1\r\nhost: h\r\ncontent-length: 10\r\n\r\nhal")
        await writer.drain()
        await eventually(lambda: offered, what="a's application asked")
        writer.close()
        await asyncio.sleep(0.1)
        assert handoff_b.received == 0 and offered == [("a", True)]


async def test_placing_goes_to_a_sibling_producing_clearly_fewer(short_tmp: Path) -> None:
    load = {"a": 0}
    board = LoadBoard(short_tmp, 0, "a.1", lambda: load["a"])
    sibling = LoadBoard(short_tmp, 1, "b.2", lambda: 3)
    sibling.start(lambda: 0)
    try:
        async with two_servers(short_tmp, board) as (port, handoff_b, _):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            request = b"POST /place HTTP/1.1\r\nhost: h\r\ncontent-length: 2\r\n\r\n{}"
            writer.write(request)  # a produces fewer than b: it stays
            assert b"a answers POST /place? {}" in await reader.readuntil(b"0\r\n\r\n")
            load["a"] = 6
            writer.write(request)  # a produces 6, b 3: it goes to b
            assert b"b answers POST /place? {}" in await reader.readuntil(b"0\r\n\r\n")
            assert handoff_b.received == 1
            writer.close()
    finally:
        sibling.close()


async def test_a_streaming_response_lets_the_hand_over_extensions_go(short_tmp: Path) -> None:
    """Once a response streams, the connection cannot be handed over any more: the scope
    stops holding the two call-backs (bound to the connection and the request) for as long
    as the stream lasts."""
    seen: list[tuple[bool, bool]] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        extensions = scope["extensions"]
        offered = (HAND_OVER_EXTENSION in extensions, PLACE_EXTENSION in extensions)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"part", "more_body": True})
        seen.extend([offered, (HAND_OVER_EXTENSION in extensions, PLACE_EXTENSION in extensions)])
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    board = LoadBoard(short_tmp, 0, "c.3", lambda: 0)
    server, _, port = await _serve(short_tmp, "c.3", app, board)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /s HTTP/1.1\r\nhost: h\r\n\r\n")
        assert (await reader.readuntil(b"0\r\n\r\n")).startswith(b"HTTP/1.1 200")
        assert seen == [(True, True), (False, False)]
        writer.close()
    finally:
        await server.shutdown()
