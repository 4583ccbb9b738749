"""A response whose reader stops acknowledging: the gateway's writer waits at the bound.

docs/http3.md promises that a response stream holding ``max_buffered_bytes`` the client has not
acknowledged waits until half of it is, so a stalled reader costs bounded memory and slows its
own stream only. Here a real `Http3Server` and Airlane's `H3Client` talk through a UDP hop
that can stop passing the client's datagrams: the client still receives, but none of its
acknowledgements reach the gateway, as with a phone whose uplink died. While they are held the
application's ``send`` stops returning near the bound; another client downloads meanwhile;
once they pass again the stalled response completes, every byte in order.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from airlane.client.h3 import H3Client
from airlane.transports.http.h3.protocol import H3Protocol, _unacknowledged
from airlane.transports.http.h3.server import Http3Server

pytestmark = pytest.mark.timeout(60)

CHUNK = 16 << 10
BODY = bytes(range(256)) * (32 << 10)  # 8 MiB: far past any bound the gateway could pick
FIRST = b"<"  # what goes out with the head, before the hold begins


class _Hop(asyncio.DatagramProtocol):
    """One side of the UDP hop: hands what it receives to ``forward``."""

    def __init__(self, forward: Callable[[bytes, Any], None]) -> None:
        self.forward = forward

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.forward(data, addr)


class _Relay:
    """Client <-> relay <-> server; while `holding`, the client's datagrams are dropped."""

    def __init__(self) -> None:
        self.holding = False
        self.dropped = 0
        self.address: tuple[str, int] = ("", 0)
        self._client: Any = None
        self._front: Any = None
        self._back: Any = None

    async def start(self, server: tuple[str, int]) -> None:
        loop = asyncio.get_running_loop()
        self._front, _ = await loop.create_datagram_endpoint(
            lambda: _Hop(self._from_client), local_addr=("127.0.0.1", 0)
        )
        self._back, _ = await loop.create_datagram_endpoint(
            lambda: _Hop(self._from_server), remote_addr=server
        )
        self.address = self._front.get_extra_info("sockname")[:2]

    def _from_client(self, data: bytes, addr: Any) -> None:
        self._client = addr
        if self.holding:
            self.dropped += 1
        else:
            self._back.sendto(data)

    def _from_server(self, data: bytes, addr: Any) -> None:
        if self._client is not None:
            self._front.sendto(data, self._client)

    def close(self) -> None:
        for transport in (self._front, self._back):
            if transport is not None:
                transport.close()


class _Blob:
    """The application: per path, the head with `FIRST`, then (once `go` is set) `BODY` in
    `CHUNK` sends, counting what ``send`` has taken."""

    def __init__(self) -> None:
        self.go = asyncio.Event()
        self.written: dict[str, int] = {}

    async def __call__(
        self, scope: dict[str, Any], receive: Callable[[], Awaitable[Any]], send: Any
    ) -> None:
        if scope["type"] != "http":
            return
        path = scope["path"]
        self.written[path] = 0
        # The stalled reader's body, far past any bound; others get 1 MiB (quick, so that
        # the stalled connection is far from its idle timeout on a slow machine).
        body = BODY if path == "/stalled" else BODY[: 1 << 20]
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": FIRST, "more_body": True})
        await self.go.wait()
        for start in range(0, len(body), CHUNK):
            await send({"type": "http.response.body", "body": body[start : start + CHUNK],
                        "more_body": True})  # fmt: skip
            self.written[path] += CHUNK
        await send({"type": "http.response.body", "body": b""})


@pytest.fixture
async def gateway() -> AsyncIterator[tuple[Http3Server, _Blob]]:
    app = _Blob()
    server = Http3Server(app)
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    await server.start(sock)
    try:
        yield server, app
    finally:
        await server.aclose()


async def _download(client: H3Client, path: str) -> bytes:
    response = await client.request("GET", path)
    assert response.status == 200
    return b"".join([chunk async for chunk in response.chunks()])


async def _settled(read: Callable[[], int]) -> int:
    """What ``read`` returns once it has not changed for half a second (at most 10 s)."""
    last, still = -1, 0
    for _ in range(100):
        now = read()
        still = still + 1 if now == last else 0
        if still >= 5:
            return now
        last = now
        await asyncio.sleep(0.1)
    raise AssertionError(f"still changing after 10 s: {read()}")


async def test_a_reader_whose_acknowledgements_stop_holds_its_writer_at_the_bound(
    gateway: tuple[Http3Server, _Blob],
) -> None:
    server, app = gateway
    assert server.address is not None
    relay = _Relay()
    await relay.start(server.address)
    try:
        stalled = await H3Client.connect(*relay.address, verify=False)
        async with stalled:
            response = await stalled.request("GET", "/stalled")
            assert response.status == 200
            reading = asyncio.create_task(_read_all(response))
            relay.holding = True
            app.go.set()

            written = await _settled(lambda: app.written["/stalled"])
            (protocol,) = [c for c in server.connections if isinstance(c, H3Protocol)]
            stream_id = response.stream_id
            limit = protocol.buffer_limit()
            held = _unacknowledged(protocol, stream_id)
            # The writer waits once the stream holds more than the bound unacknowledged: at
            # most one send past it was taken, and nothing of the 8 MiB beyond.
            assert limit <= held <= limit + CHUNK + len(FIRST), (limit, held)
            assert written <= limit + CHUNK, (limit, written)
            assert relay.dropped > 0

            # The gateway goes on serving everyone else meanwhile.
            async with await H3Client.connect(*server.address, verify=False) as other:
                other_body = await asyncio.wait_for(_download(other, "/other"), 20)
                assert other_body == FIRST + BODY[: 1 << 20]
            assert app.written["/stalled"] == written

            relay.holding = False
            assert await asyncio.wait_for(reading, 30) == FIRST + BODY
            assert app.written["/stalled"] == len(BODY)
    finally:
        relay.close()


async def _read_all(response: Any) -> bytes:
    return b"".join([chunk async for chunk in response.chunks()])
