"""A model update over a weak network: HTTP/3 against TCP on the identical lossy path.

A gateway in one network namespace serves an artifact file (``--size-mb``, random bytes) with
``--artifacts``; a client in the other namespace downloads it, over the lab's bridge
(`airlane.bench.netlab`: ``--rtt-ms`` round trip, each ``--loss`` in turn, the same seed for
every variant). The sender is the gateway, so the variants are its senders':

- ``tcp-bbr`` / ``tcp-cubic``: HTTP/1.1 over TCP with the kernel's BBR or CUBIC (set per
  namespace with ``net.ipv4.tcp_congestion_control``; CUBIC is added to the kernel's allowed
  list for the run, which is restored after);
- ``h3-airlane-bbr`` / ``h3-reno``: HTTP/3 (`airlane.client.h3.H3Client`) with Airlane's
  BBR-style controller or aioquic's default Reno (``[http3] congestion_control``).

Reported per loss and variant: seconds to download the file (median of ``--runs``; a run that
passes ``--timeout-s`` counts as failed), the CPU time the gateway and the client spent on it
(what limits HTTP/3 here: aioquic runs in Python on both ends, beside the lab's bridge, on
this machine's two cores), and the speed-up of each HTTP/3 variant over
``tcp-bbr`` and ``tcp-cubic``. Needs root (namespaces, TUN). Every transfer is bounded in bytes
and time, and nothing leaves the lab's namespaces.

    sudo .venv/bin/python benchmarks/weaknet.py                              # 5 MB, 50 ms
    sudo .venv/bin/python benchmarks/weaknet.py --size-mb 50 --loss 10,12 --runs 3
    sudo .venv/bin/python benchmarks/weaknet.py --size-mb 1 --loss 0,10 --json -   # smoke
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from airlane.bench.netlab import NetLab, netlab_available

VARIANTS = ("tcp-bbr", "tcp-cubic", "h3-airlane-bbr", "h3-reno")
PORT = 8420

# Runs in namespace A: download the file once, print {"seconds", "bytes", "sha256"}.
CLIENT = r"""
import asyncio, hashlib, json, sys, time
mode, host, port, path = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
timeout = float(sys.argv[5])

async def h3(cc):
    from airlane.client.h3 import H3Client
    async with await H3Client.connect(host, port, verify=False, congestion_control=cc) as client:
        response = await client.request("GET", path)
        digest, size = hashlib.sha256(), 0
        async for chunk in response.chunks():
            digest.update(chunk)
            size += len(chunk)
        return response.status, size, digest.hexdigest()

async def tcp():
    import httpx
    async with httpx.AsyncClient(timeout=timeout) as http:
        async with http.stream("GET", f"http://{host}:{port}{path}") as response:
            digest, size = hashlib.sha256(), 0
            async for chunk in response.aiter_bytes():
                digest.update(chunk)
                size += len(chunk)
            return response.status_code, size, digest.hexdigest()

async def main():
    started = time.monotonic()
    job = tcp() if mode == "tcp" else h3(mode)
    status, size, digest = await asyncio.wait_for(job, timeout)
    print(json.dumps({"seconds": time.monotonic() - started, "status": status, "bytes": size,
                      "sha256": digest, "client_cpu_s": time.process_time()}))

asyncio.run(main())
"""


# Runs in namespace A: read the file for ``seconds``, print the bytes that arrived after
# ``warmup`` seconds (both flows are then past their start-up).
FLOW = r"""
import asyncio, json, sys, time
mode, host, port, path = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
seconds, warmup = float(sys.argv[5]), float(sys.argv[6])

async def chunks():
    if mode == "tcp":
        import httpx
        async with httpx.AsyncClient(timeout=seconds + 30) as http:
            async with http.stream("GET", f"http://{host}:{port}{path}") as response:
                async for chunk in response.aiter_raw():
                    yield chunk
    else:
        from airlane.client.h3 import H3Client
        async with await H3Client.connect(host, port, verify=False) as client:
            response = await client.request("GET", path)
            async for chunk in response.chunks():
                yield chunk

async def main():
    started = time.monotonic()
    counted = 0
    async for chunk in chunks():
        now = time.monotonic() - started
        if now >= seconds:
            break
        if now >= warmup:
            counted += len(chunk)
    print(json.dumps({"bytes": counted, "window_s": seconds - warmup}))

