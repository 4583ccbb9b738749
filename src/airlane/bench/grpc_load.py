"""The gRPC load client: ``Generate`` calls (grpcio, asyncio) multiplexed on a few channels.

As gRPC clients do, streams share HTTP/2 connections: one channel per `STREAMS_PER_CHANNEL`
streams (opening a channel per stream costs the client tens of milliseconds each).

Each stream asks for the seed's benchmark stream (``GenerateRequest.loadtest``); every
``message`` event carries its chunk's JSON in ``payload_json`` (``{"seq":N,"ts":T,...}``, the
same bytes as a ``/v1/loadtest/ws`` message), recorded into the `StreamTally`; the call ends
after the stream's terminal event. Unlike the SSE, WebSocket and AIRC clients this one is a
general library (grpcio), so its own CPU per chunk is higher: read the client CPU row.
"""

from __future__ import annotations

import asyncio
import time

import grpc
from grpc import aio

from airlane.bench.chunk import LoadProtocolError, read_seq_ts
from airlane.bench.config import BenchConfig
from airlane.bench.pb_events import stream_failure
from airlane.bench.tally import StreamTally
from airlane.v1 import events_pb2, service_pb2, service_pb2_grpc

__all__ = ["STREAMS_PER_CHANNEL", "loadtest_generate", "run_grpc_streams"]

STREAMS_PER_CHANNEL = 100
"""Streams multiplexed on one channel (one HTTP/2 connection)."""


def loadtest_generate(config: BenchConfig) -> service_pb2.GenerateRequest:
    """The ``Generate`` request for ``config``'s workload."""
    return service_pb2.GenerateRequest(
        loadtest=service_pb2.LoadTest(
            chunks=config.chunks, mode=config.mode, interval_ms=config.interval_ms
        )
    )


async def run_grpc_streams(
    target: str,
    request: service_pb2.GenerateRequest,
    tallies: list[StreamTally],
    deadline: float,
) -> None:
    """Read one stream per tally from the gRPC listener at ``target`` (``host:port``); errors
    go into each ``tally.error``. ``deadline`` is on the loop's clock."""
    channels = [aio.insecure_channel(target) for _ in range(0, len(tallies), STREAMS_PER_CHANNEL)]
    try:
        stubs = [service_pb2_grpc.AirlaneStub(c) for c in channels]  # type: ignore[no-untyped-call]
        await asyncio.gather(
            *(
                _run_stream(stubs[i // STREAMS_PER_CHANNEL], request, tally, deadline)
                for i, tally in enumerate(tallies)
            )
        )
    finally:
        await asyncio.gather(*(channel.close() for channel in channels))


async def _run_stream(
    stub: service_pb2_grpc.AirlaneStub,
    request: service_pb2.GenerateRequest,
    tally: StreamTally,
    deadline: float,
) -> None:
    tally.start_ns = time.monotonic_ns()
    timeout = deadline - asyncio.get_running_loop().time()
    try:
        call = stub.Generate(request, timeout=max(timeout, 0.001))
        async for item in call:
            event = item.event
            if event.WhichOneof("body") != "payload_json":
                if event.kind == events_pb2.KIND_ERROR:
                    raise stream_failure(event)
                continue
            data = event.payload_json.encode()
            seq, ts = read_seq_ts(data)
            tally.chunk(seq, ts, len(data), time.monotonic_ns())
        tally.finished = True
    except aio.AioRpcError as exc:
        if exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
            tally.error = "timed out"
        else:
            tally.error = f"gRPC {exc.code().name}: {exc.details()}"
    except LoadProtocolError as exc:
        tally.error = str(exc)
