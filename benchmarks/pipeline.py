"""The gateway's own per-chunk cost, without sockets: N load-test streams served in-process.

Drives the ASGI app directly (``GET /v1/loadtest/sse``) with an ASGI ``send`` that only counts
bytes, so what it measures is Airlane's pipeline alone (synthetic backend -> hub -> SSE pump),
not the kernel or an HTTP server. Compare with ``airlane bench`` (the full path over TCP) to
see how the time splits.

    .venv/bin/python benchmarks/pipeline.py --streams 500 --chunks 200
    .venv/bin/python benchmarks/pipeline.py --profile      # cProfile, top functions
    .venv/bin/python benchmarks/pipeline.py --gc tuned     # without the GC pacer (or: default)
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import time
from dataclasses import replace

import uvloop

from airlane.server import ServerConfig, build_app
from airlane.server.gcpacer import GcConfig, GcPacer
from airlane.transports.http import AirlaneApp


async def _one_stream(app: AirlaneApp, query: str) -> int:
    scope = {
        "type": "http",
        "method": "GET",
        "path": "/v1/loadtest/sse",
        "query_string": query.encode(),
        "headers": [],
        "client": ("127.0.0.1", 1),
    }
    received = 0
    finished = asyncio.Event()

    async def receive() -> dict[str, str]:
        await finished.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, object]) -> None:
        nonlocal received
        if message["type"] == "http.response.body":
            received += len(message.get("body", b""))  # type: ignore[arg-type]
            if not message.get("more_body"):
                finished.set()

    await app(scope, receive, send)
    return received


async def run(
    streams: int,
    chunks: int,
    *,
    gc_schedule: str = "paced",
    yield_every: int = 0,
    mode: str = "burst",
    interval_ms: float = 20.0,
) -> None:
    """Serve ``streams`` concurrent load-test streams and print the per-chunk cost (wall time,
    and CPU time, which is what counts in paced mode). ``gc_schedule``: ``paced`` (as ``airlane
    serve`` runs), ``tuned`` (`airlane.server.gcpacer.tune_gc` only) or ``default`` (CPython's)."""
    config = ServerConfig()
    if yield_every:
        config = replace(config, synthetic=replace(config.synthetic, yield_every=yield_every))
    app = build_app(config)
    pacer = GcPacer(GcConfig(paced=gc_schedule == "paced"))
    if gc_schedule != "default":
        pacer.start()  # as `airlane serve` does
    await app.gateway.start()
    query = f"chunks={chunks}&mode={mode}&interval_ms={interval_ms}"
    started, cpu_started = time.perf_counter(), time.process_time()
    sizes = await asyncio.gather(*(_one_stream(app, query) for _ in range(streams)))
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu_started
    total = streams * chunks
    print(
        f"{streams} streams x {chunks} chunks ({mode}): {total / elapsed:,.0f} chunks/s, "
        f"{elapsed / total * 1e6:.1f} us/chunk wall, {cpu / total * 1e6:.1f} us/chunk CPU, "
        f"{sum(sizes) / elapsed / 1e6:.1f} MB/s"
    )
    await app.gateway.aclose()
    pacer.stop()


def main() -> None:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=500)
    parser.add_argument("--chunks", type=int, default=200)
    parser.add_argument("--profile", action="store_true", help="print a cProfile summary")
    parser.add_argument(
        "--gc",
        choices=("paced", "tuned", "default"),
        default="paced",
        help="garbage-collector schedule: as airlane serve (paced), tune_gc only, CPython's",
    )
    parser.add_argument("--yield-every", type=int, default=0, help="synthetic.yield_every")
    parser.add_argument("--mode", choices=("burst", "paced"), default="burst")
    parser.add_argument("--interval-ms", type=float, default=20.0, help="paced mode interval")
    args = parser.parse_args()
    main_coro = run(
        args.streams,
        args.chunks,
        gc_schedule=args.gc,
        yield_every=args.yield_every,
        mode=args.mode,
        interval_ms=args.interval_ms,
    )
    if args.profile:
        profiler = cProfile.Profile()
        profiler.runcall(uvloop.run, main_coro)
        pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
    else:
        uvloop.run(main_coro)


if __name__ == "__main__":
    main()