asyncio.run(main())
"""


@dataclass
class Cell:
    """One variant at one loss rate."""

    variant: str
    loss: float
    seconds: list[float] = field(default_factory=list)
    failed: int = 0
    server_cpu_s: list[float] = field(default_factory=list)
    client_cpu_s: list[float] = field(default_factory=list)

    @property
    def median(self) -> float | None:
        return statistics.median(self.seconds) if self.seconds else None


def make_store(root: Path, size_mb: float) -> tuple[Path, str, str]:
    """An artifact store holding one random file of ``size_mb``; its URL path and SHA-256."""
    import hashlib

    import numpy as np
    from safetensors.numpy import save_file

    from airlane.artifacts.packer import pack

    count = int(size_mb * (1 << 20) / 4)
    tensor = np.random.default_rng(1).standard_normal(count, dtype=np.float32)
    source = root / "update.safetensors"
    save_file({"weights": tensor}, str(source))
    store = root / "store"
    pack([source], store, name="update", version="1")
    files = [p for p in (store / "update" / "1").iterdir() if p.suffix == ".safetensors"]
    data = files[0].read_bytes()
    return store, f"/v1/artifacts/update/1/{files[0].name}", hashlib.sha256(data).hexdigest()


def start_gateway(
    lab: NetLab, store: Path, variant: str, root: Path, buffered: int, extra: str = ""
) -> subprocess.Popen[str]:
    """The gateway in namespace B, its senders set for ``variant`` (``extra``: more of its
    configuration file); waits until ready."""
    tcp_cc = "cubic" if variant == "tcp-cubic" else "bbr"
    lab.run("b", ["sysctl", "-q", "-w", f"net.ipv4.tcp_congestion_control={tcp_cc}"], check=True)
    h3_cc = "reno" if variant == "h3-reno" else "airlane-bbr"
    config = root / f"{variant}.toml"
    config.write_text(
        f'[http3]\ncongestion_control = "{h3_cc}"\nmax_datagram_size = 1452\n'
        f"max_buffered_bytes = {buffered}\n{extra}"
    )
    argv = [sys.executable, "-m", "airlane", "serve", "--host", lab.addr_b, "--port", str(PORT),
            "--artifacts", str(store), "--config", str(config),
            "--log-level", "warning"]  # fmt: skip
    process = lab.popen("b", argv, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if "listening on" in line:
            return process
        if process.poll() is not None:
            break
    process.kill()
    raise RuntimeError(f"the gateway in the lab did not start ({variant})")


def download(lab: NetLab, variant: str, path: str, timeout_s: float) -> dict[str, Any] | None:
    """One download from namespace A; None if it failed or passed ``timeout_s``."""
    mode = "tcp" if variant.startswith("tcp") else variant.removeprefix("h3-")
    argv = [sys.executable, "-c", CLIENT, mode, lab.addr_b, str(PORT), path, str(timeout_s)]
    try:
        done = lab.run("a", argv, capture_output=True, text=True, timeout=timeout_s + 15)
    except subprocess.TimeoutExpired:
        return None
    if done.returncode != 0:
        return None
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


ALLOWED = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control")


@contextlib.contextmanager
def cubic_allowed() -> Iterator[None]:
    """A namespace other than the first may pick only an "allowed" TCP controller, and this
    kernel allows ``reno bbr``: CUBIC is added for the run and the list restored after."""
    before = ALLOWED.read_text().strip()
    if "cubic" not in before.split():
        ALLOWED.write_text(f"{before} cubic")
    try:
        yield
    finally:
        ALLOWED.write_text(before)


def measure(args: argparse.Namespace) -> list[Cell]:
    cells: list[Cell] = []
    with tempfile.TemporaryDirectory() as tmp, cubic_allowed():
        root = Path(tmp)
        os.chmod(root, 0o755)
        store, path, digest = make_store(root, args.size_mb)
        for loss in args.loss:
            with NetLab(delay_ms=args.rtt_ms / 2, loss=loss / 100, seed=args.seed) as lab:
                for variant in args.variants:
                    cell = Cell(variant, loss)
                    gateway = start_gateway(lab, store, variant, root, args.h3_buffered)
                    try:
                        server = psutil.Process(gateway.pid)
                        for _ in range(args.runs):
                            cpu = sum(server.cpu_times()[:2])
                            result = download(lab, variant, path, args.timeout_s)
                            ok = result is not None and result["sha256"] == digest
                            if ok:
                                assert result is not None
                                cell.seconds.append(result["seconds"])
                                cell.server_cpu_s.append(sum(server.cpu_times()[:2]) - cpu)
                                cell.client_cpu_s.append(result["client_cpu_s"])
                            else:
                                cell.failed += 1
                    finally:
                        gateway.terminate()
                        gateway.wait(10)
                    cells.append(cell)
                    shown = f"{cell.median:.2f} s" if cell.median is not None else "failed"
                    cpu = (f"server CPU {statistics.median(cell.server_cpu_s):.2f} s, client "
                           f"{statistics.median(cell.client_cpu_s):.2f} s"
                           if cell.seconds else "")  # fmt: skip
                    print(f"loss {loss:g} %  {variant:<15} {shown}  ({cell.failed} failed) {cpu}",
                          file=sys.stderr, flush=True)  # fmt: skip
    return cells


def fairness(args: argparse.Namespace) -> str:
    """Two flows at once through one ``--fair-rate-mbit`` bottleneck (no random loss): TCP
    with CUBIC against TCP with CUBIC (the reference share), then TCP with CUBIC against
    HTTP/3 with ``airlane-bbr``. Each flow's bytes in the window after the warm-up."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp, cubic_allowed():
        root = Path(tmp)
        os.chmod(root, 0o755)
        size = args.fair_rate_mbit / 8 * args.fair_seconds * 2  # more than both can read
        store, path, _ = make_store(root, size)
        for other in ("tcp", "airlane-bbr"):
            lab = NetLab(delay_ms=args.rtt_ms / 2, rate_mbit=args.fair_rate_mbit, seed=args.seed)
            with lab:
                gateway = start_gateway(lab, store, "tcp-cubic", root, args.h3_buffered)
                try:
                    flows = [
                        lab.popen(
                            "a",
                            [
                                sys.executable,
                                "-c",
                                FLOW,
                                mode,
                                lab.addr_b,
                                str(PORT),
                                path,
                                str(args.fair_seconds),
                                "5",
                            ],
                            stdout=subprocess.PIPE,
                            text=True,
                        )
                        for mode in ("tcp", other)
                    ]
                    got = []
                    for flow in flows:
                        out, _ = flow.communicate(timeout=args.fair_seconds + 60)
                        got.append(json.loads(out.strip().splitlines()[-1])["bytes"])
                finally:
                    gateway.terminate()
                    gateway.wait(10)
            window = args.fair_seconds - 5
            name = "TCP CUBIC" if other == "tcp" else "HTTP/3 airlane-bbr"
            share = got[1] / max(1, sum(got))
            rows.append(
                f"| TCP CUBIC + {name} | {got[0] * 8 / window / 1e6:.2f} | "
                f"{got[1] * 8 / window / 1e6:.2f} | {share:.0%} |"
            )
            print(rows[-1], file=sys.stderr, flush=True)
    head = [
        f"# Two flows through {args.fair_rate_mbit:g} Mbit/s at {args.rtt_ms:g} ms RTT, "
        f"{args.fair_seconds - 5:g} s after a 5 s warm-up (Mbit/s)",
        "",
        "| flows | first (TCP CUBIC) | second | second's share |",
        "|---|---|---|---|",
    ]
    return "\n".join(head + rows)


