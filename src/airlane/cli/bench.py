"""``airlane bench``: the seed's streaming workload against a gateway, through the full path.

A thin command over `airlane.bench`: build the `BenchConfig`, find (or start, with
``--spawn``) the gateway, pin gateway and client to different cores when there are two,
run each transport with a progress bar, then print the table and write ``--json`` / ``--plot``.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

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
    pinning_plan,
    results_table,
    run_bench,
    write_plot,
)
from airlane.bench.config import DEFAULT_CHUNKS, DEFAULT_INTERVAL_MS, DEFAULT_STREAMS
from airlane.bench.config import DEFAULT_TIMEOUT_S as DEFAULT_BENCH_TIMEOUT_S
from airlane.server import DEFAULT_HOST, DEFAULT_PORT

__all__ = ["bench_command"]

T = TypeVar("T")


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
        Literal["sse", "ws", "both"], typer.Option(help="Transport(s) to measure.")
    ] = "both",
    url: Annotated[str | None, typer.Option(help="A loopback gateway to measure.")] = None,
    spawn: Annotated[
        bool, typer.Option("--spawn", help="Start a gateway subprocess (synthetic backend).")
    ] = False,
    json_path: Annotated[Path | None, typer.Option("--json", help="Write results as JSON.")] = None,
    plot_path: Annotated[Path | None, typer.Option("--plot", help="Write a PNG plot.")] = None,
    timeout: Annotated[float, typer.Option(help="Time limit per transport, seconds.")] = (
        DEFAULT_BENCH_TIMEOUT_S
    ),
) -> None:
    """Drive N concurrent load-test streams over SSE and/or WebSocket and report."""
    console = Console()
    try:
        config = BenchConfig(
            streams=streams,
            chunks=chunks,
            mode=mode,
            interval_ms=interval_ms,
            transports=("sse", "ws") if transport == "both" else (transport,),
            timeout_s=timeout,
        )
        if spawn and url is not None:
            raise ValueError("give --url or --spawn, not both")
        if url is not None:
            loopback_address(url)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    gateway = LocalGateway() if spawn else None
    try:
        target, pinning = _prepare(console, gateway, url)
        results = _run(_measure(console, config, target))
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
    plan = pinning_plan()
    pinning = None
    if plan is not None:
        server_cpus, client_cpus = plan
        pin_process(gateway.pid, server_cpus)
        pin_process(os.getpid(), client_cpus)
        pinning = {"server": sorted(server_cpus), "client": sorted(client_cpus)}
    where = f"server on CPU {pinning['server']}, client on {pinning['client']}" if pinning else ""
    console.print(f"gateway {target} (pid {gateway.pid}) {where}")
    return target, pinning


async def _measure(console: Console, config: BenchConfig, url: str) -> list[TransportResult]:
    server_pid = await asyncio.to_thread(gateway_pid, url)
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=False) as progress:
        tasks: dict[str, TaskID] = {
            name: progress.add_task(f"{name} chunks", total=config.expected_chunks)
            for name in config.transports
        }

        def update(transport: str, received: int, expected: int) -> None:
            progress.update(tasks[transport], completed=received)

        return await run_bench(config, url, server_pid=server_pid, progress=update)


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
    for result in results:
        if client_bound(result):
            console.print(
                f"[yellow]note:[/yellow] the client used a full core during the "
                f"{result.transport} run; it may be what limited it"
            )
    if json_path is not None:
        document = bench_document(config, results, url=url, spawned=spawned, pinning=pinning)
        json_path.write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n")
        console.print(f"results written to {json_path}")
    if plot_path is not None:
        write_plot(plot_path, config, results)
        console.print(f"plot written to {plot_path}")


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on uvloop where available."""
    if sys.platform != "win32":
        import uvloop

        return uvloop.run(coro)
    return asyncio.run(coro)  # pragma: no cover
