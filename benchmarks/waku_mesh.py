"""The Waku service node measured: publish-to-receive latency across a three-node relay mesh
and through the bridge, messages per second per core, and memory per connected light node.

Three ``airlane serve --waku-port 0`` processes on loopback, each with its own in-memory
streams: A, B relaying with A, C relaying with A and B. Light nodes are this project's own
`airlane.transports.waku.LightClient` in this process (one core is theirs, the nodes share
the rest: the numbers are this machine's, not a claim about a cluster).

- ``mesh``: ``--messages`` light pushes to A at ``--rate`` per second, each carrying its send
  time; a filter subscriber on C timestamps each arrival (relay A->C, or A->B->C).
- ``bridge``: the same messages published over A's HTTP API (``POST /v1/streams/...``) and
  received by a filter subscriber on A: the stream-to-Waku path alone.
- ``throughput``: ``--burst`` pushes to A from ``--pushers`` concurrent light clients as fast
  as A answers, until C's subscriber has them all; messages per second, and per second of CPU
  the three node processes used (``per core``).
- ``memory``: ``--peers`` light clients each holding a filter subscription on B: B's resident
  memory grown, per peer.

    .venv/bin/python benchmarks/waku_mesh.py                    # the full run
    .venv/bin/python benchmarks/waku_mesh.py --messages 50 --burst 200 --peers 20 --json -
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import psutil

from airlane.transports.waku import LightClient
from airlane.wire.libp2p import Multiaddr
from airlane.wire.waku import WakuMessage, auto_shard, shard_topic

CLUSTER = 17
TOPIC = "/bench/1/mesh/json"
PUBSUB = shard_topic(CLUSTER, auto_shard(TOPIC, 8))
READY = re.compile(r"airlane listening on (\S+) .*Waku on (/\S+)")


class Node:
    """One ``airlane serve`` process with a Waku node."""

    def __init__(self, process: subprocess.Popen[str], url: str, waku: str) -> None:
        self.process = process
        self.url = url
        self.waku = Multiaddr.parse(waku)
        self.ps = psutil.Process(process.pid)

    def cpu_s(self) -> float:
        times = self.ps.cpu_times()
        return float(times.user + times.system)

    def rss_mb(self) -> float:
        return float(self.ps.memory_info().rss) / 2**20


@contextlib.contextmanager
def node(workdir: Path, name: str, peers: list[str]) -> Iterator[Node]:
    """Start one gateway with a Waku node relaying with ``peers``; stop it after."""
    config = workdir / f"{name}.toml"
    listed = ", ".join(json.dumps(peer) for peer in peers)
    config.write_text(
        f'[waku]\ncluster_id = {CLUSTER}\nkey_file = "{workdir / name}.key"\npeers = [{listed}]\n'
    )
    command = [
        sys.executable, "-m", "airlane", "serve", "--port", "0", "--waku-port", "0",
        "--airc-port", "-1", "--grpc-port", "-1", "--http3-port", "-1", "--rsocket-port", "-1",
        "--config", str(config), "--log-level", "warning",
    ]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        match = READY.search(line)
        if match is None:
            raise RuntimeError(f"{name} did not start: {line!r}")
        yield Node(process, match.group(1), match.group(2))
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()


async def relay_peers(target: Node, expected: int, limit_s: float = 20.0) -> None:
    """Wait until ``target`` relays with ``expected`` peers (read from its /metrics)."""
    deadline = time.monotonic() + limit_s
    async with httpx.AsyncClient(base_url=target.url, timeout=5) as http:
        while time.monotonic() < deadline:
            text = (await http.get("/metrics")).text
            match = re.search(r"^airlane_waku_relay_peers (\S+)", text, re.M)
            if match and float(match.group(1)) >= expected:
                return
            await asyncio.sleep(0.1)
    raise RuntimeError(f"{target.url} did not relay with {expected} peers in time")


def percentiles(samples_ms: list[float]) -> dict[str, float]:
    ordered = sorted(samples_ms)
    if not ordered:
        return {"p50_ms": 0.0, "p99_ms": 0.0, "max_ms": 0.0}
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return {
        "p50_ms": round(statistics.median(ordered), 2),
        "p99_ms": round(p99, 2),
        "max_ms": round(ordered[-1], 2),
    }


@contextlib.asynccontextmanager
async def subscriber(target: Node, arrivals: dict[int, int]) -> AsyncIterator[LightClient]:
    """A light client on ``target`` recording ``arrivals[n] = receive time`` per message."""

    def on_message(message: WakuMessage, pubsub: str) -> None:
        body = orjson.loads(message.payload)
        arrivals.setdefault(body["n"], time.monotonic_ns())

    async with LightClient.connect(target.waku) as client:
        await client.subscribe(PUBSUB, [TOPIC], on_message)
        yield client


def message(n: int, run: str) -> WakuMessage:
    """Message ``n`` of a run, about 250 bytes, stamped as js-waku stamps (a message's hash
    covers its timestamp: without one, equal payloads would be one message to relay)."""
    body = orjson.dumps({"n": n, "run": run, "pad": "x" * 200})
    return WakuMessage(body, TOPIC, timestamp=time.time_ns())


async def wait_for(arrivals: dict[int, int], count: int, limit_s: float) -> None:
    """Poll until ``count`` messages arrived or ``limit_s`` passed (arrivals come from a
    call-back: polling every 10 ms adds at most that to the run's end, not to latencies)."""
    deadline = time.monotonic() + limit_s
    while len(arrivals) < count and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.01)


