"""The gRPC-Web load client: one lean HTTP/1.1 POST per stream, as a browser's fetch() sends.

The request is a ``Generate`` with ``GenerateRequest.loadtest`` in one 5-byte-prefixed
gRPC-Web frame; the response (chunked) is parsed by the SSE client's `LoadResponseParser`
with a `GrpcWebFrameReader` for its body: message frames carry ``StreamEvent``s whose
``payload_json`` is a chunk (recorded into the `StreamTally`), an ``error`` event is the
stream's failure (`airlane.bench.pb_events.stream_failure`), the trailers frame (flag 0x80) must say
``grpc-status: 0``.
"""

from __future__ import annotations

import asyncio
import struct
import time

from airlane.bench.chunk import LoadProtocolError, read_seq_ts
from airlane.bench.pb_events import stream_failure
from airlane.bench.sse_load import _LoadProtocol
from airlane.bench.sse_parser import LoadResponseParser
from airlane.bench.tally import StreamTally
from airlane.v1 import events_pb2, service_pb2

__all__ = ["GrpcWebFrameReader", "grpc_web_request", "run_grpc_web_stream"]

PATH = "/airlane.v1.Airlane/Generate"
_PREFIX = struct.Struct(">BI")
_MAX_FRAME = 1 << 20


def grpc_web_request(host: str, port: int, request: service_pb2.GenerateRequest) -> bytes:
    """The POST of ``request`` as one gRPC-Web frame, closing the connection after it."""
    message: bytes = request.SerializeToString()
    body = _PREFIX.pack(0, len(message)) + message
    authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    head = (
        f"POST {PATH} HTTP/1.1\r\nHost: {authority}\r\n"
        "Content-Type: application/grpc-web+proto\r\nX-Grpc-Web: 1\r\n"
        f"User-Agent: airlane-bench\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


class GrpcWebFrameReader:
    """gRPC-Web frames in, chunks into the tally; raises on a failed status."""

    __slots__ = ("_buffer", "_tally", "trailers")

    def __init__(self, tally: StreamTally) -> None:
        self._tally = tally
        self._buffer = b""
        self.trailers: bytes | None = None
        """The trailers frame, once it came."""

    def feed(self, pieces: list[bytes | memoryview], now_ns: int) -> None:
        data = self._buffer + b"".join(pieces)
        offset, end = 0, len(data)
        tally = self._tally
        while end - offset >= 5:
            flag, length = _PREFIX.unpack_from(data, offset)
            if length > _MAX_FRAME:
                raise LoadProtocolError(f"a gRPC-Web frame of {length} bytes")
            if end - offset - 5 < length:
                break
            frame = data[offset + 5 : offset + 5 + length]
            offset += 5 + length
            if flag & 0x80:
                self.trailers = frame
                if b"grpc-status: 0\r\n" not in frame:
                    raise LoadProtocolError(f"the call failed: {frame[:200]!r}")
                continue
            event = events_pb2.StreamEvent.FromString(frame).event
            if event.WhichOneof("body") == "payload_json":
                chunk = event.payload_json.encode()
                seq, ts = read_seq_ts(chunk)
                tally.chunk(seq, ts, len(chunk), now_ns)
            elif event.kind == events_pb2.KIND_ERROR:
                raise stream_failure(event)
        self._buffer = data[offset:]


async def run_grpc_web_stream(
    host: str, port: int, request: service_pb2.GenerateRequest, tally: StreamTally, deadline: float
) -> None:
    """Read one load-test stream over gRPC-Web into ``tally``; never raises (failures go into
    ``tally.error``). ``deadline`` is on the loop's clock."""
    loop = asyncio.get_running_loop()
    tally.start_ns = time.monotonic_ns()
    reader = GrpcWebFrameReader(tally)
    parser = LoadResponseParser(tally, body=reader)
    protocol = _LoadProtocol(grpc_web_request(host, port, request), parser)
    try:
        async with asyncio.timeout_at(deadline):
            await loop.create_connection(lambda: protocol, host, port)
            await protocol.finished
        if reader.trailers is None:
            raise LoadProtocolError("the response ended without gRPC-Web trailers")
        tally.finished = True
    except TimeoutError:
        tally.error = "timed out"
    except (OSError, LoadProtocolError) as exc:
        tally.error = f"{type(exc).__name__}: {exc}"
    finally:
        if protocol.transport is not None:
            protocol.transport.close()
