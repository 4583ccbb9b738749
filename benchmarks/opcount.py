"""Bytecodes the gateway runs per stream: ``airlane serve`` under an opcode counter.

Starts ``airlane serve`` in a subprocess whose main thread (the event loop) counts every
bytecode it executes (``sys.settrace`` with ``f_trace_opcodes``), warms it up with one bench
run, resets the counts, runs ``airlane bench --url ... --streams N --chunks C --transport T``
and prints the bytecodes per stream, by module and by function.

Unlike CPU time on a shared VM, the count is the same from run to run, so it shows changes of
a few per cent; but it sees Python work only, not C code, the kernel or the garbage collector,
so confirm what it finds with CPU time (``benchmarks/ab.py``, ``server us/chunk``). Tracing
makes the gateway tens of times slower: keep N small (50) and compare like with like.

    .venv/bin/python benchmarks/opcount.py --transport ws --streams 50 --chunks 1
    .venv/bin/python benchmarks/opcount.py --streams 20 --chunks 20 --interval-ms 200  # paced
    .venv/bin/python benchmarks/opcount.py --proxy --streams 20 --chunks 50 --interval-ms 100

``--proxy`` counts proxy mode instead: the gateway runs with ``--upstream`` in front of
`benchmarks/upstream.py`, and the streams are `benchmarks/proxy.py`'s streaming chat
completions (OpenAI format over SSE), paced by the upstream at ``--interval-ms`` (default 100).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from airlane.bench.spawn import GatewayStartError, ServerProcess

sys.path.insert(0, str(Path(__file__).resolve().parent))
from proxy import UpstreamProcess  # a sibling script, not a package

# Run by the gateway subprocess: SIGUSR1 clears the counts, SIGUSR2 writes them to argv[1];
# argv[2] is its configuration file, and any further arguments go to ``airlane serve``.
_BOOTSTRAP = """
import collections, json, signal, sys
out = sys.argv[1]
counts = collections.Counter()
def tracer(frame, event, arg):
    if event == "call":
        frame.f_trace_opcodes = True
        frame.f_trace_lines = False
        return tracer
    if event == "opcode":
        code = frame.f_code
        counts[code.co_filename, code.co_name] += 1
    return tracer
def reset(*_):
    counts.clear()
def dump(*_):
    sys.settrace(None)
    with open(out + ".tmp", "w") as f:
        json.dump([[path, name, n] for (path, name), n in counts.items()], f)
    import os
    os.replace(out + ".tmp", out)
    sys.settrace(tracer)
signal.signal(signal.SIGUSR1, reset)
signal.signal(signal.SIGUSR2, dump)
sys.argv = ["airlane", "serve", "--port", "0", "--log-level", "warning", "--config", sys.argv[2],
            *sys.argv[3:]]
sys.settrace(tracer)
from airlane.cli import main
main()
"""

BENCH_TIMEOUT_S = 600.0
DUMP_TIMEOUT_S = 30.0


def _short(path: str) -> str:
    """A code object's file, without the site-packages or checkout prefix."""
    for marker in ("site-packages/", "/src/", "/lib/python3."):
        if marker in path:
            path = path.split(marker, 1)[1]
            if marker == "/lib/python3.":
                path = path.split("/", 1)[-1]
    return path


def _module(path: str) -> str:
    """Airlane's files one by one; other packages as one line each."""
    short = _short(path)
    if short.startswith("airlane/"):
        return short
    return short.split("/", 1)[0]