async def mesh_run(a: Node, c: Node, messages: int, rate: float) -> dict[str, Any]:
    arrivals: dict[int, int] = {}
    sent: dict[int, int] = {}
    async with subscriber(c, arrivals), LightClient.connect(a.waku) as publisher:
        start = time.monotonic()
        for n in range(messages):
            await asyncio.sleep(max(0.0, start + n / rate - time.monotonic()))
            sent[n] = time.monotonic_ns()
            await publisher.push(message(n, "mesh"))
        await wait_for(arrivals, messages, 10)
    latencies = [(arrivals[n] - sent[n]) / 1e6 for n in arrivals if n in sent]
    return {"messages": messages, "delivered": len(arrivals), **percentiles(latencies)}


async def bridge_run(a: Node, messages: int, rate: float) -> dict[str, Any]:
    arrivals: dict[int, int] = {}
    sent: dict[int, int] = {}
    path = f"/v1/streams/waku{TOPIC}/events"
    async with subscriber(a, arrivals), httpx.AsyncClient(base_url=a.url, timeout=10) as http:
        start = time.monotonic()
        for n in range(messages):
            await asyncio.sleep(max(0.0, start + n / rate - time.monotonic()))
            sent[n] = time.monotonic_ns()
            body = {"kind": "message", "payload": {"n": n, "pad": "x" * 200}}
            (await http.post(path, json=body)).raise_for_status()
        await wait_for(arrivals, messages, 10)
    latencies = [(arrivals[n] - sent[n]) / 1e6 for n in arrivals if n in sent]
    return {"messages": messages, "delivered": len(arrivals), **percentiles(latencies)}


async def throughput_run(nodes: list[Node], burst: int, pushers: int) -> dict[str, Any]:
    a, c = nodes[0], nodes[2]
    arrivals: dict[int, int] = {}
    async with subscriber(c, arrivals), contextlib.AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(LightClient.connect(a.waku)) for _ in range(pushers)
        ]
        cpu_before = sum(node.cpu_s() for node in nodes)
        started = time.monotonic()
        numbers = iter(range(burst))

        async def push_all(client: LightClient) -> None:
            for n in numbers:
                await client.push(message(n, "burst"))

        await asyncio.gather(*(push_all(client) for client in clients))
        await wait_for(arrivals, burst, 60)
        elapsed = time.monotonic() - started
        cpu = sum(node.cpu_s() for node in nodes) - cpu_before
    return {
        "messages": burst,
        "delivered": len(arrivals),
        "seconds": round(elapsed, 3),
        "messages_per_s": round(len(arrivals) / elapsed, 1),
        "node_cpu_s": round(cpu, 3),
        "messages_per_cpu_s": round(len(arrivals) / cpu, 1) if cpu else 0.0,
    }


async def memory_run(b: Node, peers: int) -> dict[str, Any]:
    before = b.rss_mb()
    async with contextlib.AsyncExitStack() as stack:
        for _ in range(peers):
            client = await stack.enter_async_context(LightClient.connect(b.waku))
            await client.subscribe(PUBSUB, [TOPIC], lambda message, pubsub: None)
        await asyncio.sleep(1.0)
        after = b.rss_mb()
    return {
        "peers": peers,
        "rss_mb_before": round(before, 1),
        "rss_mb_after": round(after, 1),
        "kb_per_peer": round((after - before) * 1024 / peers, 1),
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        workdir = Path(tmp)
        a = stack.enter_context(node(workdir, "a", []))
        b = stack.enter_context(node(workdir, "b", [str(a.waku)]))
        c = stack.enter_context(node(workdir, "c", [str(a.waku), str(b.waku)]))
        for target in (a, b, c):
            await relay_peers(target, 2)
        results: dict[str, Any] = {"cpus": os.cpu_count()}
        results["mesh"] = await mesh_run(a, c, args.messages, args.rate)
        results["bridge"] = await bridge_run(a, args.messages, args.rate)
        results["throughput"] = await throughput_run([a, b, c], args.burst, args.pushers)
        results["memory"] = await memory_run(b, args.peers)
        return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=50.0, help="messages per second")
    parser.add_argument("--burst", type=int, default=5000)
    parser.add_argument("--pushers", type=int, default=8)
    parser.add_argument("--peers", type=int, default=300)
    parser.add_argument("--json", type=Path, default=None, help="write results ('-': stdout)")
    args = parser.parse_args()
    results = asyncio.run(run(args))
    if args.json is not None:
        text = json.dumps(results, indent=2)
        if str(args.json) == "-":
            print(text)
        else:
            args.json.write_text(text + "\n")
        return
    mesh, bridge, burst, memory = (results[k] for k in ("mesh", "bridge", "throughput", "memory"))
    print(f"mesh A->C   {mesh['delivered']}/{mesh['messages']}  p50 {mesh['p50_ms']} ms  "
          f"p99 {mesh['p99_ms']} ms  max {mesh['max_ms']} ms")  # fmt: skip
    print(f"bridge HTTP {bridge['delivered']}/{bridge['messages']}  p50 {bridge['p50_ms']} ms  "
          f"p99 {bridge['p99_ms']} ms  max {bridge['max_ms']} ms")  # fmt: skip
    print(f"burst       {burst['delivered']}/{burst['messages']} in {burst['seconds']} s: "
          f"{burst['messages_per_s']} msg/s, "
          f"{burst['messages_per_cpu_s']} msg per node CPU-s")  # fmt: skip
    print(f"memory      {memory['peers']} light nodes on B: {memory['kb_per_peer']} KB each")


if __name__ == "__main__":
    main()
