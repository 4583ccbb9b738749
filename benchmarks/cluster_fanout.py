"""Cross-node fan-out on the JetStream hub, next to one node on the in-memory hub.

Four runs, each bounded in streams and time:

- ``memory``: one gateway (the embedded `MemoryHub`). ``--streams`` load-test generations of
  the seed's workload (``POST /v1/streams {"loadtest": ...}``: ``--chunks`` chunks of ~1.2 KB,
  burst or paced), each read by ``--readers`` SSE subscribers (``/v1/streams/{id}/events``).
- ``jetstream``: a ``nats-server -js`` and two gateways with ``--hub nats://...``; every
  generation is created on node A (its producer runs there) and its readers alternate between
  A and B, so half of them read across nodes.
- ``workers``: ``airlane serve --workers N`` (``--workers``, 2 by default; 1 skips it) on one
  port, its workers sharing streams through the broker it starts; the generations and their
  readers all on that port (the kernel spreads the connections over the workers, so a reader
  is on the producer's worker or not, as chance has it).
- ``resume``: ``--resume-streams`` long paced generations produced on A and read on B; B is
  killed with SIGKILL; each reader reconnects to A with ``Last-Event-ID``. Reported: the time
  from the kill to each reader's first event on A, and whether any chunk was missed or
  repeated.

Reported per run: payload MB/s (chunk bytes received by all readers / wall time), chunks/s,
the server processes' CPU time per 1000 chunks delivered (what the hub costs, whatever else
shares the machine), and delivery lag (the reader's monotonic clock minus the chunk's ``ts``,
stamped by the producer on the same machine) p50/p99 per node, for chunks produced after the
reader connected (a reader that joins late first catches up on history, which is not lag).

    .venv/bin/python benchmarks/cluster_fanout.py                          # the seed workload
    .venv/bin/python benchmarks/cluster_fanout.py --streams 20 --chunks 50 --json -   # smoke

Needs ``nats-server`` on PATH (Debian package ``nats-server``). All processes share this
machine's cores: on a 2-core machine the broker, two gateways and the client compete, so the
cluster numbers are a floor, not what separate machines would give.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import orjson
import psutil

from airlane.bench.chunk import read_seq_ts
from airlane.bench.memory import raise_fd_limit
from airlane.bench.runner import run_on_fast_loop
from airlane.bench.spawn import LocalGateway
from airlane.bench.sse_parser import LoadResponseParser
from airlane.bench.stats import percentile
from airlane.bench.tally import StreamTally

CREATE_CONCURRENCY = 32
CONNECT_CONCURRENCY = 64
_PAYLOAD = b'"payload":'


@dataclass
class Reader:
    """One SSE subscriber: what it received and when."""

    node: str
    joined_ns: int = 0
    chunks: int = 0
    payload_bytes: int = 0
    seqs: list[int] = field(default_factory=list)
    lags_ns: list[int] = field(default_factory=list)
    last_id: str = ""
    first_after_ns: int = 0
    ended: str = ""


class NativeEvents:
    """A body reader for `LoadResponseParser`: native SSE events whose payload is a chunk."""

    def __init__(self, reader: Reader) -> None:
        self.reader = reader
        self.buffer = b""

    def feed(self, pieces: list[bytes | memoryview], now_ns: int) -> None:
        data = self.buffer + b"".join(bytes(p) for p in pieces)
        *events, self.buffer = data.split(b"\n\n")
        reader = self.reader
        for event in events:
            event_id = b""
            body = b""
            for line in event.split(b"\n"):
                if line.startswith(b"id: "):
                    event_id = line[4:]
                elif line.startswith(b"data: "):
                    body = line[6:]
            if not body:
                continue
            if event_id:
                reader.last_id = event_id.decode()
            at = body.find(_PAYLOAD)
            if at >= 0:
                seq, ts = read_seq_ts(body, at + len(_PAYLOAD))
                reader.chunks += 1
                reader.payload_bytes += len(body) - at - len(_PAYLOAD) - 1
                reader.seqs.append(seq)
                if not reader.first_after_ns:
                    reader.first_after_ns = now_ns
                if ts >= reader.joined_ns:
                    reader.lags_ns.append(now_ns - ts)
            elif b'"kind":"done"' in body or b'"kind":"error"' in body:
                reader.ended = orjson.loads(body).get("finish_reason") or "error"


async def read_stream(url: str, stream_id: str, reader: Reader, resume: str = "") -> None:
    """Subscribe to ``stream_id`` at ``url`` and read until the response ends."""
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    r, w = await asyncio.open_connection(parts.hostname, parts.port)
    try:
        head = (
            f"GET /v1/streams/{stream_id}/events HTTP/1.1\r\nHost: {parts.netloc}\r\n"
            f"Accept: text/event-stream\r\n"
            + (f"Last-Event-ID: {resume}\r\n" if resume else "")
            + "\r\n"
        )
        w.write(head.encode())
        reader.joined_ns = time.monotonic_ns()
        parser = LoadResponseParser(StreamTally.__new__(StreamTally), body=NativeEvents(reader))
        while not parser.done:
            data = await r.read(1 << 16)
            if not data:
                parser.eof()
                break
            parser.feed(data, time.monotonic_ns())
    finally:
        w.close()
        with contextlib.suppress(OSError):
            await w.wait_closed()


async def create(
    client: httpx.AsyncClient,
    url: str,
    chunks: int,
    mode: str,
    interval_ms: float,
    varied: bool = False,
) -> str:
    """A load-test generation on ``url``; its id."""
    body = {
        "loadtest": {
            "chunks": chunks,
            "mode": mode,
            "interval_ms": interval_ms,
            "varied": varied,
        },
        "orphan": "keep",
    }
    response = await client.post(f"{url}/v1/streams", json=body)
    response.raise_for_status()
    return str(response.json()["id"])


async def fanout(
    producer: str,
    nodes: dict[str, str],
    args: argparse.Namespace,
    processes: dict[str, int] | None = None,
) -> dict[str, Any]:
    """Create the streams on ``producer`` and read each from the nodes in turn."""
    create_limit = asyncio.Semaphore(CREATE_CONCURRENCY)
    connect_limit = asyncio.Semaphore(CONNECT_CONCURRENCY)
    names = list(nodes)
    readers: list[Reader] = []

    async def one(client: httpx.AsyncClient, index: int) -> None:
        async with create_limit:
            stream_id = await create(
                client, producer, args.chunks, args.mode, args.interval_ms, args.varied
            )
        mine = [Reader(names[(index + k) % len(names)]) for k in range(args.readers)]
        readers.extend(mine)

        async def subscribe(reader: Reader) -> None:
            async with connect_limit:
                task = asyncio.ensure_future(read_stream(nodes[reader.node], stream_id, reader))
                await asyncio.sleep(0)
            await task

        await asyncio.gather(*(subscribe(reader) for reader in mine))

    watched = {name: psutil.Process(pid) for name, pid in (processes or {}).items()}
    cpu_before = {name: _cpu_s(p) for name, p in watched.items()}
    client_before = time.process_time()
    samples: list[tuple[float, float]] = []
    home_logs: list[tuple[float, dict[str, Any]]] = []
    start = time.monotonic()
    async with httpx.AsyncClient(timeout=30, trust_env=False) as client:
        samplers = [
            asyncio.create_task(_sample_cpu(watched, samples)),
            asyncio.create_task(_sample_home_log(client, producer, home_logs)),
        ]
        try:
            await asyncio.wait_for(
                asyncio.gather(*(one(client, i) for i in range(args.streams))), args.limit_s
            )
        finally:
            for sampler in samplers:
                sampler.cancel()
    wall = time.monotonic() - start
    cpu = {name: _cpu_s(p) - cpu_before[name] for name, p in watched.items()}
    client_cpu = time.process_time() - client_before
    total_bytes = sum(r.payload_bytes for r in readers)
    total_chunks = sum(r.chunks for r in readers)
    expected = args.streams * args.readers * args.chunks
    out: dict[str, Any] = {
        "wall_s": round(wall, 3),
        "chunks": total_chunks,
        "expected_chunks": expected,
        "payload_mb_s": round(total_bytes / wall / 1e6, 2),
        "chunks_per_s": round(total_chunks / wall),
        "incomplete_readers": sum(1 for r in readers if r.ended != "stop"),
        # Server CPU per 1000 chunks delivered: what the hub costs, whatever the machine.
        "cpu_ms_per_1000_chunks": {
            name: round(seconds * 1e6 / max(total_chunks, 1), 1) for name, seconds in cpu.items()
        },
        # Cores busy on average during the run (the servers together, and this load client):
        # where they add up to the machine's cores, lag measures the queue for them.
        "cores_used": {
            "servers": round(sum(cpu.values()) / wall, 2),
            "load_client": round(client_cpu / wall, 2),
            # The same for everything together, where the run is busiest: its middle half
            # (every stream started, none done yet in a paced run) and its busiest second.
            **_busiest(samples, start, wall),
        },
        "lag_ms": {},
    }
    if home_logs:
        # What the producer's home log writer measured halfway through (the node layout).
        middle = start + wall / 2
        out["home_log_midway"] = min(home_logs, key=lambda sample: abs(sample[0] - middle))[1]
    for name in names:
        lags = sorted(lag for r in readers if r.node == name for lag in r.lags_ns)
        if lags:
            out["lag_ms"][name] = {
                "p50": round(percentile(lags, 50) / 1e6, 2),
                "p99": round(percentile(lags, 99) / 1e6, 2),
                "samples": len(lags),
            }
    return out


async def resume_after_kill(
    a: LocalGateway, b: LocalGateway, args: argparse.Namespace
) -> dict[str, Any]:
    """Readers on B of streams produced on A; kill B; readers resume on A."""
    assert a.url is not None and b.url is not None
    async with httpx.AsyncClient(timeout=30, trust_env=False) as client:
        ids = [
            # Always paced at the seed's 20 ms: the streams must outlive the kill.
            await create(client, a.url, args.resume_chunks, "paced", 20.0)
            for _ in range(args.resume_streams)
        ]
    readers = [Reader("b") for _ in ids]
    first = [
        asyncio.ensure_future(read_stream(b.url, sid, r))
        for sid, r in zip(ids, readers, strict=True)
    ]
    await asyncio.sleep(args.resume_after_s)
    killed_ns = time.monotonic_ns()
    b.kill()
    await asyncio.gather(*first, return_exceptions=True)
    before = [list(r.seqs) for r in readers]
    for reader in readers:
        reader.first_after_ns = 0
    await asyncio.wait_for(
        asyncio.gather(
            *(
                read_stream(a.url, sid, r, resume=r.last_id)
                for sid, r in zip(ids, readers, strict=True)
            )
        ),
        args.limit_s,
    )
    latencies = sorted((r.first_after_ns - killed_ns) / 1e6 for r in readers if r.first_after_ns)
    complete = all(r.seqs == list(range(1, args.resume_chunks + 1)) for r in readers)
    return {
        "readers": len(readers),
        "chunks_before_kill_min": min(len(s) for s in before),
        "resume_ms": {
            "p50": round(percentile(latencies, 50), 1),
            "p99": round(percentile(latencies, 99), 1),
            "max": round(latencies[-1], 1),
        }
        if latencies
        else None,
        "every_chunk_once_in_order": complete,
    }


@contextlib.contextmanager
def nats_server() -> Iterator[tuple[str, int]]:
    """A throwaway ``nats-server -js`` on a free port."""
    binary = shutil.which("nats-server")
    if binary is None:
        sys.exit("nats-server is not installed (Debian package nats-server)")
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        process = subprocess.Popen(
            [binary, "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", tmp],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port)):
                    break
                time.sleep(0.05)
            yield f"nats://127.0.0.1:{port}", process.pid
        finally:
            process.terminate()
            process.wait(10)


async def _sample_cpu(
    watched: dict[str, psutil.Process], samples: list[tuple[float, float]]
) -> None:
    """Every quarter second: the time, and the CPU seconds the servers and this client have
    used (until cancelled)."""
    while True:
        used = sum(_cpu_s(p) for p in watched.values()) + time.process_time()
        samples.append((time.monotonic(), used))
        await asyncio.sleep(0.25)


async def _sample_home_log(
    client: httpx.AsyncClient, url: str, samples: list[tuple[float, dict[str, Any]]]
) -> None:
    """Every second: the producer's home log row of ``/v1/cluster`` (its flow, its wait, how
    long a publish takes), where it has one (until cancelled)."""
    while True:
        await asyncio.sleep(1.0)
        with contextlib.suppress(httpx.HTTPError, KeyError, IndexError, ValueError):
            response = await client.get(f"{url}/v1/cluster")
            own = [node for node in response.json()["nodes"] if node.get("self")]
            if own and "home_log" in own[0]:
                row = own[0]["home_log"]
                keys = ("events_per_s", "wait_ms", "publish_ms")
                samples.append((time.monotonic(), {key: row.get(key) for key in keys}))


def _busiest(samples: list[tuple[float, float]], start: float, wall: float) -> dict[str, float]:
    """Cores used by everything measured, over the run's middle half and its busiest
    second (from `_sample_cpu`'s samples; empty without enough of them)."""
    if len(samples) < 5:
        return {}

    def at(t: float) -> tuple[float, float]:
        return min(samples, key=lambda sample: abs(sample[0] - t))

    (t0, c0), (t1, c1) = at(start + wall / 4), at(start + 3 * wall / 4)
    seconds = zip(samples, samples[4:], strict=False)  # samples a second apart
    peak = max((c1_ - c0_) / (t1_ - t0_) for (t0_, c0_), (t1_, c1_) in seconds)
    out = {"all_busiest_1s": round(peak, 2)}
    if t1 > t0:
        out["all_middle_half"] = round((c1 - c0) / (t1 - t0), 2)
    return out


def _cpu_s(process: psutil.Process) -> float:
    times = process.cpu_times()
    return float(times.user + times.system)


def gateway(hub: str | None, node: str, config: Path, workers: int = 1) -> LocalGateway:
    args = ["--airc-port", "-1", "--grpc-port", "-1", "--config", str(config)]
    if hub:
        args += ["--hub", hub, "--node-id", node]
    if workers > 1:  # the supervisor starts a broker, storing under its working directory
        args += ["--workers", str(workers)]
    return LocalGateway(args, cwd=config.parent)


def worker_processes(supervisor: int) -> dict[str, int]:
    """The processes of ``airlane serve --workers``: each worker by name, and its broker."""
    named: dict[str, int] = {}
    for child in psutil.Process(supervisor).children():
        line = child.cmdline()
        if "airlane.server.worker" in line:
            named[f"w{len([n for n in named if n.startswith('w')])}"] = child.pid
        elif line and line[0].endswith("nats-server"):
            named["nats-server"] = child.pid
    return named


async def main_async(args: argparse.Namespace, config: Path) -> dict[str, Any]:
    report: dict[str, Any] = {
        "workload": {
            "streams": args.streams,
            "readers_per_stream": args.readers,
            "chunks": args.chunks,
            "mode": args.mode,
            "interval_ms": args.interval_ms,
            "storage": args.storage,
            "layout": args.layout,
            "compression": args.compression,
            "linger_ms": args.linger_ms,  # None: Airlane's defaults
            "busy_linger_ms": args.busy_linger_ms,
            "varied": args.varied,
            "workers": args.workers,
        }
    }
    runs = set(args.runs.split(","))
    if "memory" in runs:
        with gateway(None, "m", config) as m:
            assert m.url is not None
            report["memory"] = await fanout(m.url, {"m": m.url}, args, {"m": m.pid})
    with nats_server() as (hub, broker_pid):
        if "jetstream" in runs:
            with gateway(hub, "a", config) as a, gateway(hub, "b", config) as b:
                assert a.url is not None and b.url is not None
                processes = {"a": a.pid, "b": b.pid, "nats-server": broker_pid}
                try:
                    report["jetstream"] = await fanout(
                        a.url, {"a": a.url, "b": b.url}, args, processes
                    )
                except Exception:
                    # What the gateways said is where the reason is.
                    for name, node in (("a", a), ("b", b)):
                        print(f"--- gateway {name}:\n{node.output_tail()}", file=sys.stderr)
                    raise
        if args.workers > 1 and "workers" in runs:
            # One machine, every core: `airlane serve --workers N` (its own broker); the
            # load client connects to the one port, the kernel spreads connections.
            with gateway(None, "w", config, args.workers) as w:
                assert w.url is not None
                processes = worker_processes(w.pid)
                report["workers"] = await fanout(w.url, {"w": w.url}, args, processes)
        if args.resume_streams:
            with gateway(hub, "a2", config) as a, gateway(hub, "b2", config) as b:
                report["resume"] = await resume_after_kill(a, b, args)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=500)
    parser.add_argument("--readers", type=int, default=2, help="subscribers per stream")
    parser.add_argument("--chunks", type=int, default=200)
    parser.add_argument("--mode", choices=("burst", "paced"), default="paced")
    parser.add_argument("--interval-ms", type=float, default=20.0)
    parser.add_argument("--resume-streams", type=int, default=100)
    parser.add_argument("--resume-chunks", type=int, default=300)
    parser.add_argument("--resume-after-s", type=float, default=2.0)
    parser.add_argument("--limit-s", type=float, default=120.0, help="bound on each run")
    parser.add_argument(
        "--workers", type=int, default=2, help="the --workers run's count (1: no such run)"
    )
    parser.add_argument(
        "--storage", choices=("file", "memory"), default="file", help="JetStream storage"
    )
    parser.add_argument(
        "--layout",
        choices=("stream", "node"),
        default="node",
        help="the JetStream hub's layout (a subject per stream, or a home log per process)",
    )
    parser.add_argument(
        "--linger-ms",
        type=float,
        help="[jetstream] linger_ms of every JetStream node and worker (default: Airlane's)",
    )
    parser.add_argument(
        "--busy-linger-ms",
        type=float,
        help="[jetstream] busy_linger_ms, the same way (equal to --linger-ms: one fixed wait)",
    )
    parser.add_argument(
        "--compression",
        choices=("zstd", "none"),
        default="zstd",
        help="how the node layout stores home log messages (the load test's chunks differ "
        "only in their counters: zstd shrinks them far more than real LLM chunks)",
    )
    parser.add_argument(
        "--varied",
        action="store_true",
        help="chunks that differ as a model's do (~0.8 KB, tokens drawn per chunk) instead of "
        "the seed's one 1.2 KB body per stream: what compression makes of real traffic",
    )
    parser.add_argument(
        "--runs",
        default="memory,jetstream,workers",
        help="which runs, comma-separated (the resume run goes by --resume-streams)",
    )
    parser.add_argument("--json", help="write the report here ('-' for stdout)")
    args = parser.parse_args()
    unknown = set(args.runs.split(",")) - {"memory", "jetstream", "workers"}
    if unknown:
        parser.error(f"--runs: no run named {', '.join(sorted(unknown))}")
    raise_fd_limit()
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "airlane.toml"
        config.write_text(
            f'[jetstream]\nheartbeat_s = 0.5\nnode_timeout_s = 2.0\nstorage = "{args.storage}"\n'
            f'layout = "{args.layout}"\ncompression = "{args.compression}"\n'
            + "".join(
                f"{name} = {value}\n"
                for name, value in (
                    ("linger_ms", args.linger_ms),
                    ("busy_linger_ms", args.busy_linger_ms),
                )
                if value is not None
            )
        )
        report = run_on_fast_loop(main_async(args, config))
    text = orjson.dumps(report, option=orjson.OPT_INDENT_2).decode()
    if args.json == "-":
        print(text)
    elif args.json:
        Path(args.json).write_text(text + "\n")
        print(text)
    else:
        print(text)


if __name__ == "__main__":
    main()