def _bench(url: str, transport: str, streams: int, chunks: int, pacing: list[str]) -> None:
    """One ``airlane bench`` run; raise unless every chunk arrived."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "bench.json"
        command = [
            sys.executable, "-m", "airlane", "bench", "--url", url, "--transport", transport,
            "--streams", str(streams), "--chunks", str(chunks), "--timeout", str(BENCH_TIMEOUT_S),
            "--json", str(report), *pacing,
        ]  # fmt: skip
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=BENCH_TIMEOUT_S + 60, check=False
        )
        if done.returncode != 0 or not report.exists():
            raise RuntimeError(f"airlane bench failed: {done.stderr.strip()[-500:]}")
        data = json.loads(report.read_text())
    results = data["results"] if isinstance(data, dict) else data
    for result in results:
        if result["chunks_received"] != result["chunks_expected"] or result["errors"]:
            raise RuntimeError(f"incomplete run: {result['chunks_received']} chunks, errors")


def _proxy_streams(url: str, streams: int, chunks: int, interval_ms: float) -> None:
    """``streams`` streaming chat completions through the gateway at ``url`` (proxy mode);
    raise unless every chunk arrived."""
    from proxy import run_phase  # a sibling script, not a package

    async def run() -> list[Any]:
        return await run_phase(
            f"{url}/v1/chat/completions", streams, chunks, interval_ms, interval_ms
        )

    results = asyncio.run(run())
    received = sum(len(r.stamps) for r in results)
    errors = [r.error for r in results if r.error]
    if received != streams * chunks or errors:
        raise RuntimeError(f"incomplete proxy run: {received} chunks, errors {errors[:3]}")


def _dump(pid: int, out: Path) -> list[tuple[str, str, int]]:
    out.unlink(missing_ok=True)
    os.kill(pid, signal.SIGUSR2)
    deadline = time.monotonic() + DUMP_TIMEOUT_S
    while not out.exists():
        if time.monotonic() > deadline:
            raise RuntimeError("the traced gateway did not write its counts")
        time.sleep(0.05)
    return [(path, name, int(n)) for path, name, n in json.loads(out.read_text())]


def report(
    counts: list[tuple[str, str, int]], streams: int, top: int, chunks: int = 1
) -> list[str]:
    """The lines to print: per stream in all (and per chunk), by module, by function."""
    total = sum(n for _, _, n in counts)
    by_module: collections.Counter[str] = collections.Counter()
    by_function: collections.Counter[tuple[str, str]] = collections.Counter()
    for path, name, n in counts:
        by_module[_module(path)] += n
        by_function[_short(path), name] += n
    lines = [f"bytecodes per stream: {total / streams:,.0f} ({total:,} for {streams} streams)"]
    if chunks > 1:
        lines.append(f"bytecodes per chunk: {total / (streams * chunks):,.0f}")
    lines.append("by module:")
    lines += [f"{n / streams:10,.0f}  {module}" for module, n in by_module.most_common(top)]
    lines.append("by function:")
    lines += [
        f"{n / streams:10,.1f}  {name}  ({path})"
        for (path, name), n in by_function.most_common(top)
    ]
    return lines


def main() -> int:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transport", choices=("sse", "ws"), default="sse")
    parser.add_argument("--streams", type=int, default=50)
    parser.add_argument("--chunks", type=int, default=1)
    parser.add_argument("--top", type=int, default=25, help="lines per table")
    parser.add_argument(
        "--proxy", action="store_true", help="proxy mode: the gateway in front of upstream.py"
    )
    parser.add_argument(
        "--interval-ms",
        type=float,
        help="paced mode at this interval (make it long: tracing slows the gateway tenfold)",
    )
    args = parser.parse_args()
    if not (1 <= args.streams <= 500 and 1 <= args.chunks <= 1000 and 1 <= args.top <= 200):
        parser.error("--streams 1..500, --chunks 1..1000, --top 1..200")
    if args.interval_ms is not None and not 1 <= args.interval_ms <= 10_000:
        parser.error("--interval-ms 1..10000")
    pacing = (
        []
        if args.interval_ms is None
        else ["--mode", "paced", "--interval-ms", str(args.interval_ms)]
    )
    mode = "burst" if args.interval_ms is None else f"paced every {args.interval_ms:g} ms"
    if args.proxy:
        interval_ms = 100.0 if args.interval_ms is None else args.interval_ms
        mode = f"proxy mode, paced every {interval_ms:g} ms by the upstream"
        upstream: contextlib.AbstractContextManager[Any] = UpstreamProcess(args.chunks, interval_ms)
    else:
        upstream = contextlib.nullcontext()
    with upstream as up, tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "counts.json"
        config = Path(tmp) / "airlane.toml"
        # The collector's pacer ticks 20 times a second whatever the load: work per second,
        # not per stream, that would swamp a small traced run (which runs ten times slower).
        config.write_text("[gc]\npaced = false\n")
        serve_args = [] if up is None else ["--upstream", f"{up.url}/v1"]
        server = ServerProcess(
            [sys.executable, "-c", _BOOTSTRAP, str(out), str(config), *serve_args],
            name="the traced gateway",
        )

        def streams() -> None:
            if up is None:
                _bench(url, args.transport, args.streams, args.chunks, pacing)
            else:
                _proxy_streams(url, args.streams, args.chunks, interval_ms)

        try:
            url = server.start()
            streams()  # warm-up: imports, caches
            os.kill(server.pid, signal.SIGUSR1)
            time.sleep(0.5)
            streams()
            time.sleep(0.5)  # connections closing
            counts = _dump(server.pid, out)
        except (GatewayStartError, RuntimeError, subprocess.TimeoutExpired) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        finally:
            server.stop()
    transport = "openai sse" if args.proxy else args.transport
    print(f"{transport}, {args.streams} streams x {args.chunks} chunks, {mode}:")
    print("\n".join(report(counts, args.streams, args.top, args.chunks)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
