"""Credits on the WebSocket multiplex (``"credits"`` in ``subscribe``/``generate``, the
``credit`` op): the gateway writes no more of a stream than the reader granted, waits while
it has none, goes on with each grant, and ends with the stream's exact text; over WebSocket
(the direct pump) and over WebTransport (the tasked pump). Bad grants get errors and the
socket serves on."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import websockets

from airlane.client.webtransport import WebTransportClient
from tests.js.support import PROMPT, long_seeds
from tests.servers import ServerProcess, run_server

pytestmark = pytest.mark.timeout(60)

CONFIG = "[synthetic]\nttft_ms = 2.0\nitl_ms = 2.0\n"


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with run_server(config=CONFIG) as running:
        yield running


def request(seed: int) -> dict[str, Any]:
    return {"model": "synthetic", "max_tokens": 200, "seed": seed,
            "messages": [{"role": "user", "content": PROMPT}]}  # fmt: skip


def snapshot_text(server: ServerProcess, stream_id: str) -> str:
    with httpx.Client(base_url=server.url, timeout=10) as http:
        return str(http.get(f"/v1/streams/{stream_id}/snapshot").json()["text"]["content"])


class Reader:
    """Events and replies of one socket, apart."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.events: list[dict[str, Any]] = []
        self.replies: list[dict[str, Any]] = []

    async def call(self, op: dict[str, Any]) -> dict[str, Any]:
        await self.ws.send(json.dumps(op))
        while True:
            message = json.loads(await asyncio.wait_for(self.ws.recv(), 10))
            if message["op"] == "event":
                self.events.append(message)
            else:
                return message

    async def events_for(self, seconds: float) -> int:
        """Read for ``seconds``; how many events came."""
        before = len(self.events)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(seconds):
                while True:
                    message = json.loads(await self.ws.recv())
                    assert message["op"] == "event", message
                    self.events.append(message)
        return len(self.events) - before


def text(events: list[dict[str, Any]]) -> str:
    return "".join(e["event"].get("text", "") for e in events if e["event"]["kind"] == "delta")


async def test_a_websocket_reader_gets_what_it_granted_and_no_more(server: ServerProcess) -> None:
    url = server.url.replace("http://", "ws://") + "/v1/ws"
    async with websockets.connect(url, subprotocols=["airlane.v1.json"]) as ws:
        reader = Reader(ws)
        generated = await reader.call({"op": "generate", "request": request(long_seeds()[0]),
                                       "credits": 5})  # fmt: skip
        stream_id = generated["stream"]
        await reader.events_for(0.5)  # the generation runs on; the reader took 5
        assert len(reader.events) == 5
        granted = await reader.call({"op": "credit", "stream": stream_id, "credits": 3})
        assert granted["op"] == "credit"
        await reader.events_for(0.3)  # some may have come before the grant's answer
        assert len(reader.events) == 8
        await reader.call({"op": "credit", "stream": stream_id, "credits": 100_000})
        while reader.events[-1]["event"]["kind"] not in ("done", "error"):
            reader.events.append(json.loads(await asyncio.wait_for(ws.recv(), 10)))
        assert text(reader.events) == snapshot_text(server, stream_id)

        # What is refused, with the socket serving on.
        for bad in (0, -1, "5", True, 10**7):
            refused = await reader.call({"op": "credit", "stream": stream_id, "credits": bad})
            assert refused["op"] == "error" and refused["code"] == "invalid_request", refused
        gone = await reader.call({"op": "credit", "stream": stream_id, "credits": 1})
        assert gone["code"] == "not_subscribed"  # the stream ended: its pump is gone
        plain = await reader.call({"op": "generate", "request": request(long_seeds()[1])})
        without = await reader.call({"op": "credit", "stream": plain["stream"], "credits": 1})
        assert without["code"] in ("invalid_request", "not_subscribed")
        assert (await reader.call({"op": "ping"}))["op"] == "pong"


async def test_a_webtransport_reader_is_held_back_the_same_way(server: ServerProcess) -> None:
    assert server.h3 is not None
    async with await WebTransportClient.connect(*server.h3, verify=False) as session:
        op = {"op": "generate", "request": request(long_seeds()[2]), "credits": 4}
        stream_id = (await session.call(op))["stream"]
        got: list[dict[str, Any]] = []

        async def collect(seconds: float) -> None:
            with pytest.raises(TimeoutError):
                async with asyncio.timeout(seconds):
                    async for message in session.events():
                        got.append(message)

        await collect(0.5)
        assert len(got) == 4
        await session.call({"op": "credit", "stream": stream_id, "credits": 100_000})
        async with asyncio.timeout(10):
            async for message in session.events():
                got.append(message)
                if message["event"]["kind"] in ("done", "error"):
                    break
        assert text(got) == snapshot_text(server, stream_id)
