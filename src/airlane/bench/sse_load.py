"""The SSE load client: one lean asyncio ``Protocol`` per stream, no HTTP library.

httpx (or any general client) spends more CPU per chunk than the gateway does to send it, so
the load would measure the client. Here the event loop hands raw bytes to
`LoadResponseParser`, which records chunks straight into a `StreamTally`; the protocol only
sends the request and closes the connection when the response is complete.
"""

from __future__ import annotations

import asyncio
import time
from typing import cast

from airlane.bench.chunk import LoadProtocolError
from airlane.bench.sse_parser import LoadResponseParser
from airlane.bench.tally import StreamTally

__all__ = ["load_request", "run_sse_stream"]


def load_request(host: str, port: int, path: str) -> bytes:
    """The GET request for ``path`` (path and query), closing the connection after it."""
    authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return (
        f"GET {path} HTTP/1.1\r\nHost: {authority}\r\nAccept: text/event-stream\r\n"
        "User-Agent: airlane-bench\r\nConnection: close\r\n\r\n"
    ).encode("ascii")


class _LoadProtocol(asyncio.Protocol):
    """Feeds one connection's bytes to a parser; resolves ``finished`` when it ends."""

    __slots__ = ("finished", "parser", "request", "transport")

    def __init__(self, request: bytes, parser: LoadResponseParser) -> None:
        self.request = request
        self.parser = parser
        self.finished: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)
        self.transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed(data, time.monotonic_ns())
        except LoadProtocolError as exc:
            self._end(exc)
            return
        if self.parser.done:
            self._end(None)

    def eof_received(self) -> bool:
        try:
            self.parser.eof()
        except LoadProtocolError as exc:
            self._end(exc)
        else:
            self._end(None)
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is None and not self.parser.done:
            exc = LoadProtocolError("connection closed before the response ended")
        self._end(exc)

    def _end(self, error: Exception | None) -> None:
        if not self.finished.done():
            if error is None:
                self.finished.set_result(None)
            else:
                self.finished.set_exception(error)
        if self.transport is not None:
            self.transport.close()


async def run_sse_stream(
    host: str, port: int, path: str, tally: StreamTally, deadline: float
) -> None:
    """Read one load-test SSE response into ``tally``; never raises (failures go into
    ``tally.error``). ``deadline`` is on the loop's clock."""
    loop = asyncio.get_running_loop()
    tally.start_ns = time.monotonic_ns()
    protocol = _LoadProtocol(load_request(host, port, path), LoadResponseParser(tally))
    try:
        async with asyncio.timeout_at(deadline):
            await loop.create_connection(lambda: protocol, host, port)
            await protocol.finished
        tally.finished = True
    except TimeoutError:
        tally.error = "timed out"
    except (OSError, LoadProtocolError) as exc:
        tally.error = f"{type(exc).__name__}: {exc}"
    finally:
        if protocol.transport is not None:
            protocol.transport.close()
