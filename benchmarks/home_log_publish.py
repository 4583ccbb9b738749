"""What the cross-node path costs a producer, per event, with nothing else running.

``--streams`` streams on one hub in this process each append one load-test chunk (the
seed's ~1.2 KB body) every ``--interval-ms``, ``--appends`` times, through the hub's
appender as a generation does, with no readers; then every stream is settled (stored). The
process's CPU per appended event, on the `MemoryHub` and on the JetStream hub's ``node``
layout (a throwaway ``nats-server -js``, file storage: encoding, compressing, publishing and
applying each acknowledged message), so the difference is what a producer pays for every
event to reach the broker. The driver's own work (making the events) is in both.

    .venv/bin/python benchmarks/home_log_publish.py
    .venv/bin/python benchmarks/home_log_publish.py --linger-ms 10 --json -
    .venv/bin/python benchmarks/home_log_publish.py --busy-linger-ms 20   # the flow's wait
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import uvloop

from airlane.backends.synthetic import _loadtest_chunk
from airlane.core import Event, Kind
from airlane.hub.base import Hub
from airlane.hub.jetstream import HomeLogHub, JetStreamHubConfig
from airlane.hub.memory import MemoryHub

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cluster_fanout import nats_server  # a sibling script, not a package


async def drive(hub: Hub, args: argparse.Namespace) -> dict[str, Any]:
    """Run the appends on ``hub``; CPU and wall time per event."""
    await hub.start()
    try:
        ids = [f"p{n}" for n in range(args.streams)]
        for stream_id in ids:
            await hub.create(stream_id)
        appenders = [hub.appender(stream_id) for stream_id in ids]
        chunks = [_loadtest_chunk("synthetic", stream_id.encode(), 16) for stream_id in ids]
        cpu, wall = time.process_time(), time.monotonic()
        for n in range(args.appends):
            now = time.time_ns()
            for appender, chunk in zip(appenders, chunks, strict=True):
                assert appender is not None
                appender([Event(Kind.MESSAGE, raw=chunk.encode(n, now))])
            await asyncio.sleep(args.interval_ms / 1000)
        for stream_id in ids:
            await hub.settle(stream_id)
        events = args.streams * args.appends
        return {
            "cpu_us_per_event": round((time.process_time() - cpu) * 1e6 / events, 2),
            "wall_s": round(time.monotonic() - wall, 2),
        }
    finally:
        await hub.aclose()


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    report: dict[str, Any] = {"memory": await drive(MemoryHub(), args)}
    with nats_server() as (url, _):
        config = JetStreamHubConfig(
            servers=(url,),
            node_id="publisher",
            linger_ms=args.linger_ms,
            busy_linger_ms=args.linger_ms if args.busy_linger_ms is None else args.busy_linger_ms,
            layout="node",
        )
        report["jetstream"] = await drive(HomeLogHub(config), args)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=250)
    parser.add_argument("--appends", type=int, default=200, help="per stream")
    parser.add_argument("--interval-ms", type=float, default=20.0)
    parser.add_argument("--linger-ms", type=float, default=5.0)
    parser.add_argument(
        "--busy-linger-ms",
        type=float,
        help="the wait at a busy flow (default: --linger-ms, one fixed wait)",
    )
    parser.add_argument("--json", help="write the report here ('-' for stdout)")
    args = parser.parse_args()
    report = uvloop.run(main_async(args))
    text = json.dumps(report, indent=2)
    if args.json == "-":
        print(text)
        return
    if args.json:
        Path(args.json).write_text(text + "\n")
    for name, result in report.items():
        print(f"{name:10} {result['cpu_us_per_event']:7.2f} us CPU per event")


if __name__ == "__main__":
    main()
