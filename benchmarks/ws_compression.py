"""What permessage-deflate costs the gateway: CPU per WebSocket message, with and without it.

Browsers, the Python ``websockets`` client and Node's ``ws`` offer permessage-deflate by
default, and the gateway accepts it unless ``[http] ws_compression = false``. This starts one
gateway (pinned to its own core where there are two), reads N burst load-test streams over
WebSocket with the ``websockets`` client (``compression="deflate"`` and ``None``, alternating
for ``--rounds`` rounds), and reports the gateway's CPU time per chunk, read from ``/proc``
(through psutil) around each run.

    .venv/bin/python benchmarks/ws_compression.py --streams 50 --chunks 200 --rounds 2
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time

import psutil
from websockets.asyncio.client import connect

from airlane.bench.spawn import GatewayStartError, LocalGateway, pin_client, pin_process

MODES = ("deflate", "none")
RUN_TIMEOUT_S = 120.0
"""Time limit of one run (every stream of one mode)."""


async def _read_stream(url: str, compression: str | None) -> int:
    """Read one load-test stream to its end; return how many messages it carried."""
    messages = 0
    async with connect(url, compression=compression, max_size=None) as ws:
        async for _ in ws:
            messages += 1
    return messages


async def _run(base_url: str, pid: int, streams: int, chunks: int, mode: str) -> dict[str, float]:
    url = base_url.replace("http://", "ws://") + f"/v1/loadtest/ws?chunks={chunks}&mode=burst"
    compression = None if mode == "none" else "deflate"
    process = psutil.Process(pid)
    before, started = process.cpu_times(), time.perf_counter()
    results = await asyncio.wait_for(
        asyncio.gather(*(_read_stream(url, compression) for _ in range(streams))),
        RUN_TIMEOUT_S,
    )
    after, wall = process.cpu_times(), time.perf_counter() - started
    cpu_s = (after.user + after.system) - (before.user + before.system)
    received = sum(results)
    if received != streams * chunks:
        raise RuntimeError(f"{mode}: {received} of {streams * chunks} chunks arrived")
    return {"us_per_chunk": cpu_s * 1e6 / received, "wall_s": wall, "chunks": received}


async def measure(url: str, pid: int, streams: int, chunks: int, rounds: int) -> None:
    """Alternate the two modes for ``rounds`` rounds and print each run and the medians."""
    per_mode: dict[str, list[float]] = {mode: [] for mode in MODES}
    for _ in range(rounds):
        for mode in MODES:
            run = await _run(url, pid, streams, chunks, mode)
            per_mode[mode].append(run["us_per_chunk"])
            print(
                f"{mode:>8}: {run['chunks']:,.0f} chunks in {run['wall_s']:.2f} s, "
                f"gateway CPU {run['us_per_chunk']:.1f} us per chunk"
            )
            await asyncio.sleep(0.5)  # let the sockets close before the next run
    deflate, plain = (statistics.median(per_mode[mode]) for mode in MODES)
    # CPU time is counted in clock ticks (10 ms): a short run may show none at all.
    ratio = f"x{deflate / plain:.2f}" if plain > 0 else "runs too short to compare"
    print(f"median gateway CPU per chunk: deflate {deflate:.1f} us, none {plain:.1f} us ({ratio})")


def main() -> int:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=50)
    parser.add_argument("--chunks", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if not (1 <= args.streams <= 2000 and 1 <= args.chunks <= 10_000 and 1 <= args.rounds <= 20):
        parser.error("--streams 1..2000, --chunks 1..10000, --rounds 1..20")
    server_cpus, _ = pin_client()
    try:
        with LocalGateway() as gateway:
            if server_cpus is not None:
                pin_process(gateway.pid, server_cpus)
            assert gateway.url is not None
            asyncio.run(measure(gateway.url, gateway.pid, args.streams, args.chunks, args.rounds))
    except GatewayStartError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
