"""WebTransport on the HTTP/3 listener: the ``/v1/ws`` multiplex over QUIC streams and
datagrams, from Airlane's aioquic client.

A real ``airlane serve``. Each generation's events come on a QUIC stream of their own (no
head-of-line blocking between them), ops are answered on the control stream, ops sent as
datagrams are answered by datagrams (with XOR parity when asked), and refusals and bad input
get the WebSocket's answers: an error message, a close code, never a traceback.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from airlane.client import ConnectFailed, ConnectionLost, RequestRejected
from airlane.client.webtransport import Arrival, WebTransportClient
from airlane.wire.framing import encode_frame
from tests.browser.test_eventsource import snapshot_text
from tests.http3.test_h3 import CHAT
from tests.servers import ServerProcess, run_server

pytestmark = pytest.mark.timeout(60)

SLOW = "[synthetic]\nttft_ms = 5.0\nitl_ms = 3.0\n"


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with run_server(config=SLOW) as running:
        yield running


async def session(server: ServerProcess, **options: object) -> WebTransportClient:
    assert server.h3 is not None, "the gateway printed no HTTP/3 address"
    host, port = server.h3
    return await WebTransportClient.connect(host, port, verify=False, **options)  # type: ignore[arg-type]


async def until_done(client: WebTransportClient, streams: int) -> list[Arrival]:
    """Every message until ``streams`` streams have ended."""
    got: list[Arrival] = []
    ended = 0
    async with asyncio.timeout(20):
        async for message in client.events():
            got.append(message)
            if message.get("op") == "event" and message["event"]["kind"] in ("done", "error"):
                ended += 1
                if ended == streams:
                    return got
    raise AssertionError(f"the session ended first: {client.closed}")


async def test_each_generation_streams_on_a_quic_stream_of_its_own(server: ServerProcess) -> None:
    async with await session(server) as wt:
        generated = [
            await wt.call({"op": "generate", "request": {**CHAT, "max_tokens": 30, "seed": n}})
            for n in range(4)
        ]
        assert all(reply["op"] == "generated" for reply in generated)
        messages = await until_done(wt, 4)
        by_stream: dict[str, set[int]] = {}
        text: dict[str, str] = {}
        for m in messages:
            by_stream.setdefault(m["stream"], set()).add(m.quic_stream)
            text[m["stream"]] = text.get(m["stream"], "") + m["event"].get("text", "")
        assert set(by_stream) == {reply["stream"] for reply in generated}
        quic_streams = [next(iter(s)) for s in by_stream.values()]
        assert all(len(s) == 1 for s in by_stream.values())  # one QUIC stream per generation
        assert len(set(quic_streams)) == 4 and wt.control not in quic_streams
        assert all(text.values())
        # Resume by position, as on /v1/ws: the rest of a stream from an event's id.
        first = next(m for m in messages if m["stream"] == generated[0]["stream"])
        resumed = await wt.call({"op": "subscribe", "stream": first["stream"], "from": first["id"]})
        assert resumed["op"] == "subscribed"
        rest = await until_done(wt, 1)
        assert (
            "".join(m["event"].get("text", "") for m in rest)
            == text[first["stream"]][len(first["event"].get("text", "")) :]
        )


async def test_datagrams_answer_datagrams_with_and_without_parity(server: ServerProcess) -> None:
    for fec in (None, 4):
        async with await session(server, fec=fec) as wt:
            answers = [await wt.call_datagram({"op": "ping"}, timeout_s=2.0) for _ in range(10)]
            assert all(a is not None and a["op"] == "pong" for a in answers)
            assert all(a is not None and a.quic_stream == -1 for a in answers)  # as datagrams
            # A subscription on datagrams: the events come as datagrams too.
            reply = await wt.call({"op": "generate", "request": {**CHAT, "max_tokens": 8},
                                   "subscribe": False})  # fmt: skip
            subscribed = await wt.call(
                {"op": "subscribe", "stream": reply["stream"], "datagrams": True}
            )
            assert subscribed["op"] == "subscribed"
            messages = await until_done(wt, 1)
            assert {m.quic_stream for m in messages} == {-1}


async def test_refusals_and_bad_input_get_the_websockets_answers() -> None:
    with run_server("--api-key", "ann=sk-wt", config=SLOW) as gateway:
        assert gateway.h3 is not None
        host, port = gateway.h3
        # No credentials: the session opens and is closed with the WebSocket's 4401.
        async with await WebTransportClient.connect(host, port, verify=False) as refused:
            async with asyncio.timeout(5):
                async for _ in refused.events():
                    pass
            assert refused.closed is not None and "4401" in refused.closed
        async with await WebTransportClient.connect(
            host, port, verify=False, headers=[("authorization", "Bearer sk-wt")]
        ) as wt:
            bad = await wt.call({"op": "subscribe"})  # no stream
            assert bad["op"] == "error" and bad["code"] == "invalid_message"
            # Garbage on the control stream and as datagrams: an error, the session goes on.
            quic = wt._protocol._quic
            quic.send_stream_data(wt.control, encode_frame(b"{not json"))
            for _ in range(50):
                wt._protocol.h3.send_datagram(wt.session_id, os.urandom(40))
            wt._protocol.transmit()
            assert (await wt.call({"op": "ping"}))["op"] == "pong"
            # A message past the size limit closes the session (1009), the listener serves on.
            quic.send_stream_data(wt.control, (64 << 20).to_bytes(4, "big") + b"x")
            wt._protocol.transmit()
            async with asyncio.timeout(5):
                async for message in wt.events():
                    if message.get("code") == "invalid_message":
                        continue
            assert wt.closed is not None and "1009" in wt.closed
        async with await WebTransportClient.connect(
            host, port, verify=False, headers=[("authorization", "Bearer sk-wt")]
        ) as again:
            assert (await again.call({"op": "ping"}))["op"] == "pong"
        # A page of a foreign origin is refused, as its WebSocket would be.
        with pytest.raises(RequestRejected) as refused_origin:
            await WebTransportClient.connect(
                host, port, verify=False, headers=[("origin", "https://evil.example")]
            )
        assert refused_origin.value.status == 403
        # CONNECT to a path with no WebSocket behind it is refused with a status.
        with pytest.raises((RequestRejected, ConnectFailed)):
            await WebTransportClient.connect(host, port, path="/nowhere", verify=False)


async def test_redundant_copies_arrive_once_and_in_order(server: ServerProcess) -> None:
    async with await session(server, fec=4) as wt:
        generated = [
            await wt.call(
                {
                    "op": "generate",
                    "redundant": True,
                    "request": {**CHAT, "max_tokens": 40, "seed": n},
                }
            )
            for n in range(3)
        ]
        messages = await until_done(wt, 3)
        for reply in generated:
            mine = [m for m in messages if m["stream"] == reply["stream"]]
            seqs = [m["event"]["seq"] for m in mine]
            assert seqs == sorted(set(seqs)), seqs  # each once, in order
            assert {m.quic_stream for m in mine} & {-1}, "no copy came as a datagram"
            # The text the gateway holds for the stream, exactly.
            async with httpx.AsyncClient(base_url=server.url) as http:
                held = await snapshot_text(http, reply["stream"])
            assert "".join(m["event"].get("text", "") for m in mine) == held


async def test_the_cli_streams_over_webtransport(server: ServerProcess) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "airlane", "stream", "--transport", "wt", "--url", server.url,
         "--prompt", "Hello", "--max-tokens", "15"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "last id" in done.stderr and "finish length" in done.stderr
    assert done.stdout.strip()
    stream_id = done.stderr.split("stream ", 1)[1].split()[0]
    again = subprocess.run(
        [sys.executable, "-m", "airlane", "stream", "--transport", "wt", "--url", server.url,
         "--stream-id", stream_id],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == done.stdout.strip()


async def test_a_stream_the_client_stops_ends_its_subscription_and_nothing_else(
    tmp_path: Path,
) -> None:
    log = tmp_path / "serve.log"
    with log.open("w") as err, run_server(config=SLOW, stderr=err) as gateway:
        async with await session(gateway) as wt:
            long = await wt.call({"op": "generate", "request": {**CHAT, "max_tokens": 2000}})
            async with asyncio.timeout(10):
                async for message in wt.events():
                    if message.get("op") == "event" and message["stream"] == long["stream"]:
                        stopped = message.quic_stream
                        break
            # The client no longer wants that stream's bytes (STOP_SENDING); the generation
            # goes on writing to it, every 3 ms.
            wt._protocol._quic.stop_stream(stopped, 0)
            wt._protocol.transmit()
            short = await wt.call({"op": "generate", "request": {**CHAT, "max_tokens": 30}})
            messages = await until_done(wt, 1)
            assert any(m.get("stream") == short["stream"] for m in messages)
            await asyncio.sleep(0.5)
            # Its subscription is over (the long generation still runs): nothing to leave.
            gone = await wt.call({"op": "unsubscribe", "stream": long["stream"]})
            assert gone["op"] == "error" and gone["code"] == "not_subscribed", gone
            assert (await wt.call({"op": "ping"}))["op"] == "pong"
        # Stopping the control stream, where replies go, ends the session: the next reply
        # finds no reader, and the session is closed.
        async with await session(gateway) as wt:
            wt._protocol._quic.stop_stream(wt.control, 0)
            with pytest.raises(ConnectionLost):
                await wt.call({"op": "ping"}, timeout_s=10)
            assert wt.closed is not None and "1000" in wt.closed, wt.closed
        async with await session(gateway) as again:
            assert (await again.call({"op": "ping"}))["op"] == "pong"
    text = log.read_text()
    assert "Traceback" not in text and "ERROR" not in text, text[-3000:]


async def test_a_quiet_stream_the_client_stops_frees_its_subscription_at_once(
    server: ServerProcess,
) -> None:
    # Nothing more is written to the stream, so no write can find it stopped: the gateway
    # must act on the client's STOP_SENDING itself, and a subscribe to the same stream works
    # again (it was refused as already subscribed while the old one waited for an event).
    async with await session(server) as wt:
        name = f"quiet-{os.getpid()}"
        event = {"kind": "message", "payload": {"hello": 1}}
        assert (await wt.call({"op": "publish", "stream": name, "event": event}))["seq"] == 1
        assert (await wt.call({"op": "subscribe", "stream": name}))["op"] == "subscribed"
        first = await _event_of(wt, name)
        wt._protocol._quic.stop_stream(first.quic_stream, 0)
        wt._protocol.transmit()
        reply: dict[str, object] = {}
        for _ in range(50):  # bounded: 5 s
            await asyncio.sleep(0.1)
            reply = await wt.call({"op": "subscribe", "stream": name})
            if reply["op"] == "subscribed":
                break
        assert reply["op"] == "subscribed", reply
        again = await _event_of(wt, name)
        assert again.quic_stream != first.quic_stream and again["event"]["seq"] == 1
        assert (await wt.call({"op": "unsubscribe", "stream": name}))["op"] == "unsubscribed"


async def _event_of(wt: WebTransportClient, name: str) -> Arrival:
    async with asyncio.timeout(10):
        async for message in wt.events():
            if message.get("op") == "event" and message["stream"] == name:
                return message
    raise AssertionError(f"no event of {name}")


async def test_past_1024_messages_waiting_for_the_gateway_the_session_is_closed_1008() -> None:
    with run_server(config=SLOW) as gateway:
        async with await session(gateway) as wt:
            assert (await wt.call({"op": "ping"}))["op"] == "pong"
            # The gateway stopped (SIGSTOP) while 1,100 messages arrive: when it runs again
            # it reads them all at once, more than its inbox holds before the session's task
            # can take one. Tiny ones (6 bytes framed), so that they fit in the few packets
            # a new connection may send before it hears back.
            gateway.process.send_signal(signal.SIGSTOP)
            try:
                wt._protocol._quic.send_stream_data(wt.control, encode_frame(b"{}") * 1100)
                wt._protocol.transmit()
                await asyncio.sleep(0.5)
            finally:
                gateway.process.send_signal(signal.SIGCONT)
            async with asyncio.timeout(10):
                async for _ in wt.events():
                    pass
            assert wt.closed is not None and "1008" in wt.closed, wt.closed
        async with await session(gateway) as again:  # the listener serves on
            assert (await again.call({"op": "ping"}))["op"] == "pong"
