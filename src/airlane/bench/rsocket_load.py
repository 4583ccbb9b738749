"""The RSocket load client: one asyncio ``Protocol`` per stream, over the RSocket/TCP listener.

Per stream: connect, send SETUP (composite metadata, JSON data) and a REQUEST_STREAM on the
route ``loadtest.stream`` with the workload as its data, asking for `WINDOW` payloads; each
payload is one chunk's JSON (the same bytes as a ``/v1/loadtest/ws`` text message), and the
client grants half a window more (``REQUEST_N``) each time half a window has arrived, as a
reactive-streams client with a prefetch does. The stream's completion ends it; an ERROR (or
the connection closing first) is the stream's error.

PAYLOAD frames without metadata (every chunk) are read in place, by their 9-byte head (length,
stream id, type and flags), and every other frame with Airlane's own codec
(`airlane.wire.rsocket.decode_frame`): the client must cost less than the server's side, or the
numbers would measure the client.
"""

from __future__ import annotations

import asyncio
import time
from typing import cast

import orjson

from airlane.bench.chunk import LoadProtocolError, read_seq_ts
from airlane.bench.config import BenchConfig
from airlane.bench.tally import StreamTally
from airlane.wire.rsocket import (
    Frame,
    FrameType,
    RSocketProtocolError,
    decode_frame,
    encode_composite,
    encode_routing,
    frame_with_length,
)
from airlane.wire.rsocket.metadata import COMPOSITE, ROUTING

__all__ = ["LOADTEST_ROUTE", "WINDOW", "loadtest_request_data", "run_rsocket_stream"]

LOADTEST_ROUTE = "loadtest.stream"
WINDOW = 256
"""Payloads asked for at first; half of it again after each half received."""
_FLAG_METADATA, _FLAG_NEXT, _FLAG_COMPLETE = 0x100, 0x20, 0x40
_PAYLOAD = int(FrameType.PAYLOAD)


def loadtest_request_data(config: BenchConfig) -> bytes:
    """The REQUEST_STREAM's data for ``config``'s workload."""
    body = {"chunks": config.chunks, "mode": config.mode, "interval_ms": config.interval_ms}
    return orjson.dumps(body)


def _opening(data: bytes) -> bytes:
    setup = Frame(
        FrameType.SETUP, keepalive_ms=30_000, lifetime_ms=120_000, metadata_mime=COMPOSITE,
        data_mime="application/json",
    )  # fmt: skip
    metadata = encode_composite([(ROUTING, encode_routing([LOADTEST_ROUTE]))])
    request = Frame(FrameType.REQUEST_STREAM, 1, metadata=metadata, data=data, request_n=WINDOW)
    return frame_with_length(setup) + frame_with_length(request)


class _RSocketLoadProtocol(asyncio.Protocol):
    def __init__(self, data: bytes, tally: StreamTally) -> None:
        self._opening = _opening(data)
        self._tally = tally
        self._buffer = bytearray()
        self._transport: asyncio.Transport | None = None
        self._unrequested = 0  # payloads received since the last REQUEST_N
        self.finished: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        self._transport.write(self._opening)

    def data_received(self, data: bytes) -> None:
        if self.finished.done():
            return
        buffer = self._buffer
        buffer += data
        now = time.monotonic_ns()
        tally = self._tally
        at, size = 0, len(buffer)
        while size - at >= 9:
            end = at + 3 + int.from_bytes(buffer[at : at + 3], "big")
            if end > size:
                break
            kind_flags = int.from_bytes(buffer[at + 7 : at + 9], "big")
            if kind_flags >> 10 == _PAYLOAD and not kind_flags & _FLAG_METADATA:
                if kind_flags & _FLAG_NEXT:
                    seq, ts = read_seq_ts(buffer, at + 9, end)
                    tally.chunk(seq, ts, end - at - 9, now)
                    self._unrequested += 1
                if kind_flags & _FLAG_COMPLETE:
                    self._end(None)
                    return
            else:
                try:
                    frame = decode_frame(bytes(buffer[at + 3 : end]))
                except RSocketProtocolError as exc:
                    self._end(LoadProtocolError(f"bad frame from the server: {exc}"))
                    return
                if frame.type is FrameType.ERROR:
                    message = frame.data.decode("utf-8", "replace")
                    self._end(LoadProtocolError(f"ERROR {frame.error_code:#x}: {message}"))
                    return
                if frame.type is FrameType.PAYLOAD and frame.has(_FLAG_COMPLETE):
                    self._end(None)
                    return
            at = end
        del buffer[:at]
        if self._unrequested >= WINDOW // 2 and self._transport is not None:
            grant = Frame(FrameType.REQUEST_N, 1, request_n=self._unrequested)
            self._transport.write(frame_with_length(grant))
            self._unrequested = 0

    def connection_lost(self, exc: Exception | None) -> None:
        self._end(LoadProtocolError("the connection closed before the stream completed"))

    def _end(self, error: Exception | None) -> None:
        if self.finished.done():
            return
        if error is None:
            self.finished.set_result(None)
        else:
            self.finished.set_exception(error)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()


async def run_rsocket_stream(
    host: str, port: int, data: bytes, tally: StreamTally, deadline: float
) -> None:
    """Read one load-test stream over the RSocket/TCP listener at ``host:port`` into
    ``tally``. Never raises (failures go into ``tally.error``). ``deadline`` is on the loop's
    clock."""
    loop = asyncio.get_running_loop()
    tally.start_ns = time.monotonic_ns()
    protocol: _RSocketLoadProtocol | None = None
    try:
        protocol = _RSocketLoadProtocol(data, tally)
        async with asyncio.timeout_at(deadline):
            await loop.create_connection(lambda: protocol, host, port)
            await protocol.finished
        tally.finished = True
    except TimeoutError:
        tally.error = "timed out"
    except (OSError, ValueError, LoadProtocolError) as exc:
        tally.error = f"{type(exc).__name__}: {exc}"
    finally:
        if protocol is not None:
            protocol.close()
