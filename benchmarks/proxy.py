"""Proxy mode: Airlane's added latency per chunk in front of an OpenAI-compatible upstream.

Starts `benchmarks/upstream.py` (paced chat completion streams, each chunk stamped with its
scheduled send time) and an ``airlane serve --upstream`` gateway in front of it, then runs N
concurrent streaming chat completions twice: straight at the upstream (the baseline) and
through the gateway. For every chunk, lag = receive time - scheduled send time; the gateway's
added latency is the difference of the two lag distributions, compared at the same
percentiles, and of their means. It also reports the usage ledger's ``gateway_latency_ms``
from the final usage chunk of each proxied stream, and the CPU each process used. Each
lag summary is given twice: over the whole run, and over the chunks scheduled while every
stream ran ("steady"), which leaves out the set-ups at the start and the teardown at the end.

``--via`` puts something else in the gateway's place, run the same way: ``relay``, a TCP
relay that copies bytes and parses nothing (`peers/proxy_relay.py`: the floor of any proxy on
this loop), or the proxies a user would write with ``aiohttp`` or ``fastapi`` + httpx
(`peers/proxy_aiohttp.py`, `peers/proxy_fastapi.py`), which pass the upstream's bytes
through untouched.

    .venv/bin/python benchmarks/proxy.py --streams 500 --chunks 200 --interval-ms 20
    .venv/bin/python benchmarks/proxy.py --via aiohttp --streams 500 --chunks 200
    .venv/bin/python benchmarks/proxy.py --streams 3 --chunks 5 --interval-ms 5 --json -

Pinning (on a machine with two or more cores): the gateway gets core 0 to itself, as in the
target ("through one gateway core"); the upstream and this client share core 1. Both are load
generators doing the same work in both runs (the same streams, the same chunks), so the cost
of sharing a core shows up in the baseline and the proxied lag alike and cancels in the
difference; putting the upstream on the gateway's core instead would bill its work to the
gateway. Streams start spread evenly over one interval (``--spread-ms``), as independent
generations are, rather than all due at the same instant.

The client is raw asyncio: one `asyncio.Protocol` per stream, the HTTP/1.1 response parsed by
`airlane.backends.http11.ResponseParser`, stamps found with a regular expression in each read;
a chunk's receive time is taken when its bytes reach ``data_received``. Everything it starts
(two processes, the streams) is bounded in time and stopped on the way out.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

import orjson
import psutil
import uvloop

from airlane.backends.http11 import ResponseEnd, ResponseHead, ResponseParser
from airlane.backends.upstream_errors import UpstreamHTTPError
from airlane.bench.spawn import LocalGateway, ServerProcess, pin_process, pinning_plan

sys.path.insert(0, str(Path(__file__).resolve().parent))
from upstream import STAMP  # a sibling script, not a package

UPSTREAM_SCRIPT = Path(__file__).resolve().parent / "upstream.py"
PEERS = Path(__file__).resolve().parent / "peers"
VIAS = ("airlane", "relay", "aiohttp", "fastapi")
"""What sits between client and upstream: Airlane, or a reference (``peers/proxy_*.py``)."""
MAX_STREAMS = 5000
"""More would exceed what one client core can time honestly."""
MAX_PENDING_BYTES = 1 << 20
"""Bytes of an unterminated line a stream may hold before it is declared broken."""
_READY_TIMEOUT_S = 30.0
_STOP_TIMEOUT_S = 10.0
_SLACK_S = 30.0  # beyond the streams' own duration, before a phase is abandoned
_USAGE = b'"usage":'
_ERROR = b'"error":'
_READY = re.compile(rb"upstream listening on (http://\S+)")


# -- one stream --------------------------------------------------------------------------------


@dataclass
class StreamResult:
    """What one stream received."""

    lags_ns: list[int] = field(default_factory=list)
    """Receive time - scheduled time, per chunk, in arrival order."""
    stamps: list[int] = field(default_factory=list)
    """Chunk indices, in arrival order."""
    scheduled_ns: list[int] = field(default_factory=list)
    """Each chunk's scheduled send time (the upstream's clock, CLOCK_MONOTONIC), same order."""
    usage: dict[str, Any] | None = None
    """The final usage chunk's ``usage``."""
    error: str | None = None
    """Why the stream failed, if it did."""
    connect_ns: int = 0
    """When the client began to connect (CLOCK_MONOTONIC)."""
    first_chunk_ns: int = 0
    """When the first stamped chunk arrived; 0 if none did."""


