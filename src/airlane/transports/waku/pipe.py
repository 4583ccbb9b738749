"""Byte pipes under a libp2p connection: a WebSocket (what js-waku dials) or a TCP stream
(node to node). Both read chunks and write bytes; neither knows what they carry.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Protocol

from websockets.asyncio.client import connect
from websockets.asyncio.connection import Connection as WebSocket
from websockets.exceptions import ConnectionClosed

from airlane.wire.libp2p import Multiaddr

__all__ = ["MAX_FRAME", "Pipe", "TcpPipe", "WebSocketPipe", "open_pipe"]

READ_CHUNK = 64 * 1024
MAX_FRAME = 2 << 20
"""The largest WebSocket message taken (a Noise message is at most 64 KiB; js-libp2p may
join several)."""


class Pipe(Protocol):
    """What a connection needs of its transport."""

    remote: tuple[str, int]
    """The peer's address and port, as this side sees them."""
    local: tuple[str, int]
    """This side's address and port."""
    websocket: bool
    """Whether it is a WebSocket (for the address identify reports)."""

    async def read(self) -> bytes:
        """The next bytes; ``b""`` once the peer closed."""
        ...

    async def write(self, data: bytes) -> None:
        """Send ``data`` (waits while the socket's buffer is full)."""
        ...

    async def close(self) -> None:
        """Close; idempotent."""
        ...


def _address(value: object) -> tuple[str, int]:
    if isinstance(value, tuple) and len(value) >= 2:
        return str(value[0]), int(value[1])
    return ("0.0.0.0", 0)


class WebSocketPipe:
    """A WebSocket's binary messages as a byte stream."""

    websocket = True

    def __init__(self, ws: WebSocket) -> None:
        self._ws = ws
        self.remote = _address(ws.remote_address)
        self.local = _address(ws.local_address)

    async def read(self) -> bytes:
        try:
            message = await self._ws.recv()
        except ConnectionClosed:
            return b""
        if isinstance(message, str):  # libp2p sends binary messages only
            raise ConnectionError("a text WebSocket message on a libp2p connection")
        return message

    async def write(self, data: bytes) -> None:
        try:
            await self._ws.send(data)
        except ConnectionClosed as exc:
            raise ConnectionError("the WebSocket closed") from exc

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self._ws.close()


class TcpPipe:
    """An asyncio TCP stream."""

    websocket = False

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self.remote = _address(writer.get_extra_info("peername"))
        self.local = _address(writer.get_extra_info("sockname"))

    async def read(self) -> bytes:
        try:
            return await self._reader.read(READ_CHUNK)
        except ConnectionError:
            return b""

    async def write(self, data: bytes) -> None:
        self._writer.write(data)
        await self._writer.drain()

    async def close(self) -> None:
        if self._writer.is_closing():
            return
        self._writer.close()
        with contextlib.suppress(Exception):
            await self._writer.wait_closed()


async def open_pipe(address: Multiaddr) -> Pipe:
    """Connect to ``address``: a WebSocket for ``.../ws``, else TCP.

    Raises:
        OSError: it cannot be reached.
    """
    host = address.value("ip4") or address.value("ip6") or address.value("dns4") or ""
    port = int(address.value("tcp") or 0)
    if address.value("ws") is not None:
        shown = f"[{host}]" if ":" in host else host
        ws = await connect(f"ws://{shown}:{port}", max_size=MAX_FRAME, compression=None)
        return WebSocketPipe(ws)
    reader, writer = await asyncio.open_connection(host, port)
    return TcpPipe(reader, writer)
