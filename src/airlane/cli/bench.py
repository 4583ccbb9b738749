"""``airlane bench``: the seed's streaming workload against a gateway, through the full path.

A thin command over `airlane.bench`: it checks the options and builds the `BenchConfig`;
`airlane.cli.bench_run` then finds (or starts, with ``--spawn``) the gateway, pins gateway and
client to different cores when there are two, runs each transport with a progress bar, prints
the table and writes ``--json`` / ``--plot``.
The transports: ``sse``, ``ws`` (``both``, the default), ``airc`` (AIRC/TCP, at ``--airc-url``
or where the spawned gateway says), ``airc-ws`` (AIRC over ``/v1/ws``), ``grpc`` (``Generate`` on
the gRPC listener: the HTTP port + 2, or where the spawned gateway says), ``grpc-web`` (the same
over gRPC-Web on the HTTP port), ``rsocket`` (a request-stream on the RSocket/TCP listener: the
HTTP port + 3, or where the spawned gateway says); ``all`` is all seven.
With ``--compare`` (or ``--peers``), the same workload then runs against each reference server
of ``benchmarks/peers`` (`airlane.bench.compare`), each started fresh on the gateway's core,
and one table shows them all side by side; with ``--runs K``, K rounds in alternating order,
summarised as medians and ranges, ratios taken within each round
(`airlane.bench.compare_rounds`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal, cast

import typer
from rich.console import Console

from airlane.bench.config import (
    DEFAULT_CHUNKS,
    DEFAULT_INTERVAL_MS,
    DEFAULT_STREAMS,
    MAX_RUNS,
    TRANSPORTS,
    BenchConfig,
    Transport,
    airc_address,
    loopback_address,
)
from airlane.bench.config import DEFAULT_TIMEOUT_S as DEFAULT_BENCH_TIMEOUT_S
from airlane.bench.peers import PEER_NAMES, select_peers

__all__ = ["bench_command"]

_TRANSPORTS: dict[str, tuple[Transport, ...]] = {"both": ("sse", "ws"), "all": TRANSPORTS}
"""The ``--transport`` values that name several transports."""


def bench_command(
    streams: Annotated[int, typer.Option(help="Concurrent streams.", min=1)] = DEFAULT_STREAMS,
    chunks: Annotated[int, typer.Option(help="Chunks per stream (~1.2 KB each).", min=1)] = (
        DEFAULT_CHUNKS
    ),
    mode: Annotated[
        Literal["burst", "paced"], typer.Option(help="burst: as fast as possible; paced.")
    ] = "burst",
    interval_ms: Annotated[float, typer.Option(help="Chunk interval in paced mode.")] = (
        DEFAULT_INTERVAL_MS
    ),
    transport: Annotated[
        Literal["sse", "ws", "airc", "airc-ws", "grpc", "grpc-web", "rsocket", "both", "all"],
        typer.Option(
            help="Transport(s) to measure: both = sse + ws; all = sse, ws, airc (AIRC/TCP), "
            "airc-ws (AIRC over WebSocket), grpc, grpc-web and rsocket (RSocket/TCP)."
        ),
    ] = "both",
    url: Annotated[str | None, typer.Option(help="A loopback gateway to measure.")] = None,
    airc_url: Annotated[
        str | None,
        typer.Option(
            help="With --url: the gateway's AIRC/TCP listener, tcp://host:port (loopback; "
            "default: the HTTP port + 1)."
        ),
    ] = None,
    spawn: Annotated[
        bool, typer.Option("--spawn", help="Start a gateway subprocess (synthetic backend).")
    ] = False,
    hub: Annotated[
        str | None,
        typer.Option(
            help="The spawned gateway's hub: NATS JetStream URLs, nats://host:4222 (what "
            "appends through the broker cost; implies --spawn)."
        ),
    ] = None,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write results as JSON.")] = None,
    plot_path: Annotated[Path | None, typer.Option("--plot", help="Write a PNG plot.")] = None,
    timeout: Annotated[float, typer.Option(help="Time limit per transport, seconds.")] = (
        DEFAULT_BENCH_TIMEOUT_S
    ),
    compare: Annotated[
        bool,
        typer.Option(
            "--compare",
            help="Run the same workload against reference servers too (benchmarks/peers) and "
            "compare; implies --spawn.",
        ),
    ] = False,
    runs: Annotated[
        int,
        typer.Option(
            help=f"Run the workload this many times against the same gateway and report each "
            f"number's median and range (1 to {MAX_RUNS}); with --compare, this many rounds "
            "of every server, in alternating order, and the ratios' medians.",
            min=1,
            max=MAX_RUNS,
        ),
    ] = 1,
    peers: Annotated[
        str | None,
        typer.Option(
            help=f"Peers for --compare, comma-separated ({', '.join(PEER_NAMES)}); "
            "implies --compare. Default: all."
        ),
    ] = None,
) -> None:
    """Drive N concurrent load-test streams over SSE, WebSocket, AIRC and/or gRPC and report.

    Burst: every chunk as fast as the gateway sends it. Paced: one chunk per --interval-ms
    per stream, as a model would produce tokens. Exit status: 0 all streams completed; 1 some
    failed; 2 bad arguments, or a --json/--plot path that cannot be written (said before the
    run); 3 nothing connected at all.
    """
    console = Console()
    compare = compare or peers is not None
    try:
        config = BenchConfig(
            streams=streams,
            chunks=chunks,
            mode=mode,
            interval_ms=interval_ms,
            transports=_TRANSPORTS.get(transport) or (cast(Transport, transport),),
            timeout_s=timeout,
        )
        if hub is not None:
            if url is not None or compare:
                raise ValueError("--hub is the spawned gateway's: leave out --url and --compare")
            if not hub.startswith("nats://"):
                raise ValueError(f"--hub takes nats://host:port URLs, not {hub!r}")
            spawn = True
        if spawn and url is not None:
            raise ValueError("give --url or --spawn, not both")
        if compare and url is not None:
            raise ValueError("--compare starts every server itself: leave out --url")
        if compare and any(t.startswith(("airc", "grpc", "rsocket")) for t in config.transports):
            raise ValueError(
                "--compare measures SSE and WebSocket only (the reference servers do not speak "
                "AIRC, gRPC or RSocket): use --transport sse, ws or both"
            )
        if airc_url is not None and url is None:
            raise ValueError("--airc-url goes with --url (a spawned gateway names its own)")
        if url is not None:
            loopback_address(url)
        airc = airc_address(airc_url) if airc_url is not None else None
        selected = select_peers(peers) if compare else []
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    for option, path in (("--json", json_path), ("--plot", plot_path)):
        if path is not None:
            _output(console, option, path)
    # The measuring side (load clients, gateway, report) loads only when a run starts.
    from airlane.cli import bench_run

    if compare:
        bench_run.compare(console, config, selected, json_path, plot_path, runs=runs)
    else:
        bench_run.run(
            console,
            config,
            spawn=spawn,
            url=url,
            airc=airc,
            hub=hub,
            json_path=json_path,
            plot_path=plot_path,
            runs=runs,
        )


PLOT_SUFFIXES = (".png", ".svg", ".pdf")
"""What ``--plot`` can write."""


def _output(console: Console, option: str, path: Path) -> None:
    """Make ``path``'s folder, before the run, and say in one line (exit 2) if the file
    cannot be written there: a run of minutes must not end in a traceback."""
    problem = None
    if option == "--plot" and path.suffix.lower() not in PLOT_SUFFIXES:
        problem = f"write {', '.join(PLOT_SUFFIXES)}, not {path.suffix or 'no suffix'}"
    else:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            problem = f"cannot make its folder: {exc.strerror or exc}"
        else:
            writable = path.parent if not path.exists() else path
            if path.is_dir():
                problem = "it is a folder"
            elif not os.access(writable, os.W_OK):
                problem = f"{writable} is not writable"
    if problem is not None:
        console.print(f"airlane bench: {option} {path}: {problem}", highlight=False)
        raise typer.Exit(2)