class _StreamClient(asyncio.Protocol):
    """Sends one streaming chat completion and timestamps every stamped chunk it receives."""

    def __init__(self, request: bytes, result: StreamResult) -> None:
        self.request = request
        self.result = result
        self.parser = ResponseParser()
        self.pending = b""
        self.status = 0
        self.finished: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        now = time.monotonic_ns()
        try:
            events = self.parser.receive_data(data)
        except UpstreamHTTPError as exc:
            self._end(str(exc))
            return
        for event in events:
            if isinstance(event, bytes):
                self._body(event, now)
            elif isinstance(event, ResponseHead):
                self.status = event.status
            elif isinstance(event, ResponseEnd):
                self._end(None if self.status == 200 else f"HTTP {self.status}")

    def connection_lost(self, exc: Exception | None) -> None:
        self._end(f"connection lost: {exc or 'closed'}")

    def _body(self, data: bytes, now: int) -> None:
        # Only complete lines: a stamp is never cut by a read boundary.
        data = self.pending + data
        cut = data.rfind(b"\n") + 1
        lines, self.pending = data[:cut], data[cut:]
        if len(self.pending) > MAX_PENDING_BYTES:
            self._end("an event line longer than 1 MiB")
            return
        result = self.result
        if not result.first_chunk_ns and STAMP.search(lines):
            result.first_chunk_ns = now
        for match in STAMP.finditer(lines):
            scheduled = int(match[2])
            result.stamps.append(int(match[1]))
            result.scheduled_ns.append(scheduled)
            result.lags_ns.append(now - scheduled)
        if _ERROR in lines and result.error is None:
            # An error frame (the gateway's, after an upstream failure): the stream failed.
            start = lines.find(_ERROR)
            result.error = lines[start : start + 200].decode(errors="replace")
        if _USAGE in lines:
            for line in lines.split(b"\n"):
                if line.startswith(b"data: {") and _USAGE in line:
                    result.usage = orjson.loads(line[6:]).get("usage")

    def _end(self, error: str | None) -> None:
        if self.finished.done():
            return
        self.result.error = error
        self.finished.set_result(None)
        if self.transport is not None:
            self.transport.close()


