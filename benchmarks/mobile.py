"""The seed's mobile scenario: model updates at 12 % loss, the client's address changing three
times during every transfer.

A gateway in one namespace of the lab (`airlane.bench.netlab`) serves an artifact file; a
client in the other downloads it ``--transfers`` times, a fresh connection each time, and moves
``--moves`` times during each transfer (after 1/4, 2/4, 3/4 of the bytes):

- ``h3``: HTTP/3 with Airlane's controller; a move is `H3Client.rebind` (a new UDP port, as a
  NAT rebinding or a network change does): the connection and its stream carry on;
- ``tcp``: HTTP/1.1 over TCP with the kernel's BBR; a move kills the TCP connection (a TCP
  connection is bound to its addresses), and the client does what a good one does:
  reconnects and asks for the rest with ``Range`` (nothing already received is fetched
  again).

A transfer fails if it has not completed, SHA-256 checked, within ``--deadline-s``. Reported per
variant: failures, median and p90 seconds. Needs root (namespaces, TUN); bounded in count and
time, and nothing leaves the lab.

    sudo .venv/bin/python benchmarks/mobile.py                       # 100 transfers of 1 MB
    sudo .venv/bin/python benchmarks/mobile.py --transfers 10 --json -   # smoke
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from weaknet import PORT, cubic_allowed, emit_json, make_store, percentile, start_gateway

from airlane.bench.netlab import NetLab, netlab_available

# Runs in namespace A: the transfers, one JSON line of results.
CLIENT = r"""
import asyncio, hashlib, json, sys, time
mode, host, port, path, digest = sys.argv[1:6]
size, transfers, moves, deadline = map(float, sys.argv[6:10])
size, transfers, moves = int(size), int(transfers), int(moves)
marks = [size * (n + 1) // (moves + 1) for n in range(moves)]
where = {}  # how far the current transfer got: reported when it fails

async def h3():
    from airlane.client.h3 import H3Client
    where["step"] = "connect"
    async with await H3Client.connect(host, port, verify=False) as client:
        response = await client.request("GET", path)
        got, sha, moved = 0, hashlib.sha256(), 0
        while chunk := await response.receive():
            sha.update(chunk)
            got += len(chunk)
            where.update(step="body", got=got, moved=moved)
            while moved < len(marks) and got >= marks[moved]:
                await client.rebind()
                moved += 1
        where["step"] = "close"
    return sha.hexdigest(), moved

async def tcp():
    import httpx
    got, sha, moved = 0, hashlib.sha256(), 0
    while got < size:
        where.update(step="body", got=got, moved=moved)
        headers = {"range": f"bytes={got}-"} if got else {}
        async with httpx.AsyncClient(timeout=deadline) as http:
            async with http.stream("GET", f"http://{host}:{port}{path}", headers=headers) as r:
                assert r.status_code in (200, 206), r.status_code
                async for chunk in r.aiter_raw():
                    sha.update(chunk)
                    got += len(chunk)
                    if moved < len(marks) and got >= marks[moved]:
                        moved += 1
                        break  # the address changed: this connection is gone
    return sha.hexdigest(), moved

async def main():
    seconds, failures = [], []
    for n in range(transfers):
        started = time.monotonic()
        where.clear()
        try:
            result, moved = await asyncio.wait_for(h3() if mode == "h3" else tcp(), deadline)
            if result != digest:
                raise ValueError("the file arrived different")
            seconds.append(time.monotonic() - started)
        except Exception as exc:
            failures.append(f"{n}: {type(exc).__name__} {exc} {where}"[:200])
    print(json.dumps({"seconds": seconds, "failures": failures}))

asyncio.run(main())
"""


def run(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp, cubic_allowed():
        root = Path(tmp)
        os.chmod(root, 0o755)
        store, path, digest = make_store(root, args.size_mb)
        size = (store / "update" / "1" / Path(path).name).stat().st_size
        with NetLab(delay_ms=args.rtt_ms / 2, loss=args.loss / 100, seed=args.seed) as lab:
            for mode in args.variants:
                variant = "tcp-bbr" if mode == "tcp" else "h3-airlane-bbr"
                gateway = start_gateway(lab, store, variant, root, 262144)
                try:
                    argv = [sys.executable, "-c", CLIENT, mode, lab.addr_b, str(PORT), path,
                            digest, str(size), str(args.transfers), str(args.moves),
                            str(args.deadline_s)]  # fmt: skip
                    bound = args.transfers * (args.deadline_s + 5) + 30
                    done = lab.run("a", argv, capture_output=True, text=True, timeout=bound)
                    if done.returncode != 0:
                        raise RuntimeError(f"the {mode} client failed: {done.stderr[-2000:]}")
                    results[mode] = json.loads(done.stdout.strip().splitlines()[-1])
                finally:
                    gateway.terminate()
                    gateway.wait(10)
                print(f"{mode}: {summary(results[mode], args.transfers)}", file=sys.stderr)
    return results


def summary(result: dict[str, Any], transfers: int) -> str:
    seconds = sorted(result["seconds"])
    if not seconds:
        return f"{transfers} of {transfers} failed"
    p90 = percentile(seconds, 0.9)
    return (
        f"{len(result['failures'])} of {transfers} failed; median "
        f"{statistics.median(seconds):.2f} s, p90 {p90:.2f} s, total {sum(seconds):.1f} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=1.0)
    parser.add_argument("--rtt-ms", type=float, default=50.0)
    parser.add_argument("--loss", type=float, default=12.0, help="percent, each way")
    parser.add_argument("--transfers", type=int, default=100)
    parser.add_argument("--moves", type=int, default=3, help="address changes per transfer")
    parser.add_argument("--deadline-s", type=float, default=30.0)
    parser.add_argument("--variants", type=lambda s: s.split(","), default=["h3", "tcp"])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", help="also write the results as JSON to this file (- for stdout)")
    args = parser.parse_args()
    unavailable = netlab_available()
    if unavailable:
        sys.exit(f"mobile: the network lab cannot run here: {unavailable}")
    results = run(args)
    print(
        f"# {args.transfers} transfers of {args.size_mb:g} MB at {args.loss:g} % loss, "
        f"{args.rtt_ms:g} ms RTT, {args.moves} address changes each\n\n"
        "| variant | result |\n|---|---|"
    )
    for mode, result in results.items():
        name = "HTTP/3 (migrates)" if mode == "h3" else "TCP BBR (reconnects, Range resume)"
        print(f"| {name} | {summary(result, args.transfers)} |")
    if args.json:
        emit_json(args.json, {"args": vars(args), "results": results})


if __name__ == "__main__":
    main()
