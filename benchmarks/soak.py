"""Soak: steady churning load for a long while, watching the gateway's memory for growth.

A gateway is spawned and pinned; ``--streams`` load-test streams (paced: 200 chunks every
20 ms, 4 s each) run at once, a ``--ws-share`` of them over WebSocket and the rest over SSE,
and each is re-opened as soon as it ends, so connections churn all the time (about
``streams / 4 s`` new connections a second at the defaults). Start times are staggered over
one stream's length, so the churn is steady rather than in waves. Every ``--sample-s`` the
gateway's RSS, PSS, open file descriptors and CPU are sampled (`airlane.bench.memory`).

Reported: RSS first (as the load starts) / last (as it ends) / max, the least-squares slope of
RSS over the second half of the run (KB = 1024 bytes per minute; the first half is warm-up:
heaps and free lists grow to their working size), errors, chunks delivered, lag and kept-up.
Memory is *flat* when the second-half slope is within ``--flat-kb-per-min`` (default 100
KB/min; a leak of one kilobyte per stream at the default churn, 3000 streams a minute, is about
3 MB/min). A clear verdict line closes the report; after the verdict's numbers it gives the
second half's median pairwise (Theil-Sen) slope and its largest rise between two samples,
which tell one step (the allocator's high-water mark moving once, e.g. at the gateway's first
full collection under load) from steady growth; they do not change the verdict.

    .venv/bin/python benchmarks/soak.py --json bench-results/soak.json \\
        --plot bench-results/soak.png                            # 10 minutes, N=200
    .venv/bin/python benchmarks/soak.py --duration-s 6 --streams 10 --chunks 20 \\
        --interval-ms 10 --sample-s 0.5                          # a smoke run

New streams start until ``--duration-s`` has passed; those in flight then finish (each bounded
by ``--stream-timeout-s``), and ``--max-streams`` bounds how many are opened in all.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import itertools
import os
import signal
import sys
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from airlane import __version__
from airlane.bench.config import BenchConfig, Transport
from airlane.bench.memory import (
    ProcessGone,
    ProcessWatch,
    ResourceSample,
    ResourceSampler,
    describe_host,
    median_slope_per_min,
    raise_fd_limit,
    slope_per_min,
)
from airlane.bench.runner import run_on_fast_loop
from airlane.bench.spawn import GatewayStartError, LocalGateway, pin_client, pin_process
from airlane.bench.sse_load import run_sse_stream
from airlane.bench.stats import MAX_ERROR_SAMPLES, Percentiles
from airlane.bench.tally import MAX_LAG_SAMPLES, StreamTally, lag_sampling_stride
from airlane.bench.ws_load import run_ws_stream

DEFAULT_DURATION_S = 600.0
"""Ten minutes: long enough for a per-connection leak to stand out from allocator noise."""
DEFAULT_STREAMS = 200
"""Concurrent streams: well within what one core keeps up with (`benchmarks/scaling.py`)."""
DEFAULT_FLAT_KB_PER_MIN = 100.0
"""Second-half RSS slope within which memory counts as flat."""
MAX_SAMPLE_S = 5.0
"""The default sampling period for long runs (120 samples in ten minutes)."""
ERROR_BACKOFF_S = 0.2
"""Pause of a stream slot after a failed stream, so a dead gateway is not hammered."""
AFTER_LOAD_S = 2.0
"""Pause after the load before the last memory reading (shorter for runs under 20 s)."""


@dataclass
class TransportTotals:
    """What one transport's streams delivered, folded in as each stream ends."""

    opened: int = 0
    completed: int = 0
    errors: int = 0
    error_samples: list[str] = field(default_factory=list)
    chunks: int = 0
    payload_bytes: int = 0
    out_of_order: int = 0
    rate_chunks: int = 0
    """Chunk intervals delivered by streams with two or more chunks (for kept-up)."""
    rate_ns: int = 0
    """Time those intervals took: last received - first scheduled."""

    def fold(self, tally: StreamTally, chunks_per_stream: int) -> None:
        """Count one finished stream."""
        self.chunks += tally.received
        self.payload_bytes += tally.payload_bytes
        self.out_of_order += tally.disorder
        if tally.received > 1:
            self.rate_chunks += tally.received - 1
            self.rate_ns += tally.last_ns - tally.first_ts
        if tally.error is None and tally.received == chunks_per_stream:
            self.completed += 1
            return
        self.errors += 1
        message = tally.error or f"stream ended after {tally.received} chunks"
        if message not in self.error_samples and len(self.error_samples) < MAX_ERROR_SAMPLES:
            self.error_samples.append(message)

    def to_dict(self, interval_ms: float, paced: bool) -> dict[str, Any]:
        """JSON form, with kept-up % in paced mode (as `airlane.bench.stats` defines it)."""
        kept_up = None
        if paced and self.rate_ns > 0:
            kept_up = round(100.0 * self.rate_chunks * interval_ms * 1e6 / self.rate_ns, 2)
        return {
            "opened": self.opened,
            "completed": self.completed,
            "errors": self.errors,
            "error_samples": self.error_samples,
            "chunks": self.chunks,
            "payload_bytes": self.payload_bytes,
            "out_of_order": self.out_of_order,
            "kept_up_pct": kept_up,
        }


