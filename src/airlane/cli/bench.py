"""``airlane bench``: the seed's streaming workload against a gateway, through the full path.

A thin command over `airlane.bench`: build the `BenchConfig`, find (or start, with
``--spawn``) the gateway, pin gateway and client to different cores when there are two,
run each transport with a progress bar, then print the table and write ``--json`` / ``--plot``.
The transports: ``sse``, ``ws`` (``both``, the default), ``airc`` (AIRC/TCP, at ``--airc-url``
or where the spawned gateway says), ``airc-ws`` (AIRC over ``/v1/ws``), ``grpc`` (``Generate`` on
the gRPC listener: the HTTP port + 2, or where the spawned gateway says), ``grpc-web`` (the same
over gRPC-Web on the HTTP port); ``all`` is all six.
With ``--compare`` (or ``--peers``), the same workload then runs against each reference server
of ``benchmarks/peers`` (`airlane.bench.compare`), each started fresh on the gateway's core,
and one table shows them all side by side.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal, cast

import orjson
import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from airlane.bench import (
    BenchConfig,
    GatewayStartError,
    LocalGateway,
    TransportResult,
    bench_document,
    client_bound,
    gateway_pid,
    loopback_address,
    pin_process,
    results_table,
    run_bench,
    write_plot,
)
from airlane.bench.compare import ImplementationRun, run_compare
from airlane.bench.compare_report import compare_document, compare_table
from airlane.bench.config import (
    DEFAULT_CHUNKS,
    DEFAULT_INTERVAL_MS,
    DEFAULT_STREAMS,
    TRANSPORTS,
    Transport,
    airc_address,
)
from airlane.bench.config import DEFAULT_TIMEOUT_S as DEFAULT_BENCH_TIMEOUT_S
from airlane.bench.memory import describe_python
from airlane.bench.peers import PEER_NAMES, Implementation, airlane_implementation, select_peers
from airlane.bench.runner import run_on_fast_loop
from airlane.bench.spawn import pin_client
from airlane.gcpacer import tune_gc
from airlane.server import DEFAULT_HOST, DEFAULT_PORT

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
        Literal["sse", "ws", "airc", "airc-ws", "grpc", "grpc-web", "both", "all"],
        typer.Option(
            help="Transport(s) to measure: both = sse + ws; all = sse, ws, airc (AIRC/TCP), "
            "airc-ws (AIRC over WebSocket), grpc and grpc-web."
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
    peers: Annotated[
        str | None,
        typer.Option(
            help=f"Peers for --compare, comma-separated ({', '.join(PEER_NAMES)}); "
            "implies --compare. Default: all."
        ),
    ] = None,
) -> None:
    """Drive N concurrent load-test streams over SSE, WebSocket and/or AIRC and report."""
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
        if spawn and url is not None:
            raise ValueError("give --url or --spawn, not both")
        if compare and url is not None:
            raise ValueError("--compare starts every server itself: leave out --url")
        if compare and any(t.startswith(("airc", "grpc")) for t in config.transports):
            raise ValueError(
                "--compare measures SSE and WebSocket only (the reference servers do not speak "
                "AIRC or gRPC): use --transport sse, ws or both"
            )
        if airc_url is not None and url is None:
            raise ValueError("--airc-url goes with --url (a spawned gateway names its own)")
        if url is not None:
            loopback_address(url)
        airc = airc_address(airc_url) if airc_url is not None else None
        selected = select_peers(peers) if compare else []
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    if compare:
        _compare(console, config, selected, json_path, plot_path)
        return
    gateway = LocalGateway() if spawn else None
    try:
        target, pinning = _prepare(console, gateway, url)
        if gateway is not None:
            airc = gateway.airc
            if airc is None and "airc" in config.transports:
                console.print("[red]the spawned gateway has no AIRC/TCP listener[/red]")
                raise typer.Exit(1)
        server_pid = gateway_pid(target)
        grpc = gateway.grpc if gateway is not None else None
        results = run_on_fast_loop(
            _measure(console, config, target, server_pid, airc=airc, grpc=grpc)
        )
    except GatewayStartError as exc:
        console.print(f"[red]could not start the gateway:[/red] {exc}")
        raise typer.Exit(1) from None
    finally:
        if gateway is not None:
            gateway.stop()
    _report(console, config, results, target, gateway is not None, pinning, json_path, plot_path)


def _prepare(
    console: Console, gateway: LocalGateway | None, url: str | None
) -> tuple[str, dict[str, list[int]] | None]:
    """Start (and pin) the gateway if asked; return its URL and the pinning used."""
    if gateway is None:
        return url or f"http://{DEFAULT_HOST}:{DEFAULT_PORT}", None
    with console.status("starting a gateway (synthetic backend)..."):
        target = gateway.start()
    server_cpus, pinning = pin_client()
    if server_cpus is not None:
        pin_process(gateway.pid, server_cpus)
    where = f"server on CPU {pinning['server']}, client on {pinning['client']}" if pinning else ""
    console.print(f"gateway {target} (pid {gateway.pid}) {where}")
    # The spawned gateway runs on this interpreter, whose build moves the numbers.
    python = describe_python()
    libpython = f", {python['libpython']} libpython" if python["libpython"] else ""
    console.print(f"on {python['implementation']} {python['version']}{libpython}")
    return target, pinning


async def _measure(
    console: Console,
    config: BenchConfig,
    url: str,
    server_pid: int | None,
    label: str = "",
    *,
    airc: tuple[str, int] | None = None,
    grpc: str | None = None,
) -> list[TransportResult]:
    """Run the workload against ``url`` with a progress bar per transport."""
    tune_gc()  # the client allocates per read; the collector's defaults cost it 5-10 %
    prefix = f"{label} " if label else ""
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        tasks: dict[str, TaskID] = {
            name: progress.add_task(f"{prefix}{name} chunks", total=config.expected_chunks)
            for name in config.transports
        }

        def update(transport: str, received: int, expected: int) -> None:
            progress.update(tasks[transport], completed=received)

        return await run_bench(
            config, url, server_pid=server_pid, progress=update, airc=airc, grpc=grpc
        )


def _client_bound_notes(console: Console, results: list[TransportResult], label: str = "") -> None:
    for result in results:
        if client_bound(result):
            console.print(
                f"[yellow]note:[/yellow] the client used a full core during the "
                f"{label}{result.transport} run; it may be what limited it"
            )


def _report(
    console: Console,
    config: BenchConfig,
    results: list[TransportResult],
    url: str,
    spawned: bool,
    pinning: dict[str, list[int]] | None,
    json_path: Path | None,
    plot_path: Path | None,
) -> None:
    console.print(results_table(config, results))
    _client_bound_notes(console, results)
    if json_path is not None:
        document = bench_document(config, results, url=url, spawned=spawned, pinning=pinning)
        json_path.write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n")
        console.print(f"results written to {json_path}")
    if plot_path is not None:
        write_plot(plot_path, config, results)
        console.print(f"plot written to {plot_path}")


def _compare(
    console: Console,
    config: BenchConfig,
    peers: list[Implementation],
    json_path: Path | None,
    plot_path: Path | None,
) -> None:
    """``--compare``: Airlane, then each peer, each started fresh on the server core."""
    server_cpus, pinning = pin_client()
    if pinning is not None:
        console.print(f"servers on CPU {pinning['server']}, client on {pinning['client']}")

    async def measure(
        name: str, url: str, pid: int | None, workload: BenchConfig
    ) -> list[TransportResult]:
        console.print(f"{name}: {url} (pid {pid})")
        return await _measure(console, workload, url, pid, label=name)

    implementations = [airlane_implementation(), *peers]
    runs = run_on_fast_loop(
        run_compare(config, implementations, server_cpus=server_cpus, measure=measure)
    )
    if runs[0].status != "ran":
        console.print(f"[red]could not start the gateway:[/red] {runs[0].reason}")
        raise typer.Exit(1)
    _compare_report(console, config, runs, pinning, json_path, plot_path)
    if any(run.status == "failed" for run in runs):
        raise typer.Exit(1)


def _compare_report(
    console: Console,
    config: BenchConfig,
    runs: list[ImplementationRun],
    pinning: dict[str, list[int]] | None,
    json_path: Path | None,
    plot_path: Path | None,
) -> None:
    console.print(compare_table(config, runs))
    for run in runs:
        if run.status == "skipped":
            console.print(f"[yellow]skipped {run.name}:[/yellow] {run.reason}")
        elif run.status == "failed":
            console.print(f"[red]{run.name} failed:[/red] {run.reason}")
        _client_bound_notes(console, run.results, label=f"{run.name} ")
    if json_path is not None:
        document = compare_document(config, runs, pinning=pinning)
        json_path.write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n")
        console.print(f"results written to {json_path}")
    if plot_path is not None:
        results = [result for run in runs for result in run.results]
        labels = [f"{run.name} {result.transport}" for run in runs for result in run.results]
        write_plot(plot_path, config, results, labels)
        console.print(f"plot written to {plot_path}")
