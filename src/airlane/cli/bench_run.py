"""The measuring side of ``airlane bench``: start and pin the gateway, drive the load
clients with progress bars, print the table, write the JSON and the plot. Imported when a
run starts (`airlane.cli.bench`), so that the other commands do not load the load clients."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
from rich.table import Table

from airlane.bench import (
    BenchConfig,
    GatewayStartError,
    LocalGateway,
    TransportResult,
    bench_document,
    client_bound,
    gateway_pid,
    pin_process,
    results_table,
    run_bench,
    write_plot,
)
from airlane.bench.compare import ImplementationRun, run_compare_rounds
from airlane.bench.compare_report import compare_document, compare_table
from airlane.bench.compare_rounds import compare_rounds_document, compare_rounds_table
from airlane.bench.fit import split_columns
from airlane.bench.memory import describe_python
from airlane.bench.peers import Implementation, airlane_implementation
from airlane.bench.plot import Curve, write_cdfs
from airlane.bench.rounds import rounds_table, summarize_rounds
from airlane.bench.runner import run_on_fast_loop
from airlane.bench.spawn import pin_client
from airlane.server.address import DEFAULT_HOST, DEFAULT_PORT
from airlane.server.gcpacer import tune_gc

__all__ = ["compare", "run"]


def run(
    console: Console,
    config: BenchConfig,
    *,
    spawn: bool,
    url: str | None,
    airc: tuple[str, int] | None,
    json_path: Path | None,
    plot_path: Path | None,
    runs: int = 1,
    hub: str | None = None,
) -> None:
    """``runs`` runs of the workload, one after the other, against ``url`` or, with
    ``spawn``, a gateway started here (on ``hub``, NATS URLs, where given); with more than
    one, the report is their medians."""
    gateway = LocalGateway(["--hub", hub] if hub else ()) if spawn else None
    try:
        target, pinning = _prepare(console, gateway, url)
        if gateway is not None:
            airc = gateway.airc
            if airc is None and "airc" in config.transports:
                console.print("[red]the spawned gateway has no AIRC/TCP listener[/red]")
                raise typer.Exit(1)
        server_pid = gateway_pid(target)
        grpc = gateway.grpc if gateway is not None else None
        rsocket = gateway.rsocket if gateway is not None else None
        rounds: list[list[TransportResult]] = []
        for index in range(runs):
            if runs > 1:
                console.print(f"run {index + 1} of {runs}")
            rounds.append(
                run_on_fast_loop(
                    _measure(
                        console, config, target, server_pid, airc=airc, grpc=grpc, rsocket=rsocket
                    )
                )
            )
    except GatewayStartError as exc:
        console.print(f"[red]could not start the gateway:[/red] {exc}")
        raise typer.Exit(1) from None
    finally:
        if gateway is not None:
            gateway.stop()
    _report(
        console, config, rounds, target, gateway is not None, pinning, json_path, plot_path, hub
    )
    _exit_status(console, rounds, target)


def _exit_status(console: Console, rounds: list[list[TransportResult]], target: str) -> None:
    """Exit 3 when nothing connected (one line saying so), 1 when any stream failed."""
    results = [result for run in rounds for result in run]
    errors = sum(r.errors for r in results)
    if not errors:
        return
    if not any(r.chunks_received or r.streams_completed for r in results):
        console.print(
            f"airlane bench: nothing connected to {target}: all {errors} streams failed; "
            "start a gateway with `airlane serve`, give another --url, or use --spawn",
            highlight=False,
        )
        raise typer.Exit(3)
    console.print(f"airlane bench: {errors} streams failed", highlight=False)
    raise typer.Exit(1)


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
    rsocket: tuple[str, int] | None = None,
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
            config,
            url,
            server_pid=server_pid,
            progress=update,
            airc=airc,
            grpc=grpc,
            rsocket=rsocket,
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
    rounds: list[list[TransportResult]],
    url: str,
    spawned: bool,
    pinning: dict[str, list[int]] | None,
    json_path: Path | None,
    plot_path: Path | None,
    hub: str | None = None,
) -> None:
    results = [result for run in rounds for result in run]
    if len(rounds) == 1:
        _print_table(console, results_table(config, results))
    else:
        _print_table(console, rounds_table(config, rounds))
    _client_bound_notes(console, results)
    if json_path is not None:
        document = bench_document(config, results, url=url, spawned=spawned, pinning=pinning)
        document["hub"] = hub or ("memory" if spawned else None)
        if len(rounds) > 1:
            document["config"]["runs"] = len(rounds)
            numbers = [number for number, run in enumerate(rounds, 1) for _ in run]
            for entry, number in zip(document["results"], numbers, strict=True):
                entry["run"] = number
            document["summary"] = summarize_rounds(rounds)
        _write_json(console, json_path, document)
    if plot_path is not None:
        labels = None
        if len(rounds) > 1:
            labels = [f"{r.transport} run {i + 1}" for i, rs in enumerate(rounds) for r in rs]
        write_plot(plot_path, config, results, labels)
        console.print(f"plot written to {plot_path}")


def compare(
    console: Console,
    config: BenchConfig,
    peers: list[Implementation],
    json_path: Path | None,
    plot_path: Path | None,
    runs: int = 1,
) -> None:
    """``--compare``: Airlane, then each peer, each started fresh on the server core; with
    ``runs`` above 1, that many rounds in alternating order, summarised."""
    server_cpus, pinning = pin_client()
    if pinning is not None:
        console.print(f"servers on CPU {pinning['server']}, client on {pinning['client']}")

    async def measure(
        name: str, url: str, pid: int | None, workload: BenchConfig
    ) -> list[TransportResult]:
        console.print(f"{name}: {url} (pid {pid})")
        return await _measure(console, workload, url, pid, label=name)

    def announce(index: int) -> None:
        if runs > 1:
            console.print(f"round {index + 1} of {runs}")

    implementations = [airlane_implementation(), *peers]
    rounds = run_on_fast_loop(
        run_compare_rounds(
            config,
            implementations,
            runs,
            server_cpus=server_cpus,
            measure=measure,
            on_round=announce,
        )
    )
    for round_ in rounds:
        if round_[0].status != "ran":
            console.print(f"[red]could not start the gateway:[/red] {round_[0].reason}")
            raise typer.Exit(1)
    if runs == 1:
        _compare_report(console, config, rounds[0], pinning, json_path, plot_path)
    else:
        _compare_rounds_report(console, config, rounds, pinning, json_path, plot_path)
    if any(run.status == "failed" for round_ in rounds for run in round_):
        raise typer.Exit(1)


def _compare_report(
    console: Console,
    config: BenchConfig,
    runs: list[ImplementationRun],
    pinning: dict[str, list[int]] | None,
    json_path: Path | None,
    plot_path: Path | None,
) -> None:
    _print_table(console, compare_table(config, runs))
    for run in runs:
        if run.status == "skipped":
            console.print(f"[yellow]skipped {run.name}:[/yellow] {run.reason}")
        elif run.status == "failed":
            console.print(f"[red]{run.name} failed:[/red] {run.reason}")
        _client_bound_notes(console, run.results, label=f"{run.name} ")
    if json_path is not None:
        document = compare_document(config, runs, pinning=pinning)
        _write_json(console, json_path, document)
    if plot_path is not None:
        results = [result for run in runs for result in run.results]
        labels = [f"{run.name} {result.transport}" for run in runs for result in run.results]
        write_plot(plot_path, config, results, labels)
        console.print(f"plot written to {plot_path}")


def _compare_rounds_report(
    console: Console,
    config: BenchConfig,
    rounds: list[list[ImplementationRun]],
    pinning: dict[str, list[int]] | None,
    json_path: Path | None,
    plot_path: Path | None,
) -> None:
    _print_table(console, compare_rounds_table(config, rounds))
    for position, first in enumerate(rounds[0]):
        missed = [r[position] for r in rounds if r[position].status != "ran"]
        if missed:
            colour = "yellow" if missed[0].status == "skipped" else "red"
            console.print(
                f"[{colour}]{first.name} {missed[0].status} in {len(missed)} of "
                f"{len(rounds)} rounds:[/{colour}] {missed[0].reason}"
            )
    for number, round_ in enumerate(rounds, 1):
        for run in round_:
            _client_bound_notes(console, run.results, label=f"round {number}'s {run.name} ")
    if json_path is not None:
        document = compare_rounds_document(config, rounds, pinning=pinning)
        _write_json(console, json_path, document)
    if plot_path is not None:
        write_cdfs(plot_path, config, _pooled_curves(config, rounds))
        console.print(f"plot written to {plot_path}")


def _pooled_curves(config: BenchConfig, rounds: list[list[ImplementationRun]]) -> list[Curve]:
    """A curve per implementation and transport, with every round's samples in it."""
    curves: list[Curve] = []
    for position, first in enumerate(rounds[0]):
        for transport in config.transports:
            found = [r[position].result(transport) for r in rounds]
            results = [result for result in found if result is not None]
            if results:
                ttfc = sorted(v for result in results for v in result.ttfc_samples_ms)
                lag = sorted(v for result in results for v in result.lag_samples_ms)
                curves.append((f"{first.name} {transport}", ttfc, lag))
    return curves


def _write_json(console: Console, path: Path, document: dict[str, Any]) -> None:
    path.write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n")
    console.print(f"results written to {path}")


def _print_table(console: Console, table: Table) -> None:
    """``table``, split over as many tables as the terminal's width needs (nothing cut)."""
    for part in split_columns(table, console.width):
        console.print(part)