def chat_request(url: str, chunks: int, interval_ms: float) -> tuple[str, int, bytes]:
    """``(host, port, request bytes)`` for a streaming chat completion at ``url``."""
    parts = urlsplit(url)
    body = orjson.dumps(
        {
            "model": "bench",
            "messages": [{"role": "user", "content": "proxy benchmark"}],
            "stream": True,
            "stream_options": {"include_usage": True},
            "bench": {"chunks": chunks, "interval_ms": interval_ms},
        }
    )
    head = (
        f"POST {parts.path or '/'} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
        "Content-Type: application/json\r\nAccept: text/event-stream\r\n"
        f"Connection: close\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    assert parts.hostname is not None and parts.port is not None
    return parts.hostname, parts.port, head.encode() + body


async def _one_stream(host: str, port: int, request: bytes, delay_s: float) -> StreamResult:
    await asyncio.sleep(delay_s)
    result = StreamResult(connect_ns=time.monotonic_ns())
    loop = asyncio.get_running_loop()
    try:
        _, client = await loop.create_connection(lambda: _StreamClient(request, result), host, port)
    except OSError as exc:
        result.error = f"cannot connect: {exc}"
        return result
    try:
        await client.finished
    finally:
        if client.transport is not None:
            client.transport.close()
    return result


async def run_phase(
    url: str, streams: int, chunks: int, interval_ms: float, spread_ms: float
) -> list[StreamResult]:
    """``streams`` concurrent completions at ``url``, started over ``spread_ms``; bounded."""
    host, port, request = chat_request(url, chunks, interval_ms)
    duration_s = (spread_ms + (chunks + 1) * interval_ms) / 1000
    step_s = spread_ms / 1000 / streams
    async with asyncio.timeout(duration_s + _SLACK_S), asyncio.TaskGroup() as group:
        tasks = [
            group.create_task(_one_stream(host, port, request, i * step_s)) for i in range(streams)
        ]
    return [task.result() for task in tasks]


# -- statistics ----------------------------------------------------------------------------------

PERCENTILES = (50.0, 90.0, 99.0, 99.9)


def summarize(lags_ns: list[int]) -> dict[str, float]:
    """Percentiles (nearest rank), mean and max of ``lags_ns``, in milliseconds."""
    if not lags_ns:
        return {"samples": 0}
    ordered = sorted(lags_ns)
    out: dict[str, float] = {"samples": len(ordered)}
    for p in PERCENTILES:
        rank = max(1, -(-len(ordered) * p // 100))
        out[f"p{p:g}"] = round(ordered[int(rank) - 1] / 1e6, 3)
    out["mean"] = round(sum(ordered) / len(ordered) / 1e6, 3)
    out["max"] = round(ordered[-1] / 1e6, 3)
    return out


def added(direct: dict[str, float], proxied: dict[str, float]) -> dict[str, float]:
    """Proxied minus direct, at each percentile and for the mean (ms)."""
    keys = [f"p{p:g}" for p in PERCENTILES] + ["mean"]
    return {k: round(proxied[k] - direct[k], 3) for k in keys if k in direct and k in proxied}


def baseline_check(direct_lag: dict[str, float], interval_ms: float) -> dict[str, Any]:
    """Whether the baseline kept pace: its lag p99 within one interval. The baseline is the
    upstream and this client alone, sharing a core; when they fall behind (a slow machine, a
    run too large for that core), both phases measure them, and the difference between the
    two, the "added latency", measures nothing (it can even come out negative)."""
    p99 = direct_lag.get("p99")
    return {
        "kept_pace": p99 is not None and p99 <= interval_ms,
        "lag_p99_ms": p99,
        "bound_ms": interval_ms,
    }


def ledger_summary(results: list[StreamResult]) -> dict[str, Any]:
    """The ledger's ``gateway_latency_ms`` over all proxied streams (ms). Each stream reports
    its own histogram summary, so the streams' p50 and p99 are summarized, not merged."""
    reports = [
        r.usage["gateway_latency_ms"]
        for r in results
        if r.usage and isinstance(r.usage.get("gateway_latency_ms"), dict)
    ]
    if not reports:
        return {"streams": 0}
    samples = sum(int(r.get("samples", 0)) for r in reports)
    mean = sum(r["mean"] * r.get("samples", 0) for r in reports) / samples if samples else 0.0
    p50s = sorted(r["p50"] for r in reports)
    p99s = sorted(r["p99"] for r in reports)
    return {
        "streams": len(reports),
        "samples": samples,
        "mean": round(mean, 3),
        "p50_median_of_streams": p50s[len(p50s) // 2],
        "p99_median_of_streams": p99s[len(p99s) // 2],
        "p99_max_of_streams": p99s[-1],
        "max": max(r["max"] for r in reports),
    }


def steady_lags(results: list[StreamResult]) -> list[int]:
    """The lags of chunks scheduled while every stream ran: after the last stream's first
    chunk and before the first stream's last one. The run's edges (set-ups arriving
    together, teardown) are left out, as the bench's "while all ran" does."""
    scheduled = [r.scheduled_ns for r in results if r.scheduled_ns]
    if not scheduled:
        return []
    start = max(times[0] for times in scheduled)
    end = min(times[-1] for times in scheduled)
    return [
        lag
        for r in results
        for at, lag in zip(r.scheduled_ns, r.lags_ns, strict=True)
        if start <= at <= end
    ]


def phase_report(results: list[StreamResult], chunks: int, cpu: dict[str, float]) -> dict[str, Any]:
    """Lag summary (whole run and while every stream ran), completeness and CPU of one phase."""
    lags = [lag for r in results for lag in r.lags_ns]
    errors = [r.error for r in results if r.error]
    complete = sum(1 for r in results if r.stamps == list(range(chunks)))
    ttfc = [r.first_chunk_ns - r.connect_ns for r in results if r.first_chunk_ns]
    return {
        "lag_ms": summarize(lags),
        "lag_ms_steady": summarize(steady_lags(results)),
        # Connect to first content chunk, the upstream's own delay (one interval) included:
        # what set-up costs, where lag cannot see it (the upstream stamps from its start).
        "ttfc_ms": summarize(ttfc),
        "streams_complete": complete,
        "chunks_received": len(lags),
        "chunks_expected": len(results) * chunks,
        "errors": sorted(set(errors))[:5],
        "error_count": len(errors),
        "cpu_pct": cpu,
    }


# -- processes -----------------------------------------------------------------------------------


class UpstreamProcess:
    """``benchmarks/upstream.py`` on a free port; stopped with SIGINT, then killed."""

    def __init__(self, chunks: int, interval_ms: float) -> None:
        self.command = [
            sys.executable, str(UPSTREAM_SCRIPT), "--port", "0",
            "--chunks", str(chunks), "--interval-ms", str(interval_ms),
        ]  # fmt: skip
        self.process: subprocess.Popen[bytes] | None = None
        self.url = ""

    def __enter__(self) -> UpstreamProcess:
        self.process = subprocess.Popen(
            self.command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=None
        )
        try:
            self.url = self._wait_ready()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc_info: object) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if process.stdout is not None:
            process.stdout.close()

    @property
    def pid(self) -> int:
        """The process id."""
        assert self.process is not None
        return self.process.pid

    def _wait_ready(self) -> str:
        assert self.process is not None and self.process.stdout is not None
        deadline = time.monotonic() + _READY_TIMEOUT_S
        seen = b""
        while (left := deadline - time.monotonic()) > 0:
            readable, _, _ = select.select([self.process.stdout], [], [], min(left, 0.1))
            if readable:
                data = os.read(self.process.stdout.fileno(), 4096)
                if not data:
                    break
                seen = (seen + data)[-4096:]
                match = _READY.search(seen)
                if match:
                    return match.group(1).decode()
            elif self.process.poll() is not None:
                break
        raise RuntimeError(f"the upstream did not start: {seen.decode(errors='replace')!r}")


class CpuMeter:
    """CPU time of some processes between `start` and `stop`, as % of one core."""

    def __init__(self, pids: dict[str, int]) -> None:
        self._processes = {name: psutil.Process(pid) for name, pid in pids.items()}
        self._start: dict[str, float] = {}
        self._started = 0.0

    def _cpu(self, process: psutil.Process) -> float:
        times = process.cpu_times()
        return float(times.user + times.system)

    def start(self) -> None:
        """Begin a measurement."""
        self._started = time.monotonic()
        self._start = {name: self._cpu(p) for name, p in self._processes.items()}

    def stop(self) -> dict[str, float]:
        """Mean CPU of each process since `start`."""
        wall = max(time.monotonic() - self._started, 1e-9)
        return {
            name: round(100 * (self._cpu(p) - self._start[name]) / wall, 1)
            for name, p in self._processes.items()
        }


# -- the run -------------------------------------------------------------------------------------


async def measure(args: argparse.Namespace, upstream_url: str, gateway_url: str,
                  meter: CpuMeter) -> dict[str, Any]:  # fmt: skip
    """Warm up, then the baseline and the proxied phase."""
    spread = args.interval_ms if args.spread_ms is None else args.spread_ms
    warm = min(args.streams, 10)
    for url in (upstream_url, gateway_url):
        await run_phase(f"{url}/v1/chat/completions", warm, 3, args.interval_ms, spread)
    phases: dict[str, Any] = {}
    results: dict[str, list[StreamResult]] = {}
    for name, url in (("direct", upstream_url), ("proxied", gateway_url)):
        meter.start()
        started = time.monotonic()
        results[name] = await run_phase(
            f"{url}/v1/chat/completions", args.streams, args.chunks, args.interval_ms, spread
        )
        phases[name] = phase_report(results[name], args.chunks, meter.stop())
        # Paced streams last (spread + chunks * interval) at best; longer means a side lagged.
        phases[name]["wall_s"] = round(time.monotonic() - started, 3)
    direct, proxied = phases["direct"]["lag_ms"], phases["proxied"]["lag_ms"]
    extra = added(direct, proxied)
    steady = added(phases["direct"]["lag_ms_steady"], phases["proxied"]["lag_ms_steady"])
    ledger = ledger_summary(results["proxied"])
    if "mean" in extra and ledger.get("samples"):
        # The ledger times append -> socket write; the rest of the added mean is the read
        # side (upstream socket -> backend -> append) and the extra loopback hop.
        extra["mean_outside_ledger"] = round(extra["mean"] - ledger["mean"], 3)
    return {
        "config": {
            "streams": args.streams,
            "chunks": args.chunks,
            "interval_ms": args.interval_ms,
            "spread_ms": spread,
            "target_chunks_per_s": round(args.streams * 1000 / args.interval_ms),
            "via": args.via,
        },
        "direct": phases["direct"],
        "proxied": phases["proxied"],
        "baseline": baseline_check(direct, args.interval_ms),
        "added_latency_ms": extra,
        "added_latency_ms_steady": steady,
        "ledger_gateway_latency_ms": ledger,
    }


def proxy_process(via: str, upstream_url: str) -> ServerProcess:
    """The proxy under test, not yet started: Airlane's gateway or a reference peer."""
    if via == "airlane":
        return LocalGateway(["--upstream", upstream_url])
    script = PEERS / f"proxy_{via}.py"
    command = [sys.executable, str(script), "--port", "0", "--upstream", upstream_url]
    return ServerProcess(command, name=f"proxy peer {via}", cwd=PEERS)


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Start the processes, measure, stop them; return the report."""
    plan = None if args.no_pin else pinning_plan()
    with (
        UpstreamProcess(args.chunks, args.interval_ms) as upstream,
        proxy_process(args.via, f"{upstream.url}/v1") as gateway,
    ):
        assert gateway.url is not None
        if plan is not None:
            gateway_cpus, client_cpus = plan
            pin_process(gateway.pid, gateway_cpus)
            pin_process(upstream.pid, client_cpus)
            pin_process(os.getpid(), client_cpus)
        meter = CpuMeter({"gateway": gateway.pid, "upstream": upstream.pid, "client": os.getpid()})
        report = uvloop.run(measure(args, upstream.url, gateway.url, meter))
    pinning = None
    if plan is not None:
        pinning = {"gateway": sorted(plan[0]), "upstream+client": sorted(plan[1])}
    report["machine"] = {
        "cpus": os.cpu_count(),
        "pinning": pinning,
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }
    return report


def print_report(report: dict[str, Any]) -> None:
    """A short human-readable summary."""
    config = report["config"]
    print(
        f"{config['streams']} streams x {config['chunks']} chunks every "
        f"{config['interval_ms']} ms ({config['target_chunks_per_s']} chunks/s), "
        f"via {config.get('via', 'airlane')}"
    )
    for name in ("direct", "proxied"):
        phase = report[name]
        lag = phase["lag_ms"]
        print(
            f"  {name:8} lag p50 {lag.get('p50', 0):7.3f}  p99 {lag.get('p99', 0):7.3f}  "
            f"mean {lag.get('mean', 0):7.3f} ms   chunks {phase['chunks_received']}/"
            f"{phase['chunks_expected']}  errors {phase['error_count']}  wall {phase['wall_s']} s"
            f"  cpu {phase['cpu_pct']}"
        )
        ttfc = phase["ttfc_ms"]
        print(f"  {'':8} time to first chunk p50 {ttfc.get('p50', 0):8.3f}  "
              f"p99 {ttfc.get('p99', 0):8.3f} ms")  # fmt: skip
    baseline = report["baseline"]
    if not baseline["kept_pace"]:
        print(
            f"  ! the baseline lagged (direct p99 {baseline['lag_p99_ms']} ms, more than one "
            "interval): the upstream and the client are past their core, so the added latency "
            "below measures nothing; run fewer streams or on a quieter machine"
        )
    for name, key in (("added", "added_latency_ms"), ("steady", "added_latency_ms_steady")):
        add = report[key]
        print(f"  {name:8} p50 {add.get('p50', 0):7.3f}  p99 {add.get('p99', 0):7.3f}  "
              f"mean {add.get('mean', 0):7.3f} ms")  # fmt: skip
    steady = report["proxied"]["lag_ms_steady"]
    print(f"  (steady: the {steady.get('samples', 0)} proxied chunks scheduled while every "
          "stream ran)")  # fmt: skip
    print(f"  ledger gateway_latency_ms: {report['ledger_gateway_latency_ms']}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=500)
    parser.add_argument("--chunks", type=int, default=200, help="chunks per stream (seed: 200)")
    parser.add_argument("--interval-ms", type=float, default=20.0)
    parser.add_argument(
        "--spread-ms", type=float, default=None, help="start streams over this (default: interval)"
    )
    parser.add_argument(
        "--via",
        choices=VIAS,
        default="airlane",
        help="the proxy measured: Airlane's gateway (default), a TCP relay (the floor), or an "
        "aiohttp / FastAPI + httpx proxy",
    )
    parser.add_argument("--no-pin", action="store_true", help="do not pin processes to cores")
    parser.add_argument("--json", metavar="PATH", help="write the report as JSON ('-': stdout)")
    args = parser.parse_args(argv)
    if not 1 <= args.streams <= MAX_STREAMS:
        parser.error(f"--streams must be 1 to {MAX_STREAMS}")
    if not 1 <= args.chunks <= 10_000 or not 0 < args.interval_ms <= 10_000:
        parser.error("--chunks must be 1 to 10000 and --interval-ms 0 to 10000")
    return args


def main(argv: list[str] | None = None) -> None:
    """Command line."""
    args = parse_args(argv)
    report = run(args)
    if args.json == "-":
        print(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode())
        return
    print_report(report)
    if args.json:
        Path(args.json).write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2))


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
