"""A WebRTC data-channel client for the tests (aiortc), run inside a lab namespace.

    python aiortc_client.py --url http://10.77.0.2:8420 --prompt hi

It offers a data channel ``airlane`` to the gateway (``POST /v1/webrtc``), starts a
generation on it (``generate`` with ``subscribe``), reads its first 10 events,
closes that peer connection, offers a new one, resumes from the last ``id`` it saw, and reads
to the end. It prints JSON lines: ``{"event": "connected", "session": ...}``, each received
``{"event": "message", "peer": 1|2, "message": {...}}``, and ``{"event": "done"}``; it exits 1
on any error or after ``--timeout-s``.

``--signal airc`` offers over AIRC over WebSocket (``RTC_OFFER`` on ``/v1/ws``, subprotocol
``airc.v1.2``) instead of ``POST /v1/webrtc``. ``--rt`` also opens the real-time channel
``airlane.rt`` (unordered, no retransmissions) and, on it, pings and follows the generation
from its start (``{"event": "rt", "message": ...}`` lines). ``--trickle`` offers without
candidates and trickles them after the answer (``PATCH``, or ``RTC_CANDIDATES`` over AIRC).
``--oversize N`` sends one message of N bytes and reports the channel's answer;
``--big-event N`` publishes an event of N bytes to a stream and subscribes to it over the
channel.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

import httpx
from aiortc import RTCConfiguration, RTCIceServer, RTCPeerConnection, RTCSessionDescription

from airlane.client.airc import AircClient

ICE: list[RTCIceServer] = []
"""The gateway's STUN/TURN servers (``--ice``: from ``/v1/webrtc/ice-servers``)."""
AIRC: list[AircClient] = []
"""The AIRC connection signalling goes over (``--signal airc``)."""
TRICKLE = False
"""``--trickle``: offer without candidates, and send them after (PATCH or RTC_CANDIDATES)."""
REALTIME: dict[str, object] = {}
"""``--rt``: the first peer's real-time channel (``channel``) and what arrives on it
(``inbox``)."""


def say(line: dict) -> None:
    sys.stdout.write(json.dumps(line) + "\n")
    sys.stdout.flush()


async def connect(
    http: httpx.AsyncClient, url: str
) -> tuple[RTCPeerConnection, object, asyncio.Queue, str]:
    pc = RTCPeerConnection(RTCConfiguration(iceServers=ICE or None))
    channel = pc.createDataChannel("airlane")
    inbox: asyncio.Queue = asyncio.Queue()
    opened = asyncio.Event()
    channel.on("open", opened.set)
    channel.on("message", lambda data: inbox.put_nowait(json.loads(data)))
    if "wanted" in REALTIME and "channel" not in REALTIME:
        rt = pc.createDataChannel("airlane.rt", ordered=False, maxRetransmits=0)
        rt_inbox: asyncio.Queue = asyncio.Queue()
        rt.on("message", lambda data: rt_inbox.put_nowait(json.loads(data)))
        REALTIME.update(channel=rt, inbox=rt_inbox)
    await pc.setLocalDescription(await pc.createOffer())
    offer, fragment = _split_candidates(pc.localDescription.sdp) if TRICKLE else (None, None)
    offer = offer or pc.localDescription.sdp
    if AIRC:
        session, answer = await AIRC[0].webrtc_offer(offer)
    else:
        response = await http.post(
            f"{url}/v1/webrtc", content=offer, headers={"content-type": "application/sdp"}
        )
        response.raise_for_status()
        session, answer = response.headers["location"].rsplit("/", 1)[1], response.text
    if fragment is not None:
        # Trickled before the answer is applied (before any check), as a browser sends
        # candidates as it gathers them: the gateway learns them from here alone.
        if AIRC:
            await AIRC[0].webrtc_candidates(session, fragment)
        else:
            patched = await http.patch(
                f"{url}/v1/webrtc/{session}",
                content=fragment,
                headers={"content-type": "application/trickle-ice-sdpfrag"},
            )
            patched.raise_for_status()
    await pc.setRemoteDescription(RTCSessionDescription(answer, "answer"))
    await opened.wait()
    say({"event": "connected", "session": session})
    return pc, channel, inbox, session


def _split_candidates(sdp: str) -> tuple[str, str]:
    """``sdp`` without its candidates, and the candidates as a trickle fragment."""
    lines = sdp.split("\r\n")
    candidates = [line for line in lines if line.startswith("a=candidate:")]
    mid = next((line for line in lines if line.startswith("a=mid:")), "a=mid:0")
    rest = [line for line in lines if line not in candidates and line != "a=end-of-candidates"]
    fragment = "\r\n".join([mid, *candidates, "a=end-of-candidates", ""])
    return "\r\n".join(rest), fragment


