"""``airlane shaping``: build, attach, detach and look at the kernel lane classifier
(docs/lanes.md). Root only; every failure is one line and exit status 2."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

__all__ = ["shaping_app"]

shaping_app = typer.Typer(
    help="The kernel part of the lanes: a BPF classifier on an interface (root only).",
    no_args_is_help=True,
)

_Netns = Annotated[
    str | None, typer.Option(help="The network namespace the interface is in (ip netns).")
]
_Config = Annotated[
    Path | None, typer.Option(help="airlane.toml: its [lanes] (DSCP, priorities, bpf_dir).")
]


def _fail(command: str, exc: Exception) -> NoReturn:
    typer.echo(f"airlane shaping {command}: {exc}", err=True)
    raise typer.Exit(2)


def _lanes(config: Path | None) -> Any:
    from airlane.runtime.socket_lanes import LanesConfig

    if config is None:
        return LanesConfig()
    from airlane.server import load_config

    return load_config(config).lanes


def _guarded(command: str, work: Callable[[], Any]) -> Any:
    from airlane.server.config import ConfigError
    from airlane.shaping import ShapingError

    try:
        return work()
    except (ShapingError, ConfigError) as exc:
        _fail(command, exc)


@shaping_app.command("build")
def build_command() -> None:
    """Compile the classifier with clang (set-up does this once)."""
    from airlane.shaping import build_object

    typer.echo(_guarded("build", build_object))


@shaping_app.command("attach")
def attach_command(
    dev: Annotated[str, typer.Argument(help="The interface, such as eth0.")],
    rate: Annotated[
        str | None,
        typer.Option(help="Install HTB with a class per lane under this rate (20mbit)."),
    ] = None,
    netns: _Netns = None,
    config: _Config = None,
) -> None:
    """Attach the classifier to DEV's egress and ingress hooks."""
    from airlane.shaping import attach

    lanes = _guarded("attach", lambda: _lanes(config))
    done = _guarded("attach", lambda: attach(dev, netns=netns, rate=rate, config=lanes))
    queues = (
        f"HTB at {done.rate_bit} bit/s: control 1:10, interactive 1:20, bulk 1:30 "
        f"({done.bulk_qdisc})"
        if done.rate_bit
        else "the root qdisc left as it was; packets carry their lane's SO_PRIORITY"
    )
    typer.echo(f"attached to {done.name}: {queues}; maps under {lanes.bpf_dir}")


@shaping_app.command("detach")
def detach_command(
    dev: Annotated[str, typer.Argument(help="The interface.")],
    netns: _Netns = None,
    config: _Config = None,
) -> None:
    """Take the classifier (and the qdiscs attach added) off DEV."""
    from airlane.shaping import detach

    lanes = _guarded("detach", lambda: _lanes(config))
    done = _guarded("detach", lambda: detach(dev, netns=netns, config=lanes))
    typer.echo(f"detached from {done.name}")


@shaping_app.command("status")
def status_command(
    config: _Config = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
) -> None:
    """Where the classifier is attached, and its per-lane counters."""
    from airlane.runtime.lane_flows import ShapingCounters
    from airlane.shaping import attachments

    lanes = _guarded("status", lambda: _lanes(config))
    attached = attachments(lanes)
    counters = ShapingCounters(lanes.bpf_dir).read() if attached else {}
    flows = _flows(lanes.bpf_dir) if attached else 0
    if as_json:
        typer.echo(
            json.dumps(
                {
                    "attached": [a.name for a in attached],
                    "flows": flows,
                    "counters": {
                        f"{direction}/{lane}": {"packets": packets, "bytes": size}
                        for (direction, lane), (packets, size) in counters.items()
                    },
                }
            )
        )
        return
    if not attached:
        typer.echo("not attached (the connections' own marks sort the lanes)")
        return
    for attachment in attached:
        rate = f", HTB at {attachment.rate_bit} bit/s" if attachment.rate_bit else ""
        typer.echo(f"attached to {attachment.name}{rate}")
    typer.echo(f"  {flows} connections with a declared lane in the flow map")
    for (direction, lane), (packets, size) in counters.items():
        typer.echo(f"  {direction:7} {lane:11} {packets:>12} packets {size:>15} bytes")


def _flows(bpf_dir: str) -> int:
    """Sockets in the classifier's flow map (0 where it cannot be opened)."""
    from airlane.runtime.bpf_maps import PinnedMap
    from airlane.runtime.lane_flows import MAPS_SUBDIR

    try:
        with PinnedMap(Path(bpf_dir) / MAPS_SUBDIR / "airlane_flows", 4) as flows:
            return len(flows.keys(8))
    except OSError:
        return 0
