"""Scaling curve: paced streams at growing N, per transport, and the largest N that keeps up.

At each N (100 ... 4000 by default) and for each transport (SSE, WebSocket) a fresh gateway is
spawned and pinned to its own core, N paced load-test streams run against it (200 chunks every
20 ms unless told), and kept-up %, delivery lag p50/p99, TTFC p99 and CPU are recorded. A
point keeps up with kept-up >= 99 %, lag p99 <= 20 ms and no failed stream; the report names
the largest N that keeps up per transport (definitions in `airlane.bench.sweep`). The
"steady" column is lag p99 over the chunks that arrived while every stream was running (the
run without the start and end of its streams, `airlane.bench.stats.steady_window`); it is
shown, not judged.

    .venv/bin/python benchmarks/scaling.py --json bench-results/scaling.json \\
        --plot bench-results/scaling.png                        # full sweep, ~6 minutes
    .venv/bin/python benchmarks/scaling.py --ns 100,500 --transport sse   # a quick look
    .venv/bin/python benchmarks/scaling.py --url http://127.0.0.1:9000 --label peer \\
        --json bench-results/scaling-peer.json                  # a server already running
    .venv/bin/python benchmarks/scaling.py --overlay bench-results/scaling.json \\
        bench-results/scaling-peer.json --plot bench-results/scaling-both.png

``--url`` measures any server speaking the load-test contract (``GET /v1/loadtest/sse`` and
``/v1/loadtest/ws`` with ``chunks``, ``mode``, ``interval_ms``) on loopback, every point
against that one process; its CPU is reported when ``/healthz`` gives its ``pid`` or
``--server-pid`` does. ``--overlay`` measures nothing: it plots saved JSON files together.
"""

from __future__ import annotations

import argparse
import datetime
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from airlane import __version__
from airlane.bench.config import loopback_address
from airlane.bench.memory import describe_host, raise_fd_limit
from airlane.bench.runner import gateway_pid
from airlane.bench.spawn import GatewayStartError
from airlane.bench.sweep import (
    DEFAULT_MAX_LAG_P99_MS,
    DEFAULT_MIN_KEPT_UP_PCT,
    DEFAULT_NS,
    DEFAULT_POINT_TIMEOUT_S,
    KeepUpCriteria,
    SweepPlan,
    run_sweep,
    sustained_n,
)

LAG_FLOOR_MS = 0.01
"""Lags below this are drawn at it: a log axis has no room for zero or negative values."""

_HEADER = (
    f"{'transport':>9} {'N':>6} {'kept up':>8} {'lag p50':>9} {'lag p99':>9} {'steady':>9} "
    f"{'TTFC p99':>9} "
    f"{'server CPU':>10} {'client CPU':>10} {'steal':>6} {'step':>5} {'errors':>6}  keeps up"
)