def report(cells: list[Cell], args: argparse.Namespace) -> str:
    lines = [
        f"# Model update of {args.size_mb:g} MB at {args.rtt_ms:g} ms RTT (median of "
        f"{args.runs}, timeout {args.timeout_s:g} s)",
        "",
        "| loss | " + " | ".join(args.variants) + " | h3-airlane-bbr vs tcp-bbr | vs tcp-cubic |",
        "|---|" + "---|" * (len(args.variants) + 2),
    ]
    for loss in args.loss:
        row = {c.variant: c for c in cells if c.loss == loss}
        shown = [
            "failed" if row[v].median is None else f"{row[v].median:.2f} s" for v in args.variants
        ]
        ours = row.get("h3-airlane-bbr")

        def ratio(peer: str, ours: Cell | None = ours, row: dict[str, Cell] = row) -> str:
            theirs = row.get(peer)
            if ours is None or theirs is None or ours.median is None or theirs.median is None:
                return "-"
            return f"{theirs.median / ours.median:.2f}x"

        lines.append(f"| {loss:g} % | " + " | ".join(shown) + f" | {ratio('tcp-bbr')} | "
                     f"{ratio('tcp-cubic')} |")  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=5.0)
    parser.add_argument("--rtt-ms", type=float, default=50.0)
    parser.add_argument("--loss", type=lambda s: [float(x) for x in s.split(",")],
                        default=[0.0, 2.0, 5.0, 10.0, 12.0],
                        help="percentages, comma-separated")  # fmt: skip
    parser.add_argument("--variants", type=lambda s: s.split(","), default=list(VARIANTS))
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--timeout-s", type=float, default=120.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--h3-buffered", type=int, default=262144,
                        help="[http3] max_buffered_bytes of the gateway")  # fmt: skip
    parser.add_argument("--json", help="also write the cells as JSON to this file (- for stdout)")
    parser.add_argument("--fairness", action="store_true",
                        help="measure two flows sharing a bottleneck instead")  # fmt: skip
    parser.add_argument("--fair-rate-mbit", type=float, default=10.0)
    parser.add_argument("--fair-seconds", type=float, default=25.0)
    args = parser.parse_args()
    unavailable = netlab_available()
    if unavailable:
        sys.exit(f"weaknet: the network lab cannot run here: {unavailable}")
    if args.fairness:
        print(fairness(args))
        return
    cells = measure(args)
    print(report(cells, args))
    if args.json:
        data = [
            {
                "variant": c.variant,
                "loss_pct": c.loss,
                "seconds": c.seconds,
                "failed": c.failed,
                "server_cpu_s": c.server_cpu_s,
                "client_cpu_s": c.client_cpu_s,
            }
            for c in cells
        ]
        emit_json(args.json, {"size_mb": args.size_mb, "rtt_ms": args.rtt_ms, "cells": data})


def emit_json(target: str, payload: dict[str, Any]) -> None:
    """Write ``payload`` as JSON to the file ``target`` (``-``: to stdout), for ``--json``."""
    text = json.dumps(payload)
    if target == "-":
        print(text)
    else:
        Path(target).write_text(text)


def percentile(values: list[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


if __name__ == "__main__":
    main()
