"""Running a benchmark: each transport in turn, all streams at once, bounded in time.

`run_bench` is what ``airlane bench`` calls once the gateway is up. For each transport it
starts ``config.streams`` load-test requests at once (``sse``, ``ws``: ``/v1/loadtest/*``;
``airc``, ``airc-ws``: a ``GEN_REQ`` for the same stream over AIRC/TCP or AIRC/WebSocket),
waits for all of them (each bounded by the run's deadline), measures CPU use around the run,
and folds the tallies into a `TransportResult`. Nothing it starts outlives it.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from array import array
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from typing import Any, TypeVar

import httpx

from airlane.bench.airc_load import loadtest_request, run_airc_stream
from airlane.bench.config import BenchConfig, loopback_address
from airlane.bench.cpu import CpuSampler
from airlane.bench.grpc_load import loadtest_generate, run_grpc_streams
from airlane.bench.grpc_web_load import run_grpc_web_stream
from airlane.bench.rsocket_load import loadtest_request_data, run_rsocket_stream
from airlane.bench.speed import python_op_ns
from airlane.bench.sse_load import run_sse_stream
from airlane.bench.stats import TransportResult, summarize
from airlane.bench.tally import StreamTally, lag_sampling_stride
from airlane.bench.ws_load import run_ws_stream
from airlane.server.fdtable import DEFAULT_RESERVED_FDS, reserve_fd_table

__all__ = [
    "PROGRESS_INTERVAL_S",
    "Progress",
    "gateway_pid",
    "run_bench",
    "run_on_fast_loop",
    "run_transport",
]

T = TypeVar("T")

PROGRESS_INTERVAL_S = 0.2
"""How often the progress callback is told the chunk count."""

Progress = Callable[[str, int, int], None]
"""``progress(transport, chunks received, chunks expected)``."""

SETTLE_S = 0.5
"""Pause between transports, so that one run's teardown does not load the next."""


def gateway_pid(url: str, timeout_s: float = 5.0) -> int | None:
    """The gateway's process id from ``GET /healthz`` (None if it does not say)."""
    try:
        response = httpx.get(url.rstrip("/") + "/healthz", timeout=timeout_s, trust_env=False)
        pid = response.json().get("pid")
    except (httpx.HTTPError, ValueError, AttributeError):
        return None
    return pid if isinstance(pid, int) else None


async def run_bench(
    config: BenchConfig,
    url: str,
    *,
    server_pid: int | None = None,
    progress: Progress | None = None,
    airc: tuple[str, int] | None = None,
    grpc: str | None = None,
    rsocket: tuple[str, int] | None = None,
) -> list[TransportResult]:
    """Run ``config`` against the gateway at ``url`` (loopback only), transport by transport;
    ``airc`` is its AIRC/TCP listener (default: the HTTP port + 1, the gateway's default),
    ``grpc`` its gRPC listener (``host:port``; default: the HTTP port + 2), ``rsocket`` its
    RSocket/TCP listener (default: the HTTP port + 3)."""
    results = []
    for index, transport in enumerate(config.transports):
        if index:
            await asyncio.sleep(SETTLE_S)
        results.append(
            await run_transport(
                config, url, transport, server_pid, progress, airc=airc, grpc=grpc, rsocket=rsocket
            )
        )
    return results


async def run_transport(
    config: BenchConfig,
    url: str,
    transport: str,
    server_pid: int | None = None,
    progress: Progress | None = None,
    *,
    airc: tuple[str, int] | None = None,
    grpc: str | None = None,
    rsocket: tuple[str, int] | None = None,
) -> TransportResult:
    """One transport's run; ``airc``, ``grpc`` and ``rsocket`` as for `run_bench`."""
    host, port = loopback_address(url)
    lags: array[int] = array("q")
    stride = lag_sampling_stride(config.expected_chunks)
    tallies = [StreamTally(lags, stride) for _ in range(config.streams)]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + config.timeout_s
    path = f"/v1/loadtest/{transport}?{config.query}"
    authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    # The machine's speed now (tens of ms, before the clock starts): runs from different
    # hours compare only at a similar speed.
    speed_ns = python_op_ns()
    async with CpuSampler(server_pid) as cpu, _reporting(transport, config, tallies, progress):
        started = time.monotonic_ns()
        if transport == "sse":
            runs = [run_sse_stream(host, port, path, t, deadline) for t in tallies]
        elif transport == "ws":
            runs = [run_ws_stream(f"ws://{authority}{path}", t, deadline) for t in tallies]
        elif transport == "airc":
            airc_host, airc_port = airc or (host, port + 1)
            request = loadtest_request(config)
            runs = [run_airc_stream(airc_host, airc_port, request, t, deadline) for t in tallies]
        elif transport == "airc-ws":
            request = loadtest_request(config)
            runs = [
                run_airc_stream(host, port, request, t, deadline, websocket=True) for t in tallies
            ]
        elif transport == "grpc":
            target = grpc or f"{authority.rpartition(':')[0]}:{port + 2}"
            generate = loadtest_generate(config)
            runs = [run_grpc_streams(target, generate, tallies, deadline)]
        elif transport == "rsocket":
            rsocket_host, rsocket_port = rsocket or (host, port + 3)
            data = loadtest_request_data(config)
            runs = [
                run_rsocket_stream(rsocket_host, rsocket_port, data, t, deadline) for t in tallies
            ]
        elif transport == "grpc-web":
            generate = loadtest_generate(config)
            runs = [run_grpc_web_stream(host, port, generate, t, deadline) for t in tallies]
        else:
            raise ValueError(f"unknown transport {transport!r}")
        await asyncio.gather(*runs)
        wall_ns = time.monotonic_ns() - started
    result = summarize(transport, config, tallies, lags, wall_ns)
    result.server_cpu, result.client_cpu = cpu.server, cpu.client
    result.steal_pct = cpu.steal_pct
    result.python_op_ns = speed_ns
    return result


@contextlib.asynccontextmanager
async def _reporting(
    transport: str, config: BenchConfig, tallies: Sequence[StreamTally], progress: Progress | None
) -> AsyncIterator[None]:
    """Tell ``progress`` the chunk count every `PROGRESS_INTERVAL_S` while the body runs."""
    if progress is None:
        yield
        return
    expected = config.expected_chunks

    async def report() -> None:
        while True:
            progress(transport, sum(t.received for t in tallies), expected)
            await asyncio.sleep(PROGRESS_INTERVAL_S)

    task = asyncio.create_task(report(), name="bench-progress")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        progress(transport, sum(t.received for t in tallies), expected)


def run_on_fast_loop(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` in a fresh event loop: uvloop where available (its per-connection cost is
    lower than asyncio's, which matters to a load client), with room for its sockets made
    in the descriptor table first (`airlane.server.fdtable`: the client has threads too)."""
    reserve_fd_table(DEFAULT_RESERVED_FDS)
    if sys.platform != "win32":
        import uvloop

        return uvloop.run(coro)
    return asyncio.run(coro)  # pragma: no cover
