"""The WebSocket load client: one lean asyncio ``Protocol`` per stream, no WebSocket library.

A general client (``websockets``) spends more CPU per message than the gateway spends sending
it: a frame object, a queue, a task wake-up and UTF-8 validation per chunk. Here the event loop
hands raw bytes to a `LoadConnection` (handshake, then frames, sans I/O), which records chunks
straight into a `StreamTally`; the protocol only writes what the connection says to write.
Each text message of ``/v1/loadtest/ws`` is one chunk; the stream ends when the server closes
the WebSocket, cleanly only with code 1000.
"""

from __future__ import annotations

import asyncio
import time
from typing import cast
from urllib.parse import urlsplit

from airlane.bench.chunk import LoadProtocolError
from airlane.bench.tally import StreamTally
from airlane.bench.ws_connection import ConnectionState, LoadConnection
from airlane.bench.ws_frames import CLOSE_NORMAL, DEFAULT_MAX_MESSAGE_BYTES

__all__ = ["MAX_MESSAGE_BYTES", "run_ws_stream"]

MAX_MESSAGE_BYTES = DEFAULT_MAX_MESSAGE_BYTES
"""A chunk is ~1.2 KB; a larger message is refused (close 1009)."""


class _WsLoadProtocol(asyncio.Protocol):
    """Feeds one connection's bytes to a `LoadConnection`; resolves ``finished`` at the end."""

    __slots__ = ("connection", "finished", "transport")

    def __init__(self, connection: LoadConnection) -> None:
        self.connection = connection
        self.finished: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)
        self.transport.write(self.connection.data_to_send())

    def data_received(self, data: bytes) -> None:
        connection = self.connection
        try:
            connection.receive_data(data, time.monotonic_ns())
        except LoadProtocolError as exc:
            self._write(connection.failure_frame(exc))
            self._end(exc)
            return
        if out := connection.data_to_send():
            self._write(out)
        if connection.state is ConnectionState.CLOSED:
            self._end(_close_error(connection.close))

    def pause_writing(self) -> None:
        # Only pongs are written after the handshake; a server that pings faster than the
        # socket drains is not read from until the pongs are out (bounded write buffer).
        assert self.transport is not None
        self.transport.pause_reading()

    def resume_writing(self) -> None:
        assert self.transport is not None
        self.transport.resume_reading()

    def eof_received(self) -> bool:
        self._end(None)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._end(exc)

    def _write(self, data: bytes) -> None:
        if data and self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def _end(self, error: Exception | None) -> None:
        """Resolve ``finished`` (first call wins) and close the connection."""
        if error is None and self.connection.state is not ConnectionState.CLOSED:
            error = LoadProtocolError("connection closed without a close frame (1006)")
        if not self.finished.done():
            if error is None:
                self.finished.set_result(None)
            else:
                self.finished.set_exception(error)
        if self.transport is not None:
            self.transport.close()


def _close_error(close: tuple[int, str] | None) -> LoadProtocolError | None:
    """None for a clean close (code 1000), else the error that says how it closed."""
    if close is not None and close[0] == CLOSE_NORMAL:
        return None
    code, reason = close or (0, "")
    return LoadProtocolError(f"the server closed the WebSocket with code {code}: {reason!r}")


async def run_ws_stream(url: str, tally: StreamTally, deadline: float) -> None:
    """Read one load-test WebSocket stream (``ws://host:port/path?query``) into ``tally``;
    never raises (failures go into ``tally.error``). ``deadline`` is on the loop's clock."""
    loop = asyncio.get_running_loop()
    tally.start_ns = time.monotonic_ns()
    protocol: _WsLoadProtocol | None = None
    try:
        host, port, authority, target = _split_ws_url(url)
        connection = LoadConnection(tally, authority, target, max_message_bytes=MAX_MESSAGE_BYTES)
        protocol = _WsLoadProtocol(connection)
        async with asyncio.timeout_at(deadline):
            await loop.create_connection(lambda: protocol, host, port)
            await protocol.finished
        tally.finished = True
    except TimeoutError:
        tally.error = "timed out"
    except (OSError, ValueError, LoadProtocolError) as exc:
        tally.error = f"{type(exc).__name__}: {exc}"
    finally:
        if protocol is not None and protocol.transport is not None:
            protocol.transport.close()


def _split_ws_url(url: str) -> tuple[str, int, str, str]:
    """``(host, port, authority, target)`` of a ``ws://`` URL.

    Raises:
        ValueError: not a ``ws://`` URL with a host (``wss://`` is not supported: a load test
            of TLS would measure the cipher).
    """
    parts = urlsplit(url)
    if parts.scheme != "ws" or not parts.hostname:
        raise ValueError(f"expected a ws:// URL, not {url!r}")
    port = parts.port or 80
    host = parts.hostname
    authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return host, port, authority, target
