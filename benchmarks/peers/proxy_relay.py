"""Proxy mode's floor: a TCP relay that copies bytes both ways and understands none of them.

Each client connection gets its own connection to the upstream, and whatever either side
sends is written to the other as it arrives: no HTTP parse, no SSE split, no JSON, no
accounting. No proxy written in Python on this event loop can do less per chunk (one read
and one write), so `benchmarks/proxy.py --via relay` measures what the machine's loop and
sockets cost at a given load before any proxy does any work. Not a usable proxy: it serves
whatever host it was started for, whatever the client asks.

Flow control both ways: when one side's write buffer passes 64 KiB, the other side stops
being read until it drains. Bytes a client sends before its upstream connection is up are
held (at most 1 MiB; more closes the client).

    python benchmarks/peers/proxy_relay.py --port 0 --upstream http://127.0.0.1:8000/v1
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import cast
from urllib.parse import urlsplit

import uvloop
from loadtest import announce, listening_socket, parse_args

HIGH_WATER = 64 * 1024
"""Write-buffer bytes past which the opposite side is paused."""
MAX_EARLY_BYTES = 1 << 20
"""What a client may send before its upstream connection is up."""


class _Side(asyncio.Protocol):
    """One end of a relayed pair; what it receives goes to its peer."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: _Side | None = None
        self.early = bytearray()  # the client's bytes before the upstream connected
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not subclasses of asyncio.Transport, only alike.
        self.transport = cast(asyncio.Transport, transport)
        self.transport.set_write_buffer_limits(high=HIGH_WATER)

    def data_received(self, data: bytes) -> None:
        peer = self.peer
        if peer is not None and peer.transport is not None:
            peer.transport.write(data)
            return
        self.early += data
        if len(self.early) > MAX_EARLY_BYTES and self.transport is not None:
            self.transport.close()

    def eof_received(self) -> bool:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()  # writes what it holds, then closes
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()

    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()


class Relay:
    """Accepts clients and pairs each with a fresh upstream connection; owns the connects."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.connecting: set[asyncio.Task[None]] = set()

    def client(self) -> _Side:
        """The protocol of one accepted client; starts its upstream connection."""
        side = _Side()
        task = asyncio.get_running_loop().create_task(self._pair(side))
        self.connecting.add(task)
        task.add_done_callback(self.connecting.discard)
        return side

    async def _pair(self, client: _Side) -> None:
        loop = asyncio.get_running_loop()
        try:
            _, upstream = await loop.create_connection(_Side, self.host, self.port)
        except OSError:
            if client.transport is not None:
                client.transport.close()
            return
        assert upstream.transport is not None
        if client.closed:
            upstream.transport.close()
            return
        client.peer, upstream.peer = upstream, client
        if client.early:
            upstream.transport.write(bytes(client.early))
            client.early.clear()


async def serve(upstream_url: str, host: str, port: int) -> None:
    """Relay until cancelled."""
    parts = urlsplit(upstream_url)
    assert parts.hostname is not None and parts.port is not None, "--upstream needs host:port"
    relay = Relay(parts.hostname, parts.port)
    sock = listening_socket(host, port)
    server = await asyncio.get_running_loop().create_server(relay.client, sock=sock)
    announce(sock)
    async with server:
        await server.serve_forever()


def main() -> None:
    """Serve on ``--host``/``--port`` until interrupted."""
    args = parse_args("A TCP relay: proxy mode's floor.", upstream=True)
    with contextlib.suppress(KeyboardInterrupt):
        uvloop.run(serve(args.upstream, args.host, args.port))


if __name__ == "__main__":
    main()
