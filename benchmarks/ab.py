"""A/B benchmark: the gateway at two git revisions, measured interleaved on one workload.

On a noisy machine the same benchmark varies by tens of percent from one run to the next, so
"before" and "after" numbers taken minutes apart say little. This script starts one gateway per
revision, both alive at once and pinned to the same core (the load client gets the other), and
runs the workload K times against each, alternating which side goes first every round (ABBA),
so that drift in the machine's state lands on both sides alike. The report gives every run, the
median and range per side, and the median of the per-round ratios new/base.

    .venv/bin/python benchmarks/ab.py --base HEAD~3 --transport ws --streams 500 --runs 5
    .venv/bin/python benchmarks/ab.py --base main --new my-branch --mode paced \\
        --streams 2000 --chunks 200 --json bench-results/ab.json
    .venv/bin/python benchmarks/ab.py --base HEAD --new HEAD     # A/A: the noise floor
    .venv/bin/python benchmarks/ab.py --base HEAD --new HEAD \\
        --new-python /tmp/debian-venv/bin/python                 # the interpreter's build
    .venv/bin/python benchmarks/ab.py --base HEAD --new HEAD --mode paced --streams 500 \\
        --new-config share.toml                                  # a setting's effect

``--base`` defaults to ``HEAD``; ``--new`` defaults to this checkout's working tree,
uncommitted changes included. Any other revision is checked out into a temporary detached
``git worktree`` (removed on the way out, also on error or Ctrl-C) and its gateway runs that
tree's code: ``PYTHONPATH=<tree>/src`` comes before the editable install on ``sys.path``. The
load client is this process, the same code for both sides. Each side's gateway runs on this
script's interpreter unless ``--base-python`` / ``--new-python`` name another (a virtual
environment's ``python`` with Airlane's dependencies installed): the same code on two builds
of CPython. ``--base-config`` / ``--new-config`` give a side's gateway a configuration file
(``airlane serve --config``): the same code with two settings.

Before the measured rounds each side gets one short warm-up run (not reported). A run with
errors, missing chunks or chunks out of order is flagged and left out of the medians and
ratios. Exit status: 0 when measured, 1 when a gateway could not start, 2 for bad arguments
(an unknown revision, say).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import math
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import orjson

from airlane.bench.config import DEFAULT_TIMEOUT_S, BenchConfig
from airlane.bench.memory import describe_host, raise_fd_limit
from airlane.bench.rounds import spread as rounds_spread
from airlane.bench.runner import SETTLE_S, run_on_fast_loop, run_transport
from airlane.bench.spawn import GatewayStartError, ServerProcess, pin_client, pin_process

REPO = Path(__file__).resolve().parents[1]
"""The checkout this script lives in: the working tree that ``--new`` defaults to."""
MAX_RUNS = 50
"""Rounds at most: enough for any comparison, few enough to bound the time taken."""
WARMUP_STREAMS, WARMUP_CHUNKS = 10, 20
"""The warm-up run's size: enough to import and allocate what a first request needs."""
GIT_TIMEOUT_S = 60.0
"""Time limit of one git command (a worktree checkout of a large tree is the slowest)."""
SUBJECT_WIDTH = 60
"""Characters of a commit's subject line shown in the report."""
SIDES = ("base", "new")


class RevisionError(ValueError):
    """A revision that git does not know, or a checkout it could not make."""