def _slot_transport(index: int, ws_share: float) -> Transport:
    # Slot i is WebSocket when the running count of WebSocket slots, index * share, crosses
    # an integer: an even spread, so that staggered starts mix the two transports.
    return "ws" if int((index + 1) * ws_share) > int(index * ws_share) else "sse"


class SoakLoad:
    """The churning load: slots that each run one stream after another until the end."""

    def __init__(self, args: argparse.Namespace, port: int) -> None:
        self.workload = BenchConfig(
            streams=args.streams,
            chunks=args.chunks,
            mode=args.mode,
            interval_ms=args.interval_ms,
            timeout_s=args.stream_timeout_s,
        )
        self.port = port
        self.max_streams = args.max_streams
        self.totals: dict[Transport, TransportTotals] = {
            "sse": TransportTotals(),
            "ws": TransportTotals(),
        }
        self.lags: array[int] = array("q")
        """Sampled delivery lags (ns), bounded near `MAX_LAG_SAMPLES`."""
        # Chunks per second of one stream: paced, the target rate; burst, a guess from one
        # core's ~20k chunks/s shared by all (docs/benchmark.md). `_bound_lags` mends a bad one.
        per_second = 1000.0 / args.interval_ms if args.mode == "paced" else 20_000 / args.streams
        self.stride = lag_sampling_stride(int(args.streams * args.duration_s * per_second))
        self.slots = [_slot_transport(i, args.ws_share) for i in range(args.streams)]
        """Each slot's transport, WebSocket and SSE interleaved in the ``ws_share`` ratio."""

    @property
    def opened(self) -> int:
        """Streams opened so far."""
        return sum(t.opened for t in self.totals.values())

    async def run(self, duration_s: float, keep_going: Callable[[], bool]) -> None:
        """Run every slot until ``duration_s`` has passed (or ``keep_going()`` is false) and
        their last streams ended."""
        end = asyncio.get_running_loop().time() + duration_s
        nominal_s = self.workload.chunks * self.workload.interval_ms / 1000.0
        stagger_s = nominal_s / len(self.slots) if self.workload.mode == "paced" else 0.0
        async with asyncio.TaskGroup() as group:
            for index, transport in enumerate(self.slots):
                group.create_task(self._slot(transport, index * stagger_s, end, keep_going))

    async def _slot(
        self, transport: Transport, delay_s: float, end: float, keep_going: Callable[[], bool]
    ) -> None:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(delay_s)
        path = f"/v1/loadtest/{transport}?{self.workload.query}"
        while loop.time() < end and self.opened < self.max_streams and keep_going():
            self.totals[transport].opened += 1
            tally = StreamTally(self.lags, self.stride)
            deadline = loop.time() + self.workload.timeout_s
            if transport == "sse":
                await run_sse_stream("127.0.0.1", self.port, path, tally, deadline)
            else:
                await run_ws_stream(f"ws://127.0.0.1:{self.port}{path}", tally, deadline)
            self.totals[transport].fold(tally, self.workload.chunks)
            self._bound_lags()
            if tally.error is not None:
                await asyncio.sleep(ERROR_BACKOFF_S)

    def _bound_lags(self) -> None:
        # The stride is estimated up front; if more chunks come, keep every other sample and
        # sample half as often from now on.
        if len(self.lags) > MAX_LAG_SAMPLES:
            del self.lags[::2]
            self.stride *= 2

    def summary(self) -> dict[str, Any]:
        """Totals per transport and overall, lag percentiles."""
        paced = self.workload.mode == "paced"
        lags = Percentiles.of(sorted(lag / 1e6 for lag in self.lags))
        per_transport = {
            name: totals.to_dict(self.workload.interval_ms, paced)
            for name, totals in self.totals.items()
            if name in self.slots
        }
        return {
            "streams_opened": self.opened,
            "streams_completed": sum(t.completed for t in self.totals.values()),
            "errors": sum(t.errors for t in self.totals.values()),
            "chunks": sum(t.chunks for t in self.totals.values()),
            "lag_ms": lags.to_dict(),
            "transports": per_transport,
        }


