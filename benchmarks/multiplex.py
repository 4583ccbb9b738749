"""Many token streams on one connection over a lossy link: WebTransport against the WebSocket
multiplex on TCP.

A gateway in one namespace of the lab (`airlane.bench.netlab`: ``--rtt-ms``, ``--loss`` each
way) generates ``--streams`` paced token streams (``--itl-ms`` apart, ``--tokens`` each) for a
client in the other namespace, all on one connection:

- ``ws``: ``/v1/ws`` over a WebSocket (TCP, the kernel's BBR): every stream shares one byte
  stream, so a lost packet holds back all of them until it is resent;
- ``wt``: ``/v1/ws`` over WebTransport (HTTP/3): each stream's events on a QUIC stream of
  their own, so a loss holds back only the stream it belonged to;
- ``wt-redundant``: the same, each event also sent as a datagram ahead of its stream copy
  (``"redundant": true``; with ``--fec`` parity over the datagrams), the client taking
  whichever arrives first, in order: a loss costs a resend's wait only when both are lost.

Reported: the inter-chunk gap each stream's reader sees (time between consecutive events of one
stream, at the client), p50 / p99 / max over all streams, at ``--loss`` and, in the same run,
without loss: the pacing and its jitter alone put the lossless p99 well above ``--itl-ms``, so
what loss costs is the p99's excess over that floor, compared between the variants.
Needs root (namespaces, TUN); bounded in streams, tokens and time.

    sudo .venv/bin/python benchmarks/multiplex.py                      # 100 streams, 2 % loss
    sudo .venv/bin/python benchmarks/multiplex.py --streams 10 --json -   # smoke
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

from weaknet import PORT, emit_json, percentile, start_gateway

from airlane.bench.netlab import NetLab, netlab_available

# Runs in namespace A: start the streams on one connection, print the gaps per stream.
CLIENT = r"""
import asyncio, json, sys, time
mode, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
streams, tokens, deadline = int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6])
fec = int(sys.argv[7]) or None
request = {"model": "synthetic", "stream": True, "max_tokens": tokens,
           "messages": [{"role": "user", "content": "a long answer please"}]}
arrivals = {}

def seen(message, at):
    if message.get("op") != "event":
        return False
    arrivals.setdefault(message["stream"], []).append(at)
    return message["event"]["kind"] in ("done", "error")

async def wt():
    from airlane.client.webtransport import WebTransportClient
    redundant = mode == "wt-redundant"
    async with await WebTransportClient.connect(host, port, verify=False, fec=fec) as client:
        for n in range(streams):
            op = {"op": "generate", "request": {**request, "seed": n}, "redundant": redundant}
            await client.call(op)
        ended = 0
        async for message in client.events():
            ended += seen(message, message.at)
            if ended == streams:
                return

async def ws():
    import orjson, websockets
    async with websockets.connect(f"ws://{host}:{port}/v1/ws", max_size=None) as socket:
        for n in range(streams):
            op = {"op": "generate", "request": {**request, "seed": n}}
            await socket.send(orjson.dumps(op).decode())
        ended = 0
        async for text in socket:
            ended += seen(orjson.loads(text), time.monotonic())
            if ended == streams:
                return

async def main():
    await asyncio.wait_for(ws() if mode == "ws" else wt(), deadline)
    gaps = [b - a for times in arrivals.values() for a, b in zip(times, times[1:])]
    print(json.dumps({"gaps": gaps, "streams": len(arrivals)}))

asyncio.run(main())
"""


def run(args: argparse.Namespace, loss: float) -> dict[str, dict[str, Any]]:
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        os.chmod(root, 0o755)
        store = root / "store"
        store.mkdir()
        with NetLab(delay_ms=args.rtt_ms / 2, loss=loss / 100, seed=args.seed) as lab:
            for mode in args.variants:
                config = (
                    f"[synthetic]\nttft_ms = 5.0\nitl_ms = {args.itl_ms}\n"
                    f"itl_jitter_ms = {args.itl_ms / 5}\n"
                )
                gateway = start_gateway(lab, store, "tcp-bbr", root, 262144, extra=config)
                try:
                    argv = [sys.executable, "-c", CLIENT, mode, lab.addr_b, str(PORT),
                            str(args.streams), str(args.tokens), str(args.deadline_s),
                            str(args.fec)]  # fmt: skip
                    done = lab.run(
                        "a", argv, capture_output=True, text=True, timeout=args.deadline_s + 30
                    )
                    if done.returncode != 0:
                        raise RuntimeError(f"the {mode} client failed: {done.stderr[-2000:]}")
                    results[mode] = json.loads(done.stdout.strip().splitlines()[-1])
                finally:
                    gateway.terminate()
                    gateway.wait(10)
                print(f"{loss:g} % {mode}: {summary(results[mode])}", file=sys.stderr, flush=True)
    return results


def summary(result: dict[str, Any]) -> str:
    gaps = [g * 1000 for g in result["gaps"]]
    return (
        f"{result['streams']} streams, {len(gaps)} gaps: p50 {statistics.median(gaps):.1f} ms, "
        f"p99 {percentile(gaps, 0.99):.1f} ms, max {max(gaps):.1f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--tokens", type=int, default=60)
    parser.add_argument("--itl-ms", type=float, default=50.0)
    parser.add_argument("--rtt-ms", type=float, default=50.0)
    parser.add_argument("--loss", type=float, default=2.0, help="percent, each way")
    parser.add_argument("--variants", type=lambda s: s.split(","),
                        default=["wt", "wt-redundant", "ws"])  # fmt: skip
    parser.add_argument("--fec", type=int, default=0, help="parity group of wt-redundant")
    parser.add_argument("--deadline-s", type=float, default=120.0)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", help="also write the results as JSON to this file (- for stdout)")
    args = parser.parse_args()
    unavailable = netlab_available()
    if unavailable:
        sys.exit(f"multiplex: the network lab cannot run here: {unavailable}")
    floor = run(args, 0.0)
    results = run(args, args.loss)
    print(
        f"# {args.streams} token streams on one connection, {args.tokens} tokens "
        f"{args.itl_ms:g} ms apart (jitter {args.itl_ms / 5:g} ms), {args.rtt_ms:g} ms RTT\n\n"
        f"| variant | gap at {args.loss:g} % loss | gap without loss | p99 excess |\n"
        "|---|---|---|---|"
    )
    names = {
        "wt": "WebTransport (a QUIC stream each)",
        "wt-redundant": "WebTransport, redundant (stream + datagram copy)",
        "ws": "WebSocket multiplex (TCP)",
    }
    excess = {
        mode: (percentile(results[mode]["gaps"], 0.99) - percentile(floor[mode]["gaps"], 0.99))
        * 1000
        for mode in results
    }
    for mode, result in results.items():
        print(f"| {names.get(mode, mode)} | {summary(result)} | {summary(floor[mode])} | "
              f"{excess[mode]:+.1f} ms |")  # fmt: skip
    if "ws" in excess and excess["ws"] > 0:
        for mode in ("wt", "wt-redundant"):
            if mode in excess:
                print(f"\np99 excess, {names[mode]} / WebSocket: {excess[mode] / excess['ws']:.2f}")
    if args.json:
        emit_json(args.json, {"args": vars(args), "results": results, "floor": floor})


if __name__ == "__main__":
    main()
