"""What XOR parity recovers of WebTransport datagrams on a lossy link.

A gateway in one namespace of the lab (`airlane.bench.netlab`, ``--loss`` each way, ``--rtt-ms``)
generates ``--generations`` token streams; a client in the other subscribes to them over
WebTransport with ``"datagrams": true`` (each event one datagram, never resent), once without
parity and once per ``--fec`` group size, and counts the events that arrived against the
streams' lengths (read afterwards over TCP). Reported per variant: delivered %, rebuilt from
parity, and the datagrams' overhead. Needs root (namespaces, TUN); bounded.

    sudo .venv/bin/python benchmarks/datagrams.py                 # 5 % loss, groups of 4 and 8
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from weaknet import PORT, emit_json, start_gateway

from airlane.bench.netlab import NetLab, netlab_available

CLIENT = r"""
import asyncio, json, sys
host, port, generations, fec = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])

async def main():
    from airlane.client.webtransport import WebTransportClient
    request = {"model": "synthetic", "stream": True, "max_tokens": 400,
               "messages": [{"role": "user", "content": "count"}]}
    async with await WebTransportClient.connect(host, port, verify=False, fec=fec or None) as wt:
        streams = []
        for n in range(generations):
            # Subscribed from the first event (a late reader would get history coalesced).
            op = {"op": "generate", "request": {**request, "seed": n}, "datagrams": True}
            streams.append((await wt.call(op))["stream"])
        seen = set()
        async def read():
            async for message in wt.events():
                if message.get("op") == "event":
                    seen.add((message["stream"], message["event"]["seq"]))
        reader = asyncio.create_task(read())
        await asyncio.sleep(8)  # the generations (about 2 s), then stragglers
        reader.cancel()
        import httpx  # each stream's length, over TCP (reliable)
        async with httpx.AsyncClient(base_url=f"http://{host}:{port}", timeout=30) as http:
            total = 0
            for stream in streams:
                total += (await http.get(f"/v1/streams/{stream}")).json()["last_seq"]
        print(json.dumps({"received": len(seen), "total": total, "recovered": wt.recovered}))

asyncio.run(main())
"""


def run(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        os.chmod(root, 0o755)
        (root / "store").mkdir()
        with NetLab(delay_ms=args.rtt_ms / 2, loss=args.loss / 100, seed=args.seed) as lab:
            config = "[synthetic]\nttft_ms = 5.0\nitl_ms = 4.0\n"
            gateway = start_gateway(lab, root / "store", "tcp-bbr", root, 262144, extra=config)
            try:
                for fec in [0, *args.fec]:
                    argv = [sys.executable, "-c", CLIENT, lab.addr_b, str(PORT),
                            str(args.generations), str(fec)]  # fmt: skip
                    done = lab.run("a", argv, capture_output=True, text=True, timeout=120)
                    if done.returncode != 0:
                        raise RuntimeError(f"the client failed: {done.stderr[-2000:]}")
                    name = "no parity" if not fec else f"parity every {fec}"
                    results[name] = json.loads(done.stdout.strip().splitlines()[-1])
                    results[name]["overhead"] = 0 if not fec else 1 / fec
                    print(name, results[name], file=sys.stderr, flush=True)
            finally:
                gateway.terminate()
                gateway.wait(10)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loss", type=float, default=5.0, help="percent, each way")
    parser.add_argument("--rtt-ms", type=float, default=50.0)
    parser.add_argument("--generations", type=int, default=20)
    parser.add_argument("--fec", type=lambda s: [int(x) for x in s.split(",")], default=[4, 8])
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", help="also write the results as JSON to this file (- for stdout)")
    args = parser.parse_args()
    unavailable = netlab_available()
    if unavailable:
        sys.exit(f"datagrams: the network lab cannot run here: {unavailable}")
    results = run(args)
    print(
        f"# {args.generations} token streams as WebTransport datagrams at {args.loss:g} % "
        "loss\n\n"
        "| variant | delivered | rebuilt from parity | extra datagrams |\n|---|---|---|---|"
    )
    for name, r in results.items():
        share = r["received"] / max(1, r["total"])
        print(f"| {name} | {share:.1%} ({r['received']} of {r['total']}) | {r['recovered']} | "
              f"{r['overhead']:.0%} |")  # fmt: skip
    if args.json:
        emit_json(args.json, {"args": vars(args), "results": results})


if __name__ == "__main__":
    main()