async def soak(args: argparse.Namespace, gateway: LocalGateway) -> dict[str, Any]:
    """Run the load while sampling the gateway; return the measured part of the document."""
    assert gateway.url is not None
    load = SoakLoad(args, int(gateway.url.rsplit(":", 1)[1]))
    watch = ProcessWatch(gateway.pid)
    client = ProcessWatch(os.getpid())
    client_cpu_start = client.cpu_seconds()
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with ResourceSampler(watch, args.sample_s) as sampler:
        # A gateway that died ends the load: its streams would only pile up errors.
        await load.run(args.duration_s, keep_going=lambda: sampler.gone is None)
    wall_s = loop.time() - started
    client_cpu = 100.0 * (client.cpu_seconds() - client_cpu_start) / wall_s
    await asyncio.sleep(min(AFTER_LOAD_S, args.duration_s / 10))
    after_load = None if sampler.gone else watch.sample()
    return {
        "gateway_pid": gateway.pid,
        "wall_s": round(wall_s, 2),
        "load": load.summary(),
        "client_cpu_mean_pct": round(client_cpu, 1),
        "gateway_gone": sampler.gone,
        "samples": [sample.to_dict() for sample in sampler.samples],
        "after_load": None if after_load is None else after_load.to_dict(),
        "memory": memory_summary(sampler.samples, args.duration_s, args.flat_kb_per_min),
    }


def memory_summary(
    samples: Sequence[ResourceSample], duration_s: float, flat_kb_per_min: float
) -> dict[str, Any]:
    """RSS first / last / max, the second-half slope and the verdict on it."""
    if not samples:
        return {"flat": None}
    # The second half of the load itself: not the warm-up, nor the drain after new streams stop.
    second_half = [s for s in samples if duration_s / 2 <= s.t_s <= duration_s]
    rss_kb = [(s.t_s, s.rss_bytes / 1024) for s in second_half]
    slope = slope_per_min(rss_kb)
    # Shown beside the verdict, not part of it: whether a slope is one step or steady growth.
    median_slope = median_slope_per_min(rss_kb)
    largest_step = max((b[1] - a[1] for a, b in itertools.pairwise(rss_kb)), default=None)
    fds = [s.open_fds for s in samples if s.open_fds is not None]
    cpus = [s.cpu_pct for s in samples if s.cpu_pct is not None]
    return {
        "rss_first_bytes": samples[0].rss_bytes,
        "rss_last_bytes": samples[-1].rss_bytes,
        "rss_max_bytes": max(s.rss_bytes for s in samples),
        "rss_slope_second_half_kb_per_min": None if slope is None else round(slope, 2),
        "rss_median_slope_second_half_kb_per_min": (
            None if median_slope is None else round(median_slope, 2)
        ),
        "rss_largest_step_second_half_kb": (
            None if largest_step is None else round(largest_step, 1)
        ),
        "second_half_samples": len(second_half),
        "flat_kb_per_min": flat_kb_per_min,
        "flat": None if slope is None else abs(slope) <= flat_kb_per_min,
        "fds_first": fds[0] if fds else None,
        "fds_last": fds[-1] if fds else None,
        "fds_max": max(fds) if fds else None,
        "gateway_cpu_mean_pct": round(sum(cpus) / len(cpus), 1) if cpus else None,
        "gateway_cpu_max_pct": round(max(cpus), 1) if cpus else None,
    }


def verdict_line(document: dict[str, Any]) -> str:
    """One line: FLAT / GROWING / UNKNOWN with the numbers behind it."""
    memory, load = document["memory"], document["load"]
    slope = memory.get("rss_slope_second_half_kb_per_min")
    word = {True: "FLAT", False: "GROWING", None: "UNKNOWN"}[memory.get("flat")]
    slope_text = "no slope (too few samples)" if slope is None else f"{slope:+,.1f} KB/min"
    return (
        f"VERDICT: memory {word}: RSS slope over the second half {slope_text} "
        f"(flat within +-{memory.get('flat_kb_per_min', 0):g}); RSS first "
        f"{_mb(memory.get('rss_first_bytes'))}, last {_mb(memory.get('rss_last_bytes'))}, max "
        f"{_mb(memory.get('rss_max_bytes'))}; fds {memory.get('fds_first')} -> "
        f"{memory.get('fds_last')} (max {memory.get('fds_max')}); {load['errors']:,} errors; "
        f"{load['chunks']:,} chunks over {load['streams_opened']:,} streams"
        f"{_step_note(memory)}"
    )