# -- revisions and worktrees -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Revision:
    """One side of the comparison: what code runs, and where it is checked out."""

    side: str
    """``base`` or ``new``."""
    spec: str | None
    """The revision as given; None for the working tree."""
    sha: str
    """The commit (for the working tree, its ``HEAD``)."""
    subject: str
    """The commit's subject line."""
    dirty: bool = False
    """The working tree has uncommitted changes (never true for a commit)."""
    tree: Path = REPO
    """Where its code is: the working tree or a temporary worktree."""
    python: str = sys.executable
    """The interpreter its gateway runs on."""
    config: Path | None = None
    """The configuration file its gateway is started with (None: the embedded defaults)."""

    @property
    def title(self) -> str:
        """One line naming the code measured, for the report."""
        subject = self.subject
        if len(subject) > SUBJECT_WIDTH:
            subject = subject[: SUBJECT_WIDTH - 3] + "..."
        if self.spec is None:
            changes = " (+ uncommitted changes)" if self.dirty else ""
            where = f"working tree{changes}, at {self.sha[:7]}"
        else:
            where = f"{self.spec} = {self.sha[:7]}"
        on = "" if self.python == sys.executable else f" [on {self.python}]"
        config = "" if self.config is None else f" [--config {self.config}]"
        return f"{where} {subject}{on}{config}"

    def to_dict(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "spec": self.spec if self.spec is not None else "working tree",
            "sha": self.sha,
            "subject": self.subject,
            "working_tree": self.spec is None,
            "dirty": self.dirty,
            "tree": str(self.tree),
            "python": self.python,
            "config": None if self.config is None else str(self.config),
        }


def git(*args: str) -> str:
    """Run ``git -C REPO args``; return its stdout, stripped.

    Raises:
        RevisionError: git failed (its stderr's last line is the message).
    """
    try:
        done = subprocess.run(
            ["git", "-C", str(REPO), *args],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RevisionError(f"git {args[0]}: {exc}") from None
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or [f"exit status {done.returncode}"]
        raise RevisionError(f"git {args[0]}: {lines[-1]}")
    return done.stdout.strip()


def resolve(side: str, spec: str | None) -> Revision:
    """The commit ``spec`` names (None: the working tree), checked before anything starts.

    Raises:
        RevisionError: not a commit this repository has.
    """
    if spec is None:
        sha = git("rev-parse", "--verify", "HEAD^{commit}")
        # Untracked files count: a new module is an uncommitted change too.
        dirty = bool(git("status", "--porcelain"))
        return Revision(side, None, sha, git("log", "-1", "--format=%s", sha), dirty)
    # --end-of-options: a spec starting with "-" is a revision, never an option.
    try:
        sha = git("rev-parse", "--verify", "--quiet", "--end-of-options", f"{spec}^{{commit}}")
    except RevisionError:
        raise RevisionError(f"unknown revision {spec!r} for --{side}") from None
    return Revision(side, spec, sha, git("log", "-1", "--format=%s", sha))


def check_out(revision: Revision, stack: contextlib.ExitStack) -> Revision:
    """``revision`` with its code on disk: the working tree as is, a commit in a temporary
    detached worktree that is removed when ``stack`` closes (also on error or Ctrl-C).

    Raises:
        RevisionError: git could not make the worktree.
    """
    if revision.spec is None:
        return revision
    # Exit callbacks run last-in first-out: the worktree is removed before its directory.
    parent = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="airlane-ab-")))
    tree = parent / revision.side
    stack.callback(_remove_worktree, tree)
    git("worktree", "add", "--detach", "--quiet", str(tree), revision.sha)
    return replace(revision, tree=tree)


def _remove_worktree(tree: Path) -> None:
    """Unregister and delete a worktree; quiet if it was never made or is half gone."""
    # --force: the tree holds untracked files (the generated protobuf modules).
    with contextlib.suppress(RevisionError):
        git("worktree", "remove", "--force", str(tree))
    with contextlib.suppress(RevisionError):
        git("worktree", "prune")


# -- gateways --------------------------------------------------------------------------------


def gateway_env(revision: Revision) -> dict[str, str]:
    """Environment that makes a gateway import ``revision``'s code: its ``src`` first on
    ``sys.path``, ahead of the editable install (which points at this checkout)."""
    return {"PYTHONPATH": str(revision.tree / "src")}


