"""The client side of `benchmarks/webrtc_nat.py`, run inside the NAT lab's client namespace.

    python benchmarks/peers/webrtc_peer.py --url http://198.51.100.2:18500 --setups 50

It prints one JSON object:

- ``setup_ms``: for each of ``--setups`` peer connections, one after another, the time from
  ``createOffer`` to the ``airlane`` channel's ``open`` (ICE gathering with the gateway's
  STUN/TURN servers, the ``POST /v1/webrtc`` round trip, ICE checks, DTLS, SCTP); a set-up
  that does not open within ``--setup-timeout-s`` counts in ``failed``, with its reason;
- ``pairs``: the candidate pairs the gateway reports (``airlane_webrtc_connections_total``);
- ``bulk``: ``--bulk-events`` events of ``--event-bytes`` published to a stream beforehand,
  read over one channel from the start: ``mb_s`` from the first event's arrival to the last;
- ``paced``: generations one after another until ``--tokens`` deltas came (the gateway's
  synthetic backend paces them at its ``itl_ms``), read live: the gaps between consecutive
  deltas of a generation, p50/p99/max in ms.

``--policy relay`` makes the client gather relayed candidates only (iceTransportPolicy
``relay``): every path then goes through the TURN server. ``--turn-tcp`` puts the TURN server's
TCP URL first (aiortc uses one URL a server); ``--no-stun`` leaves the STUN servers out: aiortc
gathers every candidate before it offers, and a STUN request that UDP never delivers holds the
offer for its whole retransmission schedule (about 5.5 s).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import sys
import time
from typing import Any

import httpx
from aiortc import (
    RTCConfiguration,
    RTCIceServer,
    RTCIceTransportPolicy,
    RTCPeerConnection,
    RTCSessionDescription,
)


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Peer:
    """One peer connection with its ``airlane`` channel and what arrives on it."""

    def __init__(self, config: RTCConfiguration) -> None:
        self.pc = RTCPeerConnection(config)
        self.channel = self.pc.createDataChannel("airlane")
        self.inbox: asyncio.Queue[tuple[float, dict[str, Any]]] = asyncio.Queue()
        self.opened = asyncio.Event()
        self.channel.on("open", self.opened.set)
        self.channel.on(
            "message", lambda data: self.inbox.put_nowait((time.perf_counter(), json.loads(data)))
        )

    async def connect(self, http: httpx.AsyncClient, url: str) -> None:
        await self.pc.setLocalDescription(await self.pc.createOffer())
        response = await http.post(
            f"{url}/v1/webrtc",
            content=self.pc.localDescription.sdp,
            headers={"content-type": "application/sdp"},
        )
        response.raise_for_status()
        await self.pc.setRemoteDescription(RTCSessionDescription(response.text, "answer"))
        await self.opened.wait()

    def send(self, message: dict[str, Any]) -> None:
        self.channel.send(json.dumps(message))

    async def events(self) -> list[tuple[float, dict[str, Any]]]:
        """Arrival times and events until the stream's ``done`` (or ``error``)."""
        out = []
        while True:
            at, message = await self.inbox.get()
            if message.get("op") == "error":
                raise RuntimeError(f"the gateway refused: {message}")
            if message.get("op") != "event":
                continue
            out.append((at, message["event"]))
            if message["event"]["kind"] in ("done", "error"):
                return out


async def setups(args: argparse.Namespace, http: httpx.AsyncClient, config: Any) -> dict:
    times: list[float] = []
    failures: list[str] = []
    for _ in range(args.setups):
        peer = Peer(config)
        started = time.perf_counter()
        try:
            async with asyncio.timeout(args.setup_timeout_s):
                await peer.connect(http, args.url)
            times.append((time.perf_counter() - started) * 1000)
        except (TimeoutError, httpx.HTTPError, OSError) as exc:
            failures.append(type(exc).__name__ + (f": {exc}" if str(exc) else ""))
        finally:
            await peer.pc.close()
    result: dict[str, Any] = {"setups": args.setups, "ok": len(times), "failed": failures}
    if times:
        result["setup_ms"] = {
            "p50": round(statistics.median(times), 1),
            "p99": round(_percentile(times, 0.99), 1),
            "max": round(max(times), 1),
            # A set-up that waited out a STUN retransmission (aioice: 500 ms) shows here.
            "over_300": sum(t > 300 for t in times),
            "all": [round(t, 1) for t in times],
        }
    return result