def _step_note(memory: dict[str, Any]) -> str:
    """The median slope and the largest rise between two samples, when there are some."""
    median = memory.get("rss_median_slope_second_half_kb_per_min")
    step = memory.get("rss_largest_step_second_half_kb")
    if median is None or step is None:
        return ""
    return (
        f"; second half: median pairwise slope {median:+,.1f} KB/min, largest step {step:+,.0f} KB"
    )


def print_report(document: dict[str, Any]) -> None:
    """The human summary, ending with the verdict line."""
    config, load, memory = document["config"], document["load"], document["memory"]
    print(
        f"soak: {document['wall_s']:g} s, {config['streams']} concurrent streams "
        f"({config['ws_share']:.0%} WebSocket), {config['mode']}, {config['chunks']} chunks"
        + (f" every {config['interval_ms']:g} ms" if config["mode"] == "paced" else "")
    )
    for name, totals in load["transports"].items():
        kept_up = totals["kept_up_pct"]
        print(
            f"  {name:>3}: {totals['opened']:,} streams opened, {totals['completed']:,} "
            f"completed, {totals['errors']:,} errors, {totals['chunks']:,} chunks, kept up "
            f"{'-' if kept_up is None else f'{kept_up:.1f} %'}"
        )
        for message in totals["error_samples"]:
            print(f"       error: {message}")
    lag = load["lag_ms"]
    print(
        f"  lag p50 {lag['p50']} ms, p99 {lag['p99']} ms; gateway CPU mean "
        f"{memory.get('gateway_cpu_mean_pct')} % (max {memory.get('gateway_cpu_max_pct')}); "
        f"client CPU mean {document['client_cpu_mean_pct']} %"
    )
    if document["after_load"] is not None:
        print(f"  RSS once the load stopped: {_mb(document['after_load']['rss_bytes'])}")
    if document["gateway_gone"]:
        print(f"  the gateway stopped answering: {document['gateway_gone']}")
    print(verdict_line(document))


def _mb(value: int | None) -> str:
    return "-" if value is None else f"{value / 2**20:,.1f} MB"


