"""Idle connections: the gateway's memory per idle SSE and WebSocket subscription, heartbeats on.

A gateway is spawned with a short heartbeat period (``[http] sse_ping_s`` and ``ws_ping_s``,
2 s by default) so that heartbeats really flow. Named streams are created (they never produce
anything), a few connections of each kind are opened and closed to warm the gateway up, and its
memory is measured: the baseline. Then ``--sse`` idle SSE subscriptions
(``GET /v1/streams/{id}/events``) and ``--ws`` idle WebSocket subscriptions (``/v1/ws``, one
``subscribe`` each) are opened, memory is measured after each kind, ``--paced-pct`` of that
many more connections (1 % by default) read paced load-test generations (ten readers each),
and all of them are held for ``--hold-s`` seconds while every connection's heartbeats are
timed: ``: ping`` comment lines on SSE, WebSocket Ping frames (answered with Pong) on
``/v1/ws``.

Reported: memory per connection (RSS delta / connections, in KB = 1024 bytes; PSS alike),
per transport and overall, against the 20 KB target; how fast connections were taken; whether
every connection stayed open and heard a heartbeat at least every two periods, and how late
heartbeats came (the gap between two of a connection's, less the period: p50, p99, max over
every gap); every paced chunk delivered and its lag; the gateway's CPU idle without and with
the connections.

    .venv/bin/python benchmarks/idle_connections.py --json bench-results/idle.json  # 10k, ~1 min
    .venv/bin/python benchmarks/idle_connections.py --sse 20 --ws 20 --hold-s 3 --ping-s 1
    .venv/bin/python benchmarks/idle_connections.py --sse 50000 --ws 50000 --ping-s 5 \
        --gateway-workers 6                                                     # 101,000

Connections come from 127.1.x.y source addresses, 10,000 each (`idle_clients.PER_SOURCE`). The
descriptor limit is raised to what one process needs, past the hard limit where the process
may (``CAP_SYS_RESOURCE``); where it may not (a hard limit of 20,000 in some containers), the
connections are spread: ``--client-processes`` (by default one per 18,000 connections) and
``--gateway-workers`` (``airlane serve --workers N``, whose workers' memory is summed; they
share streams through a ``nats-server`` it starts). The client side is
`benchmarks/idle_clients.py`. The named streams are created before the baseline, so the delta
is the connections' cost alone.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import psutil
from idle_clients import (
    LAG_BUCKET_NS,
    PER_PROCESS,
    PER_SOURCE,
    ClientProcesses,
    LocalClients,
    SubscribeError,
    heartbeat_summary,
    percentile_of,
    source_address,
)

from airlane import __version__
from airlane.bench.memory import (
    GroupWatch,
    ProcessGone,
    ProcessWatch,
    ResourceSample,
    ResourceSampler,
    describe_host,
    raise_fd_limit,
)
from airlane.bench.runner import run_on_fast_loop
from airlane.bench.spawn import GatewayStartError, LocalGateway, pin_client, pin_process

TARGET_KB_PER_CONNECTION = 20.0
"""The target to compare against: 20 KB of gateway memory per connection."""
DEFAULT_PING_S = 2.0
"""Heartbeat period given to the gateway: short, so that a 30 s hold sees about 15 of them."""
DEFAULT_STREAMS = 100
"""Named streams the connections are spread over (round robin)."""
WARMUP_CONNECTIONS = 50
"""Connections of each kind opened and closed before the baseline: first-use costs (imports,
caches, code paths) belong to the baseline, not to the measured connections."""
DEFAULT_SETTLE_S = 1.0
"""Pause before a memory reading, so that work started by the last opening has finished."""
CPU_WINDOW_S = 3.0
"""How long the gateway's CPU is measured with no connections."""
SILENCE_PERIODS = 2.0
"""A connection may go at most this many heartbeat periods without one."""


async def create_streams(base_url: str, names: Sequence[str]) -> None:
    """Create the named streams (``POST /v1/streams``), a few requests at a time.

    Raises:
        SubscribeError: the gateway refused one.
    """
    pending = iter(names)
    async with httpx.AsyncClient(base_url=base_url, trust_env=False, timeout=30.0) as client:

        async def worker() -> None:
            for name in pending:
                response = await client.post("/v1/streams", json={"name": name, "exist_ok": True})
                if response.status_code >= 300:
                    raise SubscribeError(f"creating {name}: HTTP {response.status_code}")

        async with asyncio.TaskGroup() as group:
            for _ in range(8):
                group.create_task(worker())