def main(argv: Sequence[str] | None = None) -> int:
    """Command line; returns the exit status."""
    args = _parser().parse_args(argv)
    if args.overlay:
        try:
            documents = [_saved_run(path) for path in args.overlay]
        except (OSError, ValueError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    else:
        try:
            plan = SweepPlan(
                ns=tuple(args.ns),
                transports=("sse", "ws") if args.transport == "both" else (args.transport,),
                chunks=args.chunks,
                interval_ms=args.interval_ms,
                point_timeout_s=args.point_timeout_s,
            )
            criteria = KeepUpCriteria(args.min_kept_up_pct, args.max_lag_p99_ms)
            if args.url is not None:
                loopback_address(args.url)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        try:
            documents = [_measure(args, plan, criteria)]
        except GatewayStartError as exc:
            print(f"error: could not start the gateway: {exc}", file=sys.stderr)
            return 1
    _write(args, documents)
    return 0


def _saved_run(path: Path) -> dict[str, Any]:
    """A JSON file written by ``--json``.

    Raises:
        ValueError: it is not one (orjson's decode error is a ValueError too).
    """
    document = orjson.loads(path.read_bytes())
    if not isinstance(document, dict) or document.get("benchmark") != "scaling":
        raise ValueError(f"{path} holds no scaling results")
    return document


def _measure(args: argparse.Namespace, plan: SweepPlan, criteria: KeepUpCriteria) -> dict[str, Any]:
    """Run the sweep, printing each point as it comes; return the JSON document."""
    host = describe_host()  # before pinning narrows this process's CPU affinity
    fd_limit = raise_fd_limit()  # before spawning: the gateways inherit it
    if fd_limit < max(plan.ns) + 64:
        print(f"warning: only {fd_limit} file descriptors for {max(plan.ns)} streams")
    server_pid = args.server_pid
    if args.url is not None and server_pid is None:
        server_pid = gateway_pid(args.url)
    started_at = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    print(_HEADER)
    points, pinning = run_sweep(
        plan,
        criteria,
        url=args.url,
        server_pid=server_pid,
        gateway_args=["--config", str(args.gateway_config)] if args.gateway_config else [],
        on_point=lambda point: print(_point_line(point), flush=True),
    )
    return {
        "benchmark": "scaling",
        "label": args.label,
        "airlane_version": __version__,
        "started_at": started_at,
        "url": args.url,
        "spawned": args.url is None,
        "cpu_pinning": pinning,
        "fd_limit": fd_limit,
        "host": host,
        "plan": {
            "ns": list(plan.ns),
            "transports": list(plan.transports),
            "chunks": plan.chunks,
            "mode": "paced",
            "interval_ms": plan.interval_ms,
            "point_timeout_s": plan.point_timeout_s,
        },
        "criteria": {
            "min_kept_up_pct": criteria.min_kept_up_pct,
            "max_lag_p99_ms": criteria.max_lag_p99_ms,
        },
        "points": points,
        "sustained_n": {t: sustained_n(points, t, criteria) for t in plan.transports},
    }


def _write(args: argparse.Namespace, documents: list[dict[str, Any]]) -> None:
    for document in documents:
        print(_summary(document))
    if args.json is not None and not args.overlay:
        args.json.write_bytes(orjson.dumps(documents[0], option=orjson.OPT_INDENT_2) + b"\n")
        print(f"results written to {args.json}")
    if args.plot is not None:
        write_scaling_plot(args.plot, documents)
        print(f"plot written to {args.plot}")


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _cpu(usage: dict[str, float] | None, flag: str = "") -> str:
    return "-" if usage is None else f"{usage['mean_pct']:.0f} %{flag}"


def _steal(pct: float | None) -> str:
    return "-" if pct is None else f"{pct:.1f} %"


def _step(ns: float | None) -> str:
    return "-" if ns is None else f"{ns:.0f}"


def _point_line(point: dict[str, Any]) -> str:
    kept_up = "-" if point["kept_up_pct"] is None else f"{point['kept_up_pct']:.1f} %"
    # "!" marks a client near a full core: then the point may measure the client.
    client = _cpu(point["client_cpu"], "!" if point["client_bound"] else "")
    return (
        f"{point['transport']:>9} {point['streams']:>6} {kept_up:>8} "
        f"{_ms(point['lag_ms']['p50']):>9} {_ms(point['lag_ms']['p99']):>9} "
        f"{_ms((point.get('steady_lag_ms') or {}).get('p99')):>9} "
        f"{_ms(point['ttfc_ms']['p99']):>9} {_cpu(point['server_cpu']):>10} {client:>10} "
        f"{_steal(point.get('steal_pct')):>6} {_step(point.get('python_op_ns')):>5} "
        f"{point['errors']:>6}  {'yes' if point['keeps_up'] else 'no'}"
    )


def _summary(document: dict[str, Any]) -> str:
    criteria = document["criteria"]
    found = ", ".join(
        f"{transport} {'none' if n is None else f'N={n:,}'}"
        for transport, n in document["sustained_n"].items()
    )
    return (
        f"[{document['label']}] largest N that keeps up (kept up >= "
        f"{criteria['min_kept_up_pct']:g} %, lag p99 <= {criteria['max_lag_p99_ms']:g} ms, "
        f"no errors): {found}"
    )


def write_scaling_plot(path: Path, documents: Sequence[dict[str, Any]]) -> None:
    """Lag p99 (top, log-log) and kept-up % (bottom) against N, one curve per (label,
    transport); points that keep up are filled, the others hollow; thresholds as lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (lag_axes, kept_axes) = plt.subplots(
        2, 1, figsize=(9, 8), sharex=True, height_ratios=(2, 1), constrained_layout=True
    )
    try:
        colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        curves = [(d, t) for d in documents for t in d["plan"]["transports"]]
        for index, (document, transport) in enumerate(curves):
            points = sorted(
                (p for p in document["points"] if p["transport"] == transport),
                key=lambda p: p["streams"],
            )
            style = {
                "color": colours[index % len(colours)],
                "label": f"{document['label']} {transport}",
                "linestyle": "-" if transport == "sse" else "--",
            }
            _curve(lag_axes, points, _lag_p99, style)
            _curve(kept_axes, points, _kept_up, style)
        _decorate(figure, lag_axes, kept_axes, documents)
        figure.savefig(path, dpi=110)
    finally:
        plt.close(figure)


def _lag_p99(point: dict[str, Any]) -> float | None:
    lag = point["lag_ms"]["p99"]
    return None if lag is None else max(lag, LAG_FLOOR_MS)


def _kept_up(point: dict[str, Any]) -> float | None:
    value: float | None = point["kept_up_pct"]
    return value


def _curve(axes: Any, points: list[dict[str, Any]], y: Any, style: dict[str, Any]) -> None:
    drawn = [(p["streams"], y(p), p["keeps_up"]) for p in points if y(p) is not None]
    axes.plot([x for x, _, _ in drawn], [v for _, v, _ in drawn], **style)
    for x, value, keeps_up in drawn:
        face = style["color"] if keeps_up else "white"
        axes.plot(x, value, "o", color=style["color"], markerfacecolor=face)


def _decorate(figure: Any, lag_axes: Any, kept_axes: Any, documents: Sequence[Any]) -> None:
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    criteria = documents[0]["criteria"] if documents else {}
    lag_limit = criteria.get("max_lag_p99_ms", DEFAULT_MAX_LAG_P99_MS)
    kept_limit = criteria.get("min_kept_up_pct", DEFAULT_MIN_KEPT_UP_PCT)
    lag_axes.axhline(lag_limit, color="grey", linestyle=":", label=f"{lag_limit:g} ms")
    kept_axes.axhline(kept_limit, color="grey", linestyle=":", label=f"{kept_limit:g} %")
    plan = documents[0]["plan"] if documents else {"chunks": "?", "interval_ms": "?"}
    figure.suptitle(
        f"scaling: paced, {plan['chunks']} chunks every {plan['interval_ms']:g} ms per stream "
        "(filled marker: keeps up)"
    )
    plain = FuncFormatter(lambda value, _: f"{value:g}")
    lag_axes.set_yscale("log")
    lag_axes.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    lag_axes.yaxis.set_major_formatter(plain)
    lag_axes.yaxis.set_minor_formatter(NullFormatter())
    lag_axes.set_ylabel("delivery lag p99 (ms)")
    kept_axes.set_ylabel("kept up (% of target rate)")
    kept_axes.set_xlabel("concurrent streams N")
    kept_axes.set_xscale("log")
    # Ticks at the measured N, not at powers of ten.
    kept_axes.set_xticks(sorted({n for document in documents for n in document["plan"]["ns"]}))
    kept_axes.xaxis.set_major_formatter(plain)
    kept_axes.xaxis.set_minor_formatter(NullFormatter())
    for axes in (lag_axes, kept_axes):
        axes.grid(True, which="both", alpha=0.3)
        axes.legend(fontsize="small")


def _ns(text: str) -> list[int]:
    try:
        ns = [int(item) for item in text.split(",") if item.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected integers like 100,500, not {text!r}") from None
    if not ns or any(n < 1 for n in ns):
        raise argparse.ArgumentTypeError("stream counts must be positive")
    return sorted(set(ns))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="Examples are in the module docstring of benchmarks/scaling.py.",
    )
    add = parser.add_argument
    add("--ns", type=_ns, default=list(DEFAULT_NS), metavar="N,N,...",
        help="concurrent streams at each point (default: 100,250,500,1000,2000,4000)")  # fmt: skip
    add("--transport", choices=("sse", "ws", "both"), default="both")
    add("--chunks", type=int, default=200, help="chunks per stream (default: 200)")
    add("--interval-ms", type=float, default=20.0, help="paced interval (default: 20)")
    add("--point-timeout-s", type=float, default=DEFAULT_POINT_TIMEOUT_S,
        help="time limit of each point's run (default: %(default)s)")  # fmt: skip
    add("--min-kept-up-pct", type=float, default=DEFAULT_MIN_KEPT_UP_PCT)
    add("--max-lag-p99-ms", type=float, default=DEFAULT_MAX_LAG_P99_MS)
    add("--url", help="measure this loopback server instead of spawning gateways")
    add("--server-pid", type=int, help="the --url server's pid, for its CPU use")
    add("--gateway-config", type=Path, help="TOML file for each spawned gateway (--config)")
    add("--label", default="airlane", help="name of this run in plots (default: airlane)")
    add("--json", type=Path, help="write the results here")
    add("--plot", type=Path, help="write a PNG plot here")
    add("--overlay", nargs="+", type=Path, metavar="JSON",
        help="measure nothing: plot these saved runs together (with --plot)")  # fmt: skip
    return parser


if __name__ == "__main__":
    # A SIGTERM (a CI time limit, say) unwinds like Ctrl-C does, so the gateway is stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    sys.exit(main())