def write_soak_plot(path: Path, document: dict[str, Any]) -> None:
    """RSS over time (with the second-half fit) and open fds on a second axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples, memory = document["samples"], document["memory"]
    duration_s = document["config"]["duration_s"]
    figure, rss_axes = plt.subplots(figsize=(10, 5), constrained_layout=True)
    try:
        times = [s["t_s"] for s in samples]
        rss_axes.plot(times, [s["rss_bytes"] / 2**20 for s in samples], label="RSS")
        _fit_line(rss_axes, samples, memory, duration_s)
        rss_axes.axvline(duration_s, color="grey", linestyle=":", label="new streams stop")
        rss_axes.set_xlabel("seconds")
        rss_axes.set_ylabel("gateway RSS (MiB)")
        fds_axes = rss_axes.twinx()
        fds_axes.plot(
            times, [s["open_fds"] for s in samples], color="tab:green", alpha=0.5, label="open fds"
        )
        fds_axes.set_ylabel("open file descriptors")
        lines = rss_axes.get_legend_handles_labels()
        more = fds_axes.get_legend_handles_labels()
        rss_axes.legend(lines[0] + more[0], lines[1] + more[1], loc="lower right")
        rss_axes.grid(True, alpha=0.3)
        figure.suptitle(verdict_line(document).split(";")[0], fontsize="medium")
        figure.savefig(path, dpi=110)
    finally:
        plt.close(figure)


def _fit_line(axes: Any, samples: list[dict[str, Any]], memory: dict[str, Any], end: float) -> None:
    slope = memory.get("rss_slope_second_half_kb_per_min")
    half = [s for s in samples if end / 2 <= s["t_s"] <= end]
    if slope is None or len(half) < 2:
        return
    mean_t = sum(s["t_s"] for s in half) / len(half)
    mean_mb = sum(s["rss_bytes"] for s in half) / len(half) / 2**20
    xs = [half[0]["t_s"], half[-1]["t_s"]]
    ys = [mean_mb + slope / 1024 * (x - mean_t) / 60 for x in xs]
    axes.plot(
        xs, ys, color="tab:red", linestyle="--", label=f"second-half fit: {slope:+,.1f} KB/min"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Command line; returns the exit status."""
    args = _parser().parse_args(argv)
    if args.sample_s is None:
        args.sample_s = min(MAX_SAMPLE_S, max(0.5, args.duration_s / 60))
    if args.stream_timeout_s is None:
        args.stream_timeout_s = max(30.0, 5 * args.chunks * args.interval_ms / 1000)
    try:
        BenchConfig(
            streams=args.streams,
            chunks=args.chunks,
            mode=args.mode,
            interval_ms=args.interval_ms,
            timeout_s=args.stream_timeout_s,
        )
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    host = describe_host()  # before pinning narrows this process's CPU affinity
    fd_limit = raise_fd_limit()  # before spawning: the gateway inherits it
    started_at = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    gateway_args = ["--config", str(args.gateway_config)] if args.gateway_config else []
    try:
        with LocalGateway(gateway_args) as gateway:
            server_cpus, pinning = pin_client()
            if server_cpus is not None:
                pin_process(gateway.pid, server_cpus)
            measured = run_on_fast_loop(soak(args, gateway))
    except (GatewayStartError, ProcessGone) as exc:
        print(f"error: the gateway: {exc}", file=sys.stderr)
        return 1
    document = {
        "benchmark": "soak",
        "airlane_version": __version__,
        "started_at": started_at,
        "host": host,
        "fd_limit": fd_limit,
        "cpu_pinning": pinning,
        "config": {key: getattr(args, key) for key in _CONFIG_KEYS},
        **measured,
    }
    print_report(document)
    if args.json is not None:
        args.json.write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n")
        print(f"results written to {args.json}")
    if args.plot is not None:
        write_soak_plot(args.plot, document)
        print(f"plot written to {args.plot}")
    return 0


_CONFIG_KEYS = (
    "duration_s",
    "streams",
    "ws_share",
    "mode",
    "chunks",
    "interval_ms",
    "sample_s",
    "stream_timeout_s",
    "max_streams",
    "flat_kb_per_min",
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="Examples are in the module docstring of benchmarks/soak.py.",
    )
    add = parser.add_argument
    add(
        "--duration-s",
        type=_positive,
        default=DEFAULT_DURATION_S,
        help="how long new streams keep starting (default: %(default)s)",
    )
    add(
        "--streams",
        type=int,
        default=DEFAULT_STREAMS,
        help="concurrent streams (default: %(default)s)",
    )
    add(
        "--ws-share",
        type=_share,
        default=0.5,
        help="share of the streams carried over WebSocket, 0-1 (default: %(default)s)",
    )
    add("--mode", choices=("paced", "burst"), default="paced")
    add("--chunks", type=int, default=200, help="chunks per stream (default: 200)")
    add("--interval-ms", type=float, default=20.0, help="paced interval (default: 20)")
    add(
        "--sample-s",
        type=_positive,
        default=None,
        help="sampling period (default: duration / 60, between 0.5 and 5 s)",
    )
    add(
        "--stream-timeout-s",
        type=_positive,
        default=None,
        help="time limit of one stream (default: 5x its paced length, at least 30 s)",
    )
    add(
        "--max-streams",
        type=_count,
        default=1_000_000,
        help="streams opened in all, at most (default: %(default)s)",
    )
    add(
        "--flat-kb-per-min",
        type=float,
        default=DEFAULT_FLAT_KB_PER_MIN,
        help="second-half RSS slope still called flat (default: %(default)s)",
    )
    add("--gateway-config", type=Path, help="TOML file for the spawned gateway (--config)")
    add("--json", type=Path, help="write the results here")
    add("--plot", type=Path, help="write a PNG plot of RSS over time here")
    return parser


def _positive(text: str) -> float:
    value = float(text)
    if not 0 < value <= 7 * 24 * 3600:
        raise argparse.ArgumentTypeError("must be positive (and at most a week)")
    return value


def _share(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError("must be between 0 and 1")
    return value


def _count(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


if __name__ == "__main__":
    # A SIGTERM (a CI time limit, say) unwinds like Ctrl-C does, so the gateway is stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    sys.exit(main())