@dataclass
class Readings:
    """Memory readings of the gateway at each phase, and its CPU."""

    baseline: ResourceSample | None = None
    after_open: dict[str, ResourceSample] = field(default_factory=dict)
    """Once each kind's connections are open (SSE first, then WebSocket)."""
    end_of_hold: ResourceSample | None = None
    after_close: ResourceSample | None = None
    idle_cpu_pct: float | None = None
    held_cpu_pct: float | None = None
    hold_samples: list[ResourceSample] = field(default_factory=list)


Watch = ProcessWatch | GroupWatch
Clients = LocalClients | ClientProcesses


async def measure(
    args: argparse.Namespace, gateway: LocalGateway, watch: Watch, clients: Clients
) -> dict[str, Any]:
    """The phases (module docstring); returns the JSON document."""
    assert gateway.url is not None
    port = int(gateway.url.rsplit(":", 1)[1])
    readings = Readings()
    names = [f"idle/{i}" for i in range(args.streams)]
    await create_streams(gateway.url, names)
    await _warm_up(port, names, args.ping_s)
    readings.baseline = await _settled(watch, args.settle_s)
    readings.idle_cpu_pct = await _cpu_over(watch, min(CPU_WINDOW_S, args.hold_s))
    first, generations = 0, 0
    try:
        for kind, count in (("sse", args.sse), ("ws", args.ws)):
            await clients.open(kind, port, names, count, first, args.open_timeout_s)
            first += count
            readings.after_open[kind] = await _settled(watch, args.settle_s)
        readers = round((args.sse + args.ws) * args.paced_pct / 100)
        chunks_each = max(1, int(args.hold_s * 800 / args.paced_interval_ms))
        if readers:
            ids = await _start_generations(args, gateway.url, readers, chunks_each)
            generations = len(ids)
            await clients.open("paced", port, ids, readers, first, args.open_timeout_s)
        held = await _hold(args.hold_s, watch, clients, readings, args.ping_s)
    finally:
        await _close(clients)
    readings.after_close = await _settled(watch, args.settle_s)
    paced = {"generations": generations, "chunks_each": chunks_each, "lags": held["lags"]}
    return _document(args, gateway, readings, held["kinds"], paced)


