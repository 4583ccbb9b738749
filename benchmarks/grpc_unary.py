"""Small unary gRPC calls: latency percentiles and calls per second (the seed reports P95 and
QPS for gRPC and gRPC-Web).

A gateway is spawned and pinned; ``--concurrency`` callers share one channel and each calls
``Publish`` (one small ``message`` event to a named stream) back to back until ``--calls`` calls
have completed in all or ``--duration-s`` has passed. Reported: calls/s, and latency p50 / p95 /
p99 / max in milliseconds, measured around each call on the client.

    .venv/bin/python benchmarks/grpc_unary.py                         # 20000 calls, 16 callers
    .venv/bin/python benchmarks/grpc_unary.py --calls 200 --json -    # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

import orjson
from grpc import aio

from airlane.bench.runner import run_on_fast_loop
from airlane.bench.spawn import LocalGateway, pin_client
from airlane.bench.stats import Percentiles
from airlane.v1 import events_pb2, service_pb2, service_pb2_grpc


async def measure(target: str, args: argparse.Namespace) -> dict[str, Any]:
    """Run the callers against ``target``; return the summary."""
    latencies_ns: list[int] = []
    errors = 0
    request = service_pb2.PublishRequest(
        stream_id="bench/grpc-unary",
        event=events_pb2.Event(kind=events_pb2.KIND_MESSAGE, payload_json='{"n":1}'),
    )
    deadline = time.monotonic() + args.duration_s
    remaining = args.calls
    async with aio.insecure_channel(target) as channel:
        stub = service_pb2_grpc.AirlaneStub(channel)  # type: ignore[no-untyped-call]
        await stub.Publish(request)  # creates the stream; not counted

        async def caller() -> None:
            nonlocal remaining, errors
            while remaining > 0 and time.monotonic() < deadline:
                remaining -= 1
                started = time.monotonic_ns()
                try:
                    await stub.Publish(request)
                except aio.AioRpcError:
                    errors += 1
                    continue
                latencies_ns.append(time.monotonic_ns() - started)

        started = time.monotonic()
        await asyncio.gather(*(caller() for _ in range(args.concurrency)))
        wall = time.monotonic() - started
    ms = Percentiles.of(sorted(value / 1e6 for value in latencies_ns))
    return {
        "calls": len(latencies_ns),
        "errors": errors,
        "concurrency": args.concurrency,
        "calls_per_s": round(len(latencies_ns) / wall, 1),
        "latency_ms": ms.to_dict(),
    }


def main() -> None:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--duration-s", type=float, default=30.0)
    parser.add_argument("--json", type=Path, default=None, help="write results ('-': stdout)")
    args = parser.parse_args()
    with LocalGateway() as gateway:
        assert gateway.grpc is not None, "the gateway has no gRPC listener"
        pin_client()
        result = run_on_fast_loop(measure(gateway.grpc, args))
    if args.json is not None and str(args.json) == "-":
        sys.stdout.write(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    latency = result["latency_ms"]
    print(
        f"gRPC unary Publish, {result['concurrency']} callers: {result['calls']} calls, "
        f"{result['calls_per_s']:,} calls/s, errors {result['errors']}; latency ms "
        + ", ".join(f"{key} {value:.2f}" for key, value in latency.items() if value is not None)
    )
    if args.json is not None:
        args.json.write_bytes(orjson.dumps(result, option=orjson.OPT_INDENT_2))


if __name__ == "__main__":
    main()
