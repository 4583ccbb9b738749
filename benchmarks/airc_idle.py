"""Gateway memory per idle AIRC connection, over TCP and over WebSocket.

A gateway is spawned; ``--connections`` AIRC clients (`airlane.client.AircClient`, so every
connection acknowledges and answers clock exchanges like a real one) connect, each subscribes
to one named stream that a single published event keeps open (so every connection holds a
session, a cursor and a pump), and the connections are then held ``--hold-s`` seconds. The
gateway's RSS is read before the first connection and after the hold (after a settle), and
the difference divided by the connections is reported in KiB (1024 bytes), per transport.
The clients must all still be connected at the end: a connection the gateway dropped (an
unanswered retransmission, say) is an error.

    .venv/bin/python benchmarks/airc_idle.py                       # 2000 per transport
    .venv/bin/python benchmarks/airc_idle.py --connections 50 --hold-s 1 --json -   # smoke
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

import httpx
import orjson

from airlane.bench.memory import ProcessWatch, raise_fd_limit
from airlane.bench.runner import run_on_fast_loop
from airlane.bench.spawn import LocalGateway
from airlane.client import AircClient, WsSubscription

STREAM = "bench/airc-idle"
CONNECT_CONCURRENCY = 64  # connections being opened at once
SETTLE_S = 1.0


async def open_clients(
    gateway: LocalGateway, transport: str, count: int
) -> list[tuple[AircClient, WsSubscription]]:
    """``count`` clients over ``transport``, each subscribed to `STREAM`."""
    assert gateway.url is not None and gateway.airc is not None
    limit = asyncio.Semaphore(CONNECT_CONCURRENCY)

    async def one() -> tuple[AircClient, WsSubscription]:
        async with limit:
            if transport == "airc":
                client = await AircClient.tcp(*gateway.airc)
            else:
                client = await AircClient.websocket(gateway.url)
            return client, await client.subscribe(STREAM)

    return await asyncio.gather(*(one() for _ in range(count)))


async def measure(
    gateway: LocalGateway, transport: str, args: argparse.Namespace
) -> dict[str, Any]:
    """One transport's numbers."""
    watch = ProcessWatch(gateway.pid)
    await asyncio.sleep(SETTLE_S)
    before = watch.sample().rss_bytes
    clients = await open_clients(gateway, transport, args.connections)
    try:
        await asyncio.sleep(args.hold_s)
        after = watch.sample().rss_bytes
        dropped = sum(1 for client, _ in clients if client.connection.closed is not None)
    finally:
        await asyncio.gather(*(client.aclose() for client, _ in clients))
    return {
        "transport": transport,
        "connections": args.connections,
        "rss_before_bytes": before,
        "rss_after_bytes": after,
        "kib_per_connection": round((after - before) / args.connections / 1024, 2),
        "dropped": dropped,
    }


async def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Both transports, each against a fresh gateway."""
    results = []
    for transport in args.transports:
        with LocalGateway() as gateway:
            assert gateway.url is not None
            async with httpx.AsyncClient(base_url=gateway.url) as http:
                response = await http.post(
                    f"/v1/streams/{STREAM}/events", json={"kind": "message", "payload": {}}
                )
                response.raise_for_status()
            results.append(await measure(gateway, transport, args))
    return results


def main() -> None:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=2000, help="per transport")
    parser.add_argument("--hold-s", type=float, default=5.0, help="how long they stay open")
    parser.add_argument(
        "--transports", nargs="+", default=["airc", "airc-ws"], choices=["airc", "airc-ws"]
    )
    parser.add_argument("--json", type=Path, default=None, help="write results ('-': stdout)")
    args = parser.parse_args()
    raise_fd_limit()
    results = run_on_fast_loop(run(args))
    if args.json is not None and str(args.json) == "-":
        sys.stdout.write(orjson.dumps(results, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        for row in results:
            print(
                f"{row['transport']:>8}: {row['connections']} idle subscribed connections, "
                f"{row['kib_per_connection']:.1f} KiB each of gateway RSS "
                f"({row['rss_before_bytes'] / 2**20:.1f} -> {row['rss_after_bytes'] / 2**20:.1f}"
                f" MiB), dropped {row['dropped']}"
            )
        if args.json is not None:
            args.json.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    if any(row["dropped"] for row in results):
        sys.exit(1)


if __name__ == "__main__":
    main()