async def _start_generations(
    args: argparse.Namespace, base_url: str, readers: int, chunks_each: int
) -> list[str]:
    """Paced load-test generations for ``readers`` readers (ten each) that are over within
    4/5 of the hold, so that a reader has every chunk by its end."""
    spec = {"chunks": chunks_each, "mode": "paced", "interval_ms": args.paced_interval_ms}
    ids = []
    async with httpx.AsyncClient(base_url=base_url, trust_env=False, timeout=30.0) as client:
        for _ in range(max(1, readers // 10)):
            response = await client.post("/v1/streams", json={"loadtest": spec})
            if response.status_code >= 300:
                raise SubscribeError(f"starting a generation: HTTP {response.status_code}")
            ids.append(response.json()["id"])
    return ids


async def _warm_up(port: int, names: Sequence[str], ping_s: float) -> None:
    """Open a few connections of each kind, let a heartbeat pass, close them."""
    warm = LocalClients()
    for kind in ("sse", "ws"):
        await warm.open(kind, port, names, WARMUP_CONNECTIONS, 0, 30.0)
    await asyncio.sleep(ping_s + 0.5)
    warm.close()


async def _close(clients: Clients) -> None:
    if isinstance(clients, LocalClients):
        clients.close()
    else:
        await clients.close()


async def _settled(watch: Watch, settle_s: float) -> ResourceSample:
    await asyncio.sleep(settle_s)
    return watch.sample()


async def _cpu_over(watch: Watch, seconds: float) -> float:
    """The gateway's CPU over the next ``seconds``, % of one core."""
    started, cpu = time.monotonic(), watch.cpu_seconds()
    await asyncio.sleep(seconds)
    return 100.0 * (watch.cpu_seconds() - cpu) / (time.monotonic() - started)


async def _hold(
    hold_s: float, watch: Watch, clients: Clients, readings: Readings, ping_s: float
) -> dict[str, Any]:
    """Hold every connection ``hold_s`` seconds, timing heartbeats and sampling memory; the
    clients' results."""
    if isinstance(clients, LocalClients):
        clients.hold_start(ping_s)
    else:
        await clients.hold_start(ping_s)
    started, cpu = time.monotonic(), watch.cpu_seconds()
    async with ResourceSampler(watch, interval_s=1.0) as sampler:
        await asyncio.sleep(hold_s)
    readings.held_cpu_pct = 100.0 * (watch.cpu_seconds() - cpu) / (time.monotonic() - started)
    readings.hold_samples = sampler.samples
    readings.end_of_hold = sampler.samples[-1] if sampler.samples else watch.sample()
    if isinstance(clients, LocalClients):
        return clients.hold_end()
    return await clients.hold_end()


def _per_connection_kb(
    before: ResourceSample | None, after: ResourceSample | None, n: int
) -> dict[str, float | None]:
    """RSS and PSS growth per connection, in KB (1024 bytes)."""
    if before is None or after is None or n == 0:
        return {"rss_kb": None, "pss_kb": None}
    pss = None
    if before.pss_bytes is not None and after.pss_bytes is not None:
        pss = round((after.pss_bytes - before.pss_bytes) / n / 1024, 2)
    return {"rss_kb": round((after.rss_bytes - before.rss_bytes) / n / 1024, 2), "pss_kb": pss}


def _heartbeat_report(result: dict[str, Any], ping_s: float) -> dict[str, Any]:
    limit = SILENCE_PERIODS * ping_s
    return {
        "transport": result["transport"],
        "requested": result["requested"],
        "opened": result["opened"],
        "open_failures": result["failures"],
        "open_failure_samples": result["failure_samples"],
        "open_at_end": result["still_open"],
        "lost_samples": result["lost"][:5],
        **heartbeat_summary(result),
        "silence_limit_s": limit,
        "silent_connections": sum(1 for silence in result["silences"] if silence > limit),
        "open_s": round(result["open_s"], 2),
        "accepted_per_s": round(result["opened"] / result["open_s"]) if result["open_s"] else None,
    }


def _document(
    args: argparse.Namespace,
    gateway: LocalGateway,
    readings: Readings,
    kinds: dict[str, dict[str, Any]],
    paced: dict[str, Any],
) -> dict[str, Any]:
    sse, ws = kinds["sse"], kinds["ws"]
    total = sum(result["opened"] for result in kinds.values())
    # The idle kinds; paced readers get data, not heartbeats, and have their own report.
    transports = [_heartbeat_report(result, args.ping_s) for result in (sse, ws)]
    all_held = all(
        t["opened"] == t["requested"] and t["open_at_end"] == t["opened"] for t in transports
    )
    heartbeats_ok = all(t["silent_connections"] == 0 for t in transports)
    overall = _per_connection_kb(readings.baseline, readings.end_of_hold, total)
    after_sse = readings.after_open.get("sse")
    return {
        "benchmark": "idle_connections",
        "airlane_version": __version__,
        "gateway_pid": gateway.pid,
        "config": {
            "sse": args.sse,
            "ws": args.ws,
            "streams": args.streams,
            "ping_s": args.ping_s,
            "hold_s": args.hold_s,
            "paced_pct": args.paced_pct,
            "paced_interval_ms": args.paced_interval_ms,
            "sources": len({source_address(i) for i in range(0, max(total, 1), PER_SOURCE)}),
            "gateway_workers": args.gateway_workers,
            "client_processes": args.client_processes,
        },
        "target_kb_per_connection": TARGET_KB_PER_CONNECTION,
        "memory_per_connection": {
            "sse": _per_connection_kb(readings.baseline, after_sse, sse["opened"]),
            "ws": _per_connection_kb(after_sse, readings.after_open.get("ws"), ws["opened"]),
            "all": overall,
        },
        "within_target": overall["rss_kb"] is not None
        and overall["rss_kb"] <= TARGET_KB_PER_CONNECTION,
        "connections": transports,
        "paced": _paced_report(kinds.get("paced"), paced),
        "every_connection_held": all_held,
        "heartbeats_ok": heartbeats_ok,
        "gateway_cpu_pct": {
            "idle_without_connections": _round(readings.idle_cpu_pct),
            "idle_with_connections": _round(readings.held_cpu_pct),
        },
        "samples": {
            name: None if sample is None else sample.to_dict()
            for name, sample in (
                ("baseline", readings.baseline),
                ("after_sse", after_sse),
                ("after_ws", readings.after_open.get("ws")),
                ("end_of_hold", readings.end_of_hold),
                ("after_close", readings.after_close),
            )
        },
        "hold_samples": [sample.to_dict() for sample in readings.hold_samples],
    }


def _paced_report(result: dict[str, Any] | None, paced: dict[str, Any]) -> dict[str, Any] | None:
    """What the readers of paced generations got: every chunk, and how late."""
    if result is None:
        return None
    lags = paced["lags"]
    p50, p99 = percentile_of(lags, 50), percentile_of(lags, 99)
    return {
        "generations": paced["generations"],
        "readers_requested": result["requested"],
        "open_failure_samples": result["failure_samples"],
        "readers": result["opened"],
        "chunks_expected": paced["chunks_each"] * result["opened"],
        "chunks_received": sum(result["chunks"]),
        "readers_at_the_end": result["ended"],
        "lag_ms": None
        if p50 is None or p99 is None
        else {
            "p50": round(p50 * LAG_BUCKET_NS / 1e6, 1),
            "p99": round(p99 * LAG_BUCKET_NS / 1e6, 1),
            "samples": sum(lags.values()),
        },
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def print_report(document: dict[str, Any]) -> None:
    """The human summary of a run."""
    samples, memory = document["samples"], document["memory_per_connection"]
    baseline = samples["baseline"]
    print(
        f"baseline: RSS {_mb(baseline['rss_bytes'])}, PSS {_mb(baseline['pss_bytes'])}, "
        f"{baseline['open_fds']} fds"
    )
    for report in document["connections"]:
        kind = report["transport"]
        per = memory[kind]
        print(
            f"{kind:>3}: {report['opened']:,}/{report['requested']:,} opened, "
            f"{report['open_at_end']:,} open at the end; {_kb(per['rss_kb'])} RSS "
            f"({_kb(per['pss_kb'])} PSS) per connection; heartbeats min "
            f"{report['heartbeats_min']} median {report['heartbeats_median']}, longest silence "
            f"{report['longest_silence_s']:.2f} s (limit {report['silence_limit_s']:g} s)"
        )
        for reason in report["open_failure_samples"] + report["lost_samples"]:
            print(f"     failure: {reason}")
    paced = document["paced"]
    if paced is not None:
        lag = paced["lag_ms"] or {}
        print(
            f"paced: {paced['readers']:,} readers (of {paced['readers_requested']:,}) of "
            f"{paced['generations']} generations got "
            f"{paced['chunks_received']:,} of {paced['chunks_expected']:,} chunks; lag p50 "
            f"{lag.get('p50')} ms, p99 {lag.get('p99')} ms"
        )
    for report in document["connections"]:
        late = report["heartbeat_lateness_ms"] or {}
        print(
            f"{report['transport']:>3}: opened at {report['accepted_per_s']:,}/s; heartbeat "
            f"lateness p50 {late.get('p50')} ms, p99 {late.get('p99')} ms, max "
            f"{late.get('max')} ms over {late.get('gaps', 0):,} gaps"
        )
    overall, target = memory["all"], document["target_kb_per_connection"]
    cpu = document["gateway_cpu_pct"]
    print(
        f"all: {_kb(overall['rss_kb'])} RSS ({_kb(overall['pss_kb'])} PSS) per connection, "
        f"target {target:g} KB: {'within' if document['within_target'] else 'OVER'}"
    )
    print(
        f"every connection held: {'yes' if document['every_connection_held'] else 'NO'}; "
        f"heartbeats on every connection: {'yes' if document['heartbeats_ok'] else 'NO'}"
    )
    print(
        f"gateway CPU: {cpu['idle_without_connections']} % without connections, "
        f"{cpu['idle_with_connections']} % holding them (heartbeats only)"
    )
    print(f"RSS after closing them all: {_mb(samples['after_close']['rss_bytes'])}")


def _mb(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**20:,.1f} MB"


def _kb(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f} KB"


def _gateway_config(directory: str, ping_s: float) -> Path:
    path = Path(directory) / "idle.toml"
    path.write_text(f"[http]\nsse_ping_s = {ping_s}\nws_ping_s = {ping_s}\n")
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """Command line; returns the exit status."""
    args = _parser().parse_args(argv)
    host = describe_host()  # before pinning narrows this process's CPU affinity
    connections = round((args.sse + args.ws) * (1 + args.paced_pct / 100))
    if args.client_processes is None:
        args.client_processes = max(1, -(-connections // PER_PROCESS))
    per_process = -(-connections // args.client_processes)
    per_gateway = -(-connections // args.gateway_workers)
    needed = max(per_process, per_gateway) + 2 * WARMUP_CONNECTIONS + 1024
    fd_limit = raise_fd_limit(needed)  # before spawning: the gateway inherits it
    if fd_limit < needed:
        print(
            f"error: {needed:,} file descriptors needed in one process, the limit is "
            f"{fd_limit:,}: this process may not raise its hard limit (that takes "
            "CAP_SYS_RESOURCE, which root in some containers lacks; or raise it before: "
            "'ulimit -Hn', limits.conf); more --gateway-workers and --client-processes "
            "spread the connections under it",
            file=sys.stderr,
        )
        return 2
    with tempfile.TemporaryDirectory() as directory:
        config = _gateway_config(directory, args.ping_s)
        gateway_args = ["--config", str(config)]
        if args.gateway_workers > 1:
            gateway_args += ["--workers", str(args.gateway_workers)]
        try:
            with LocalGateway(gateway_args, cwd=Path(directory), ready_timeout_s=120) as gateway:
                document, pinning = run_on_fast_loop(_run(args, gateway))
        except (GatewayStartError, ProcessGone) as exc:
            print(f"error: the gateway: {exc}", file=sys.stderr)
            return 1
    document.update(host=host, fd_limit=fd_limit, cpu_pinning=pinning)
    print_report(document)
    if args.json is not None:
        args.json.write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n")
        print(f"results written to {args.json}")
    return 0


async def _run(
    args: argparse.Namespace, gateway: LocalGateway
) -> tuple[dict[str, Any], dict[str, list[int]] | None]:
    """Watch the gateway (its workers), start the clients, measure."""
    pinning = None
    if args.gateway_workers > 1:
        workers = [
            child.pid
            for child in psutil.Process(gateway.pid).children()
            if "airlane.server.worker" in child.cmdline()
        ]
        watch: Watch = GroupWatch(workers)
    else:
        watch = ProcessWatch(gateway.pid)
        if args.client_processes == 1:  # one core each, where there are two
            server_cpus, pinning = pin_client()
            if server_cpus is not None:
                pin_process(gateway.pid, server_cpus)
    clients: Clients
    if args.client_processes == 1:
        clients = LocalClients()
    else:
        clients = ClientProcesses(args.client_processes)
        await clients.start()
    return await measure(args, gateway, watch, clients), pinning


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="Examples are in the module docstring of benchmarks/idle_connections.py.",
    )
    add = parser.add_argument
    add("--sse", type=_count, default=5000, help="idle SSE subscriptions (default: 5000)")
    add("--ws", type=_count, default=5000, help="idle WebSocket subscriptions (default: 5000)")
    add("--hold-s", type=_seconds, default=30.0, help="how long to hold them (default: 30)")
    add(
        "--ping-s",
        type=_seconds,
        default=DEFAULT_PING_S,
        help="the gateway's heartbeat period (default: %(default)s)",
    )
    add(
        "--streams",
        type=_positive,
        default=DEFAULT_STREAMS,
        help="named streams the connections are spread over (default: %(default)s)",
    )
    add(
        "--open-timeout-s",
        type=_seconds,
        default=120.0,
        help="time limit for opening each kind's connections (default: %(default)s)",
    )
    add(
        "--settle-s",
        type=_seconds,
        default=DEFAULT_SETTLE_S,
        help="pause before each memory reading (default: %(default)s)",
    )
    add(
        "--paced-pct",
        type=float,
        default=1.0,
        help="connections (%% of the idle ones) that read paced generations (default: 1)",
    )
    add(
        "--paced-interval-ms",
        type=int,
        default=20,
        help="the paced generations' interval between chunks (default: %(default)s)",
    )
    add(
        "--gateway-workers",
        type=_positive,
        default=1,
        help="run the gateway as 'airlane serve --workers N' (its workers' memory summed; "
        "needs nats-server)",
    )
    add(
        "--client-processes",
        type=_positive,
        help=f"client processes holding the connections (default: one per {PER_PROCESS:,})",
    )
    add("--json", type=Path, help="write the results here")
    return parser


def _count(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 100_000:
        raise argparse.ArgumentTypeError("between 0 and 100000")
    return value


def _positive(text: str) -> int:
    value = int(text)
    if not 1 <= value <= 100_000:
        raise argparse.ArgumentTypeError("between 1 and 100000")
    return value


def _seconds(text: str) -> float:
    value = float(text)
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError("between 0 and 3600 seconds")
    return value


if __name__ == "__main__":
    # A SIGTERM (a CI time limit, say) unwinds like Ctrl-C does, so the gateway is stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    sys.exit(main())