def check_imports(revision: Revision) -> None:
    """Fail unless a Python started with `gateway_env` imports airlane from the revision's
    tree: otherwise both sides would silently run the same code.

    Raises:
        GatewayStartError: it imports airlane from elsewhere, or not at all.
    """
    expected = (revision.tree / "src" / "airlane").resolve()
    try:
        done = subprocess.run(
            [revision.python, "-c", "import airlane; print(airlane.__file__)"],
            capture_output=True,
            text=True,
            cwd=revision.tree,
            env={**os.environ, **gateway_env(revision)},
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:  # no such interpreter, say
        raise GatewayStartError(f"the {revision.side} side's {revision.python}: {exc}") from None
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise GatewayStartError(f"the {revision.side} side cannot import airlane: {tail}")
    found = Path(done.stdout.strip()).resolve().parent
    if found != expected:
        raise GatewayStartError(
            f"the {revision.side} side imports airlane from {found}, not {expected}"
        )


def start_gateway(revision: Revision, stack: contextlib.ExitStack) -> ServerProcess:
    """``airlane serve`` on free ports running ``revision``'s code, stopped when ``stack``
    closes. With ``--port 0`` the AIRC and gRPC listeners take free ports as well (not the
    HTTP port + 1 and + 2), so two gateways never collide.

    Raises:
        GatewayStartError: it did not become ready (the message quotes its output).
    """
    check_imports(revision)
    command = [revision.python, "-m", "airlane", "serve", "--port", "0", "--log-level", "warning"]
    if revision.config is not None:
        command += ["--config", str(revision.config)]
    server = ServerProcess(
        command, name=f"the {revision.side} gateway", cwd=revision.tree, env=gateway_env(revision)
    )
    stack.callback(server.stop)  # before start: a half-started server is stopped too
    server.start()
    return server


# -- measuring -------------------------------------------------------------------------------


def flags(result: dict[str, Any]) -> list[str]:
    """Why a run's numbers cannot be trusted (empty if they can)."""
    found = []
    if result["errors"]:
        found.append(f"{result['errors']} failed streams: {'; '.join(result['error_samples'])}")
    if result["chunks_received"] != result["chunks_expected"]:
        found.append(f"{result['chunks_received']} of {result['chunks_expected']} chunks")
    if result["out_of_order"]:
        found.append(f"{result['out_of_order']} chunks out of order")
    return found


def order_of(round_index: int) -> tuple[str, str]:
    """Which side runs first in a round: base first in even rounds, new first in odd ones
    (ABBA...), so that a trend over time (heat, a neighbour's load) favours neither side."""
    return SIDES if round_index % 2 == 0 else (SIDES[1], SIDES[0])


async def measure(
    config: BenchConfig,
    transport: str,
    gateways: dict[str, ServerProcess],
    runs: int,
    on_run: Callable[[dict[str, Any]], None],
) -> list[dict[str, Any]]:
    """A warm-up run per side, then ``runs`` rounds of one run per side; every run's record."""
    warmup = replace(
        config,
        streams=min(config.streams, WARMUP_STREAMS),
        chunks=min(config.chunks, WARMUP_CHUNKS),
    )
    for side in SIDES:
        gateway = gateways[side]
        assert gateway.url is not None
        await run_transport(warmup, gateway.url, transport, gateway.pid)
    records = []
    for round_index in range(runs):
        for position, side in enumerate(order_of(round_index)):
            # Let the previous run's sockets close before the next one starts.
            await asyncio.sleep(SETTLE_S)
            gateway = gateways[side]
            assert gateway.url is not None
            result = (await run_transport(config, gateway.url, transport, gateway.pid)).to_dict()
            record = {"round": round_index + 1, "side": side, "position": position, **result}
            record["flags"] = flags(result)
            records.append(record)
            on_run(record)
    return records


# -- summary ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Metric:
    """One number taken from each run."""

    key: str
    """Its name in the JSON summary."""
    label: str
    """Its name in the table."""
    value: Callable[[dict[str, Any]], float | None]
    """Reads it from a run's record (None: not measured)."""
    paced_only: bool = False


def _cpu_pct(record: dict[str, Any], who: str) -> float | None:
    usage = record[who]
    return None if usage is None else float(usage["mean_pct"])


def _server_us_per_chunk(record: dict[str, Any]) -> float | None:
    """The gateway's CPU time per chunk delivered: with one chunk a stream, its cost per
    stream (connection, set-up, teardown), which throughput hides in short runs."""
    pct, chunks, wall_s = (
        _cpu_pct(record, "server_cpu"),
        record["chunks_received"],
        record.get("wall_s"),
    )
    if pct is None or not chunks or wall_s is None:
        return None
    return pct / 100 * wall_s * 1e6 / chunks


def _steady_lag_p99(record: dict[str, Any]) -> float | None:
    """Lag p99 while every stream ran (`airlane.bench.stats.steady_window`); None in runs
    recorded before it was measured, or with no such window."""
    steady = record.get("steady_lag_ms")
    return None if steady is None else steady["p99"]


METRICS = (
    Metric("payload_mb_s", "payload MB/s", lambda r: r["payload_mb_s"]),
    Metric("chunks_per_s", "chunks/s", lambda r: r["chunks_per_s"]),
    Metric("ttfc_p99_ms", "TTFC p99 ms", lambda r: r["ttfc_ms"]["p99"]),
    Metric("lag_p99_ms", "lag p99 ms", lambda r: r["lag_ms"]["p99"]),
    Metric("steady_lag_p99_ms", "steady lag p99", _steady_lag_p99, paced_only=True),
    Metric("kept_up_pct", "kept up %", lambda r: r["kept_up_pct"], paced_only=True),
    Metric("server_cpu_pct", "server CPU %", lambda r: _cpu_pct(r, "server_cpu")),
    Metric("server_us_per_chunk", "server us/chunk", _server_us_per_chunk),
    Metric("client_cpu_pct", "client CPU %", lambda r: _cpu_pct(r, "client_cpu")),
    Metric("steal_pct", "VM steal %", lambda r: r.get("steal_pct")),
    Metric("python_op_ns", "Python step ns", lambda r: r.get("python_op_ns")),
)
RATIO_KEYS = {
    "burst": ("payload_mb_s", "server_us_per_chunk"),
    "paced": ("payload_mb_s", "lag_p99_ms"),
}
"""The metrics whose per-round ratio new/base is reported, by mode."""


def metrics_for(mode: str) -> list[Metric]:
    """The metrics that mean something in ``mode``."""
    return [m for m in METRICS if mode == "paced" or not m.paced_only]


def spread(values: list[float]) -> dict[str, float | int] | None:
    """Median, min and max of ``values``, and how many (None if there are none)."""
    found = rounds_spread(values)
    return None if found is None else {**found, "n": len(values)}


def summarize(records: list[dict[str, Any]], mode: str) -> dict[str, Any]:
    """Per side, the spread of each metric over its clean runs; per ratio metric, the spread
    of new/base over the rounds where both runs are clean."""
    clean = [r for r in records if not r["flags"]]
    sides: dict[str, Any] = {}
    for side in SIDES:
        runs = [r for r in clean if r["side"] == side]
        sides[side] = {
            "clean_runs": len(runs),
            "flagged_runs": sum(1 for r in records if r["side"] == side and r["flags"]),
            **{m.key: spread(_values(m, runs)) for m in metrics_for(mode)},
        }
    by_round: dict[int, dict[str, dict[str, Any]]] = {}
    for record in clean:
        by_round.setdefault(record["round"], {})[record["side"]] = record
    pairs = [(pair["base"], pair["new"]) for pair in by_round.values() if len(pair) == 2]
    ratios = {}
    for metric in (m for m in METRICS if m.key in RATIO_KEYS[mode]):
        values = []
        for base, new in pairs:
            b, n = metric.value(base), metric.value(new)
            if b is not None and n is not None and b > 0:
                values.append(n / b)
        ratios[metric.key] = spread(values)
    return {"sides": sides, "ratios_new_over_base": ratios, "rounds_compared": len(pairs)}


def _values(metric: Metric, runs: list[dict[str, Any]]) -> list[float]:
    values = (metric.value(r) for r in runs)
    return [float(v) for v in values if v is not None and not math.isnan(v)]


# -- report ----------------------------------------------------------------------------------


def _number(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:,.2f}"


def run_header(mode: str) -> str:
    """The per-run table's header."""
    cells = "".join(f" {m.label:>15}" for m in metrics_for(mode))
    return f"{'round':>5} {'side':>4}{cells}  flags"


def run_line(record: dict[str, Any], mode: str) -> str:
    """One run's row."""
    cells = "".join(f" {_number(m.value(record)):>15}" for m in metrics_for(mode))
    flagged = "FLAGGED: " + "; ".join(record["flags"]) if record["flags"] else ""
    return f"{record['round']:>5} {record['side']:>4}{cells}  {flagged}".rstrip()


def summary_lines(summary: dict[str, Any], mode: str) -> list[str]:
    """The per-side medians and ranges, and the ratios new/base."""
    sides = summary["sides"]
    lines = [f"{'median (min-max)':<16} {'base':>26} {'new':>26}  new/base (median of rounds)"]
    for metric in metrics_for(mode):
        cells = []
        for side in SIDES:
            got = sides[side][metric.key]
            text = "-" if got is None else (
                f"{_number(got['median'])} ({_number(got['min'])}-{_number(got['max'])})"
            )  # fmt: skip
            cells.append(f"{text:>26}")
        ratio = summary["ratios_new_over_base"].get(metric.key)
        note = ""
        if ratio is not None:
            note = f"  x{ratio['median']:.3f} (x{ratio['min']:.3f}-x{ratio['max']:.3f})"
        lines.append(f"{metric.label:<16} {''.join(cells)}{note}")
    flagged = sum(sides[side]["flagged_runs"] for side in SIDES)
    if flagged:
        lines.append(
            f"WARNING: {flagged} flagged run(s) left out; ratios from "
            f"{summary['rounds_compared']} clean round(s)"
        )
    return lines


# -- the run ---------------------------------------------------------------------------------


def run(
    args: argparse.Namespace, config: BenchConfig, sides: dict[str, Revision]
) -> dict[str, Any]:
    """Check out, start and pin the gateways, measure, stop and clean up; return the report."""
    host = describe_host()  # before pinning narrows this process's CPU affinity
    fd_limit = raise_fd_limit()  # before spawning: the gateways inherit it
    started_at = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    for side in SIDES:
        print(f"{side:>4}: {sides[side].title}")
    print(f"workload: {workload(config)}; {args.runs} rounds, order alternating (ABBA)", flush=True)
    with contextlib.ExitStack() as stack:
        trees = {side: check_out(revision, stack) for side, revision in sides.items()}
        gateways = {s: start_gateway(trees[s], stack) for s in SIDES}
        server_cpus, pinning = pin_client()
        if server_cpus is None:
            print("note: fewer than 2 cores: gateways and client are not pinned")
        else:
            # Both gateways on the one server core: only one is busy at a time.
            for gateway in gateways.values():
                pin_process(gateway.pid, server_cpus)
        print(run_header(config.mode), flush=True)

        def show(record: dict[str, Any]) -> None:
            print(run_line(record, config.mode), flush=True)

        transport = config.transports[0]
        records = run_on_fast_loop(measure(config, transport, gateways, args.runs, show))
    return {
        "benchmark": "ab",
        "started_at": started_at,
        "host": host,
        "cpus": host["cpus"],
        "cpu_pinning": pinning,
        "fd_limit": fd_limit,
        "revisions": {side: revision.to_dict() for side, revision in trees.items()},
        "config": {
            "transport": config.transports[0],
            "streams": config.streams,
            "chunks": config.chunks,
            "mode": config.mode,
            "interval_ms": config.interval_ms,
            "timeout_s": config.timeout_s,
            "runs": args.runs,
            "warmup": {"streams": WARMUP_STREAMS, "chunks": WARMUP_CHUNKS},
        },
        "runs": records,
        "summary": summarize(records, config.mode),
    }


def workload(config: BenchConfig) -> str:
    """The workload in words."""
    text = f"{config.transports[0]}, {config.streams} streams x {config.chunks} chunks, "
    if config.mode == "paced":
        return text + f"paced every {config.interval_ms:g} ms"
    return text + "burst"


def main(argv: list[str] | None = None) -> int:
    """Command line; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        config = BenchConfig(
            streams=args.streams,
            chunks=args.chunks,
            mode=args.mode,
            interval_ms=args.interval_ms,
            transports=(args.transport,),
            timeout_s=args.timeout,
        )
        sides = {
            "base": replace(
                resolve("base", args.base),
                python=args.base_python,
                config=_config_file("base", args.base_config),
            ),
            "new": replace(
                resolve("new", args.new),
                python=args.new_python,
                config=_config_file("new", args.new_config),
            ),
        }
    except ValueError as exc:  # RevisionError is one
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        report = run(args, config, sides)
    except GatewayStartError as exc:
        print(f"error: could not start a gateway: {exc}", file=sys.stderr)
        return 1
    except RevisionError as exc:  # the worktree could not be made
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: gateways stopped, worktrees removed", file=sys.stderr)
        return 130
    print()
    print("\n".join(summary_lines(report["summary"], config.mode)))
    if args.json is not None:
        args.json.write_bytes(orjson.dumps(report, option=orjson.OPT_INDENT_2) + b"\n")
        print(f"results written to {args.json}")
    return 0


def _config_file(side: str, path: Path | None) -> Path | None:
    """``path`` made absolute (a side's gateway runs in its own tree), or ValueError if there
    is no such file."""
    if path is None:
        return None
    if not path.is_file():
        raise ValueError(f"the {side} side's configuration file {path} is not there")
    return path.resolve()


def _runs(text: str) -> int:
    try:
        runs = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, not {text!r}") from None
    if not 1 <= runs <= MAX_RUNS:
        raise argparse.ArgumentTypeError(f"must be between 1 and {MAX_RUNS}")
    return runs


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        epilog="Examples are in the module docstring of benchmarks/ab.py.",
    )
    add = parser.add_argument
    add("--base", default="HEAD", metavar="REV", help="the reference revision (default: HEAD)")
    add("--new", default=None, metavar="REV",
        help="the revision measured against it (default: the working tree, as is)")  # fmt: skip
    add("--base-python", default=sys.executable, metavar="PATH",
        help="the interpreter of the base side's gateway (default: this one)")  # fmt: skip
    add("--new-python", default=sys.executable, metavar="PATH",
        help="the interpreter of the new side's gateway (default: this one)")  # fmt: skip
    add("--base-config", type=Path, metavar="PATH",
        help="a configuration file for the base side's gateway (default: none)")  # fmt: skip
    add("--new-config", type=Path, metavar="PATH",
        help="a configuration file for the new side's gateway (default: none)")  # fmt: skip
    add("--transport", choices=("sse", "ws"), default="sse", help="(default: sse)")
    add("--streams", type=int, default=100, help="concurrent streams (default: 100)")
    add("--chunks", type=int, default=200, help="chunks per stream (default: 200)")
    add("--mode", choices=("burst", "paced"), default="burst", help="(default: burst)")
    add("--interval-ms", type=float, default=20.0, help="paced interval (default: 20)")
    add("--runs", type=_runs, default=5, metavar="K",
        help=f"rounds, one run per side each (1 to {MAX_RUNS}; default: 5)")  # fmt: skip
    add("--timeout", type=float, default=DEFAULT_TIMEOUT_S, metavar="S",
        help="time limit of each run (default: %(default)s)")  # fmt: skip
    add("--json", type=Path, metavar="PATH", help="write every run and the summary here")
    return parser


if __name__ == "__main__":
    # A SIGTERM (a CI time limit, say) unwinds like Ctrl-C does: gateways stopped, worktrees
    # removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    sys.exit(main())
