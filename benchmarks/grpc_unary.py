"""Small unary gRPC calls: latency percentiles and calls per second (the seed reports P95 and
QPS for gRPC and gRPC-Web).

A gateway is spawned and pinned; ``--concurrency`` callers each call ``Publish`` (one small
``message`` event to a named stream) back to back until ``--calls`` calls have completed in
all or ``--duration-s`` has passed: over native gRPC (grpcio, one shared channel) or, with
``--protocol grpc-web``, as gRPC-Web POSTs on the HTTP port (httpx, one keep-alive connection
per caller, as browsers keep theirs). Reported: calls/s, and latency p50 / p95 / p99 / max in
milliseconds, measured around each call on the client.

    .venv/bin/python benchmarks/grpc_unary.py                         # 20000 calls, 16 callers
    .venv/bin/python benchmarks/grpc_unary.py --protocol grpc-web
    .venv/bin/python benchmarks/grpc_unary.py --calls 200 --json -    # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import struct
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import orjson
from grpc import aio

from airlane.bench.runner import run_on_fast_loop
from airlane.bench.spawn import LocalGateway, pin_client
from airlane.bench.stats import Percentiles
from airlane.v1 import events_pb2, service_pb2, service_pb2_grpc


async def measure(gateway: LocalGateway, args: argparse.Namespace) -> dict[str, Any]:
    """Run the callers against ``gateway``; return the summary."""
    latencies_ns: list[int] = []
    errors = 0
    request = service_pb2.PublishRequest(
        stream_id="bench/grpc-unary",
        event=events_pb2.Event(kind=events_pb2.KIND_MESSAGE, payload_json='{"n":1}'),
    )
    deadline = time.monotonic() + args.duration_s
    remaining = args.calls
    call = await _grpc_web_caller(gateway, request) if args.protocol == "grpc-web" else None
    async with aio.insecure_channel(str(gateway.grpc)) as channel:
        stub = service_pb2_grpc.AirlaneStub(channel)  # type: ignore[no-untyped-call]
        await stub.Publish(request)  # creates the stream; not counted

        async def caller() -> None:
            nonlocal remaining, errors
            http = httpx.AsyncClient(base_url=str(gateway.url)) if call is not None else None
            try:
                while remaining > 0 and time.monotonic() < deadline:
                    remaining -= 1
                    started = time.monotonic_ns()
                    try:
                        if http is not None and call is not None:
                            await call(http)
                        else:
                            await stub.Publish(request)
                    except (aio.AioRpcError, httpx.HTTPError, RuntimeError):
                        errors += 1
                        continue
                    latencies_ns.append(time.monotonic_ns() - started)
            finally:
                if http is not None:
                    await http.aclose()

        started = time.monotonic()
        await asyncio.gather(*(caller() for _ in range(args.concurrency)))
        wall = time.monotonic() - started
    ms = Percentiles.of(sorted(value / 1e6 for value in latencies_ns))
    return {
        "protocol": args.protocol,
        "calls": len(latencies_ns),
        "errors": errors,
        "concurrency": args.concurrency,
        "calls_per_s": round(len(latencies_ns) / wall, 1),
        "latency_ms": ms.to_dict(),
    }


async def _grpc_web_caller(
    gateway: LocalGateway, request: service_pb2.PublishRequest
) -> Callable[[httpx.AsyncClient], Awaitable[None]]:
    """One gRPC-Web Publish per call, checked for ``grpc-status: 0``."""
    message = request.SerializeToString()
    body = struct.pack(">BI", 0, len(message)) + message
    headers = {"content-type": "application/grpc-web+proto", "x-grpc-web": "1"}

    async def call(http: httpx.AsyncClient) -> None:
        response = await http.post("/airlane.v1.Airlane/Publish", content=body, headers=headers)
        if b"grpc-status: 0\r\n" not in response.content:
            raise RuntimeError(f"gRPC-Web call failed: {response.content[-200:]!r}")

    return call


def main() -> None:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--duration-s", type=float, default=30.0)
    parser.add_argument("--protocol", choices=["grpc", "grpc-web"], default="grpc")
    parser.add_argument("--json", type=Path, default=None, help="write results ('-': stdout)")
    args = parser.parse_args()
    with LocalGateway() as gateway:
        assert gateway.grpc is not None, "the gateway has no gRPC listener"
        pin_client()
        result = run_on_fast_loop(measure(gateway, args))
    if args.json is not None and str(args.json) == "-":
        sys.stdout.write(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    latency = result["latency_ms"]
    print(
        f"{result['protocol']} unary Publish, {result['concurrency']} callers: "
        f"{result['calls']} calls, "
        f"{result['calls_per_s']:,} calls/s, errors {result['errors']}; latency ms "
        + ", ".join(f"{key} {value:.2f}" for key, value in latency.items() if value is not None)
    )
    if args.json is not None:
        args.json.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))


if __name__ == "__main__":
    main()