async def realtime(stream: str) -> None:
    """On the real-time channel: a ping, then the generation from its start, to its end."""
    channel: Any = REALTIME["channel"]
    inbox: Any = REALTIME["inbox"]
    while channel.readyState != "open":
        await asyncio.sleep(0.01)
    channel.send(json.dumps({"op": "ping", "ref": "rt"}))
    channel.send(json.dumps({"op": "subscribe", "stream": stream, "ref": "rt-sub"}))
    while True:
        message = await inbox.get()
        say({"event": "rt", "message": message})
        if message.get("op") == "event" and message["event"]["kind"] == "done":
            return


async def oversize(args: argparse.Namespace) -> None:
    """Send one --oversize message; say what the gateway answered and whether it closed the
    channel, then whether a new peer connection is served."""
    async with asyncio.timeout(args.timeout_s), httpx.AsyncClient(timeout=10) as http:
        pc, channel, inbox, _ = await connect(http, args.url)
        closed = asyncio.Event()
        channel.on("close", closed.set)
        channel.send(json.dumps({"op": "ping", "ref": "x" * args.oversize}))
        answer = await inbox.get()
        async with asyncio.timeout(10):
            await closed.wait()
        say({"event": "oversize", "answer": answer, "closed": closed.is_set()})
        await pc.close()
        pc, channel, inbox, _ = await connect(http, args.url)
        channel.send(json.dumps({"op": "ping", "ref": "after"}))
        say({"event": "after", "message": await inbox.get()})
        await pc.close()


async def big_event(args: argparse.Namespace) -> None:
    """Publish an event of --big-event bytes, subscribe over the channel; say what came."""
    async with asyncio.timeout(args.timeout_s), httpx.AsyncClient(timeout=10) as http:
        stream = "webrtc-big"
        (await http.post(f"{args.url}/v1/streams", json={"name": stream})).raise_for_status()
        for payload in ("small", "x" * args.big_event):
            event = {"kind": "message", "payload": payload}
            published = await http.post(f"{args.url}/v1/streams/{stream}/events", json=event)
            published.raise_for_status()
        pc, channel, inbox, _ = await connect(http, args.url)
        closed = asyncio.Event()
        channel.on("close", closed.set)
        channel.send(json.dumps({"op": "subscribe", "stream": stream, "ref": 1}))
        while True:
            message = await inbox.get()
            say({"event": "message", "peer": 1, "message": message})
            if message.get("op") == "error":
                break
        async with asyncio.timeout(10):
            await closed.wait()
        say({"event": "closed"})
        await pc.close()


async def flood(args: argparse.Namespace) -> None:
    """Send --flood pings at once; say whether the gateway closed the channel, then whether a
    new peer connection is served."""
    async with asyncio.timeout(args.timeout_s), httpx.AsyncClient(timeout=10) as http:
        pc, channel, inbox, _ = await connect(http, args.url)
        closed = asyncio.Event()
        channel.on("close", closed.set)
        for i in range(args.flood):
            channel.send(json.dumps({"op": "ping", "ref": i}))
        try:
            async with asyncio.timeout(10):
                await closed.wait()
        except TimeoutError:
            pass
        say({"event": "flooded", "closed": closed.is_set(), "answers": inbox.qsize()})
        await pc.close()
        pc, channel, inbox, _ = await connect(http, args.url)
        channel.send(json.dumps({"op": "ping", "ref": "after"}))
        say({"event": "after", "message": await inbox.get()})
        await pc.close()


