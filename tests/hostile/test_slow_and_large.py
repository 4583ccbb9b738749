"""Clients that send too much, too slowly or not at all, before any key is checked.

A real gateway with short timers (``[http] keep_alive_s = 1``, ``body_timeout_s = 1``): a head
that never ends is cut at the header limit (431); a head or a body that stops coming closes the
connection within its timer; an idle connection closes; 8 clients at once streaming header
bytes and 20 MB of gRPC-Web text hold memory to a few MiB each at most, and ``/healthz``
answers throughout. RSS bound: +64 MiB over the run.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.hostile.memory import rss_mib
from tests.servers import ServerProcess, run_server

pytestmark = pytest.mark.timeout(120)

RSS_BOUND_MIB = 64


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    config = "[http]\nkeep_alive_s = 1.0\nbody_timeout_s = 1.0\n"
    with run_server(config=config) as running:
        yield running


def address(server: ServerProcess) -> tuple[str, int]:
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


async def closed_within(reader: asyncio.StreamReader, seconds: float) -> bytes:
    """What the server sent before it closed the connection (within ``seconds``)."""
    async with asyncio.timeout(seconds):
        return await reader.read()


async def offer(server: ServerProcess, head: bytes, body_bytes: int) -> bytes:
    """Send ``head``, then up to ``body_bytes`` more (stopping once an answer comes, as HTTP
    clients do); what the server answered before it closed."""
    reader, writer = await asyncio.open_connection(*address(server))
    received = bytearray()

    async def read() -> None:
        with contextlib.suppress(ConnectionError):
            while chunk := await reader.read(65536):
                received.extend(chunk)

    reading = asyncio.ensure_future(read())
    writer.write(head)
    chunk = b"a" * 65536
    try:
        for _ in range(body_bytes // len(chunk)):
            if received or reading.done():
                break
            writer.write(chunk)
            await writer.drain()
    except ConnectionError:
        pass  # the server closed: what it answered is in the reader
    async with asyncio.timeout(20):
        await reading
    writer.close()
    return bytes(received)


async def test_a_head_that_never_ends_is_cut_at_the_limit(server: ServerProcess) -> None:
    answer = await offer(server, b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\nx-big: ", 8 << 20)
    assert answer.startswith(b"HTTP/1.1 431"), answer[:100]


async def test_a_body_past_the_limit_is_answered_before_it_ends(server: ServerProcess) -> None:
    size = 20 << 20
    head = (
        b"POST /airlane.v1.Airlane/Info HTTP/1.1\r\nhost: 127.0.0.1\r\nx-grpc-web: 1\r\n"
        b"content-type: application/grpc-web-text\r\ncontent-length: %d\r\n\r\n" % size
    )
    answer = await offer(server, head, size)
    assert answer.startswith(b"HTTP/1.1 200"), answer[:100]
    frame = base64.b64decode(answer.split(b"\r\n\r\n", 1)[1].split(b"\r\n")[1])
    assert b"grpc-status: 8" in frame, frame


@pytest.mark.parametrize(
    "sent",
    [
        b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n",  # a head that stops halfway
        b"POST /v1/streams/x/events HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: 100\r\n"
        b'content-type: application/json\r\n\r\n{"kind": ',  # a body that stops
        b"",  # nothing at all
    ],
)
async def test_a_stalled_client_is_closed_by_its_timer(server: ServerProcess, sent: bytes) -> None:
    reader, writer = await asyncio.open_connection(*address(server))
    writer.write(sent)
    started = time.monotonic()
    await closed_within(reader, 10)
    assert time.monotonic() - started < 5  # 1 s timers, with room for a loaded machine
    writer.close()


async def test_eight_attackers_hold_no_memory_and_service_goes_on(server: ServerProcess) -> None:
    before = rss_mib(server.process.pid)

    async def headers() -> None:
        answer = await offer(server, b"GET / HTTP/1.1\r\nhost: 127.0.0.1\r\nx-big: ", 25 << 20)
        # 431, or closed by the 1 s head timer when the loaded loop read it too late.
        assert answer == b"" or answer.startswith(b"HTTP/1.1 431"), answer[:100]

    async def grpc_web_text() -> None:
        head = (
            b"POST /airlane.v1.Airlane/Info HTTP/1.1\r\nhost: 127.0.0.1\r\nx-grpc-web: 1\r\n"
            b"content-type: application/grpc-web-text\r\ncontent-length: %d\r\n\r\n" % (100 << 20)
        )
        assert (await offer(server, head, 20 << 20)).startswith(b"HTTP/1.1 200")

    async def health() -> None:
        async with httpx.AsyncClient(base_url=server.url, timeout=5) as http:
            for _ in range(20):
                assert (await http.get("/healthz")).status_code == 200
                await asyncio.sleep(0.1)

    await asyncio.gather(*(headers() for _ in range(8)), grpc_web_text(), grpc_web_text(), health())
    assert rss_mib(server.process.pid) - before < RSS_BOUND_MIB


def test_an_idle_keep_alive_connection_is_closed(server: ServerProcess) -> None:
    with socket.create_connection(address(server), timeout=10) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
        answer = b""
        while b"\r\n\r\n" not in answer:
            answer += sock.recv(65536)
        started = time.monotonic()
        while sock.recv(65536):
            pass  # the rest of the answer, then the close
        assert 0.5 < time.monotonic() - started < 5