async def bulk(args: argparse.Namespace, http: httpx.AsyncClient, config: Any) -> dict:
    stream = f"bench-bulk-{time.monotonic_ns()}"
    (await http.post(f"{args.url}/v1/streams", json={"name": stream})).raise_for_status()
    payload = "x" * args.event_bytes
    for start in range(0, args.bulk_events, 200):
        batch = [
            {"kind": "message", "payload": payload}
            for _ in range(min(200, args.bulk_events - start))
        ]
        if start + 200 >= args.bulk_events:
            batch.append({"kind": "done"})
        published = await http.post(
            f"{args.url}/v1/streams/{stream}/events", json={"events": batch}
        )
        published.raise_for_status()
    peer = Peer(config)
    try:
        await peer.connect(http, args.url)
        peer.send({"op": "subscribe", "stream": stream})
        events = await peer.events()
    finally:
        await peer.pc.close()
    seconds = events[-1][0] - events[0][0]
    size = args.event_bytes * (len(events) - 1)
    return {
        "published": args.bulk_events,
        # Fewer than published when the stream's retention dropped the oldest before the read.
        "events": len(events) - 1,
        "event_bytes": args.event_bytes,
        "seconds": round(seconds, 3),
        "mb_s": round(size / seconds / 1e6, 2) if seconds > 0 else None,
    }


async def paced(args: argparse.Namespace, http: httpx.AsyncClient, config: Any) -> dict:
    """Generations one after another on one channel until ``--tokens`` deltas came (the
    synthetic backend ends an answer at a random sentence end); the gaps within each."""
    peer = Peer(config)
    gaps: list[float] = []
    deltas = generations = 0
    try:
        await peer.connect(http, args.url)
        while deltas < args.tokens and generations < 100:
            request = {
                "model": "airlane-synthetic",
                "messages": [{"role": "user", "content": f"pace {generations}"}],
                "max_tokens": args.tokens,
                "stream": True,
            }
            peer.send({"op": "generate", "request": request, "subscribe": True})
            events = await peer.events()
            arrivals = [at for at, event in events if event["kind"] == "delta"]
            gaps += [(b - a) * 1000 for a, b in itertools.pairwise(arrivals)]
            deltas += len(arrivals)
            generations += 1
    finally:
        await peer.pc.close()
    return {
        "deltas": deltas,
        "generations": generations,
        "gap_ms": {
            "p50": round(statistics.median(gaps), 2),
            "p99": round(_percentile(gaps, 0.99), 2),
            "max": round(max(gaps), 2),
        }
        if gaps
        else None,
    }


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--setups", type=int, default=50)
    parser.add_argument("--setup-timeout-s", type=float, default=10.0)
    parser.add_argument("--policy", choices=("all", "relay"), default="all")
    parser.add_argument("--turn-tcp", action="store_true", help="TURN over TCP only")
    parser.add_argument(
        "--no-stun", action="store_true", help="leave out the STUN servers (UDP is blocked)"
    )
    parser.add_argument("--bulk-events", type=int, default=3000)
    parser.add_argument("--event-bytes", type=int, default=1024)
    parser.add_argument("--tokens", type=int, default=300)
    args = parser.parse_args()
    async with httpx.AsyncClient(timeout=10) as http:
        servers = (await http.get(f"{args.url}/v1/webrtc/ice-servers")).json()["iceServers"]
        ice = []
        for server in servers:
            if args.no_stun and "username" not in server:
                continue
            if "username" in server:
                # aiortc uses a server entry's first URL only: put the wanted transport first.
                wanted = "transport=tcp" if args.turn_tcp else "transport=udp"
                server["urls"] = sorted(server["urls"], key=lambda url: wanted not in url)
            ice.append(RTCIceServer(**server))
        config = RTCConfiguration(
            iceServers=ice, iceTransportPolicy=RTCIceTransportPolicy(args.policy)
        )
        result: dict[str, Any] = await setups(args, http, config)
        if result["ok"]:
            result["bulk"] = await bulk(args, http, config)
            result["paced"] = await paced(args, http, config)
        metrics = (await http.get(f"{args.url}/metrics")).text
        result["pairs"] = {
            line.split('pair="', 1)[1].split('"', 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in metrics.splitlines()
            if line.startswith("airlane_webrtc_connections_total{")
        }
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