async def channels(args: argparse.Namespace) -> None:
    """Open --channels more ``airlane`` channels on one peer connection; say how many the
    gateway kept open and whether each of those answers a ping."""
    async with asyncio.timeout(args.timeout_s), httpx.AsyncClient(timeout=10) as http:
        pc, first, inbox, _ = await connect(http, args.url)
        settled: list[asyncio.Future[str]] = []
        extra = []
        for _ in range(args.channels):
            channel = pc.createDataChannel("airlane")
            outcome: asyncio.Future[str] = asyncio.get_running_loop().create_future()
            channel.on("close", lambda f=outcome: f.done() or f.set_result("closed"))
            extra.append(channel)
            settled.append(outcome)
        await asyncio.sleep(3)  # each is either served or closed by now
        kept = [c for c, f in zip(extra, settled, strict=True) if not f.done()]
        replies: asyncio.Queue = asyncio.Queue()
        for n, channel in enumerate([first, *kept]):
            if channel is not first:
                channel.on("message", lambda data: replies.put_nowait(json.loads(data)))
            channel.send(json.dumps({"op": "ping", "ref": n}))
        pongs = [await inbox.get()]
        pongs += [await replies.get() for _ in kept]
        say(
            {
                "event": "channels",
                "open": 1 + len(kept),
                "closed": sum(f.done() for f in settled),
                "pongs": sorted(p["ref"] for p in pongs if p.get("op") == "pong"),
            }
        )
        await pc.close()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--prompt", default="hello")
    parser.add_argument("--max-tokens", type=int, default=200)
    parser.add_argument("--timeout-s", type=float, default=30.0)
    parser.add_argument("--flood", type=int, default=0, help="send this many pings at once")
    parser.add_argument("--channels", type=int, default=0, help="open this many more channels")
    parser.add_argument("--ice", action="store_true", help="use the gateway's ICE servers")
    parser.add_argument(
        "--turn-tcp", action="store_true", help="TURN over TCP (aiortc uses one TURN URL)"
    )
    parser.add_argument(
        "--turn-tls", action="store_true", help="TURN over TLS (turns:); trust SSL_CERT_FILE"
    )
    parser.add_argument("--signal", choices=("http", "airc"), default="http")
    parser.add_argument("--rt", action="store_true", help="use the real-time channel too")
    parser.add_argument("--trickle", action="store_true", help="send candidates after the offer")
    parser.add_argument("--oversize", type=int, default=0, help="send a message this large")
    parser.add_argument("--big-event", type=int, default=0, help="read an event this large")
    args = parser.parse_args()
    if args.signal == "airc":
        AIRC.append(await AircClient.websocket(args.url))
    if args.rt:
        REALTIME["wanted"] = True
    if args.trickle:
        global TRICKLE
        TRICKLE = True
    if args.ice:
        servers = httpx.get(f"{args.url}/v1/webrtc/ice-servers", timeout=10).json()["iceServers"]
        for server in servers:
            if args.turn_tcp and "username" in server:
                server["urls"] = [url for url in server["urls"] if "transport=tcp" in url]
            if args.turn_tls and "username" in server:
                server["urls"] = [url for url in server["urls"] if url.startswith("turns:")]
            ICE.append(RTCIceServer(**server))
    if args.channels:
        await channels(args)
        return
    if args.flood:
        await flood(args)
        return
    if args.oversize:
        await oversize(args)
        return
    if args.big_event:
        await big_event(args)
        return
    async with asyncio.timeout(args.timeout_s), httpx.AsyncClient(timeout=10) as http:
        pc, channel, inbox, session = await connect(http, args.url)
        request = {
            "model": "airlane-synthetic",
            "messages": [{"role": "user", "content": args.prompt}],
            "max_tokens": args.max_tokens,
            "stream": True,
        }
        channel.send(
            json.dumps({"op": "generate", "request": request, "subscribe": True, "ref": 1})
        )
        stream = last = None
        seen = 0
        while True:
            message = await inbox.get()
            say({"event": "message", "peer": 1, "message": message})
            if message.get("op") == "generated":
                stream = message["stream"]
            if message.get("op") == "event":
                last = message["id"]
                seen += 1
                if message["event"]["kind"] == "done":
                    break
                if seen >= 10:
                    break
        if "channel" in REALTIME:
            # The whole generation on the real-time channel too, before this peer goes.
            await realtime(stream)
        # The first peer connection goes away mid-stream; a new one resumes after `last`.
        await http.delete(f"{args.url}/v1/webrtc/{session}")
        await pc.close()
        pc, channel, inbox, session = await connect(http, args.url)
        channel.send(json.dumps({"op": "subscribe", "stream": stream, "from": last, "ref": 2}))
        while True:
            message = await inbox.get()
            say({"event": "message", "peer": 2, "message": message})
            if message.get("op") == "event" and message["event"]["kind"] in ("done", "error"):
                break
        await pc.close()
        info = (await http.get(f"{args.url}/v1/streams/{stream}")).json()
        say({"event": "info", "info": info})
        metrics = (await http.get(f"{args.url}/metrics")).text
        pairs = [line for line in metrics.splitlines() if line.startswith("airlane_webrtc_")]
        say({"event": "metrics", "lines": pairs})
    say({"event": "done"})


if __name__ == "__main__":
    asyncio.run(main())
