"""A WebSocket subscription resumed at the very end of a finished stream is told so."""

from __future__ import annotations

import httpx
import orjson
from websockets.asyncio.client import connect


async def test_subscribe_at_the_end_of_an_ended_stream_replies_ended(server):
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as http:
        created = await http.post("/v1/streams", json={"name": "ws-end/1"})
        assert created.status_code == 201
        await http.post("/v1/streams/ws-end/1/events", json={"kind": "message", "payload": 1})
        await http.post("/v1/streams/ws-end/1/events", json={"kind": "done"})
        info = (await http.get("/v1/streams/ws-end/1")).json()
    url = server.url.replace("http", "ws", 1) + "/v1/ws"
    async with connect(url, subprotocols=["airlane.v1.json"]) as ws:
        token = info["resume_token"]
        await ws.send(
            orjson.dumps({"op": "subscribe", "stream": "ws-end/1", "from": token}).decode()
        )
        reply = orjson.loads(await ws.recv())
        assert reply["op"] == "subscribed" and reply["ended"] is True
        # The socket stays usable, and the same stream from an earlier position still works.
        await ws.send(
            orjson.dumps(
                {"op": "subscribe", "stream": "ws-end/1", "from": f"{info['epoch']}:1"}
            ).decode()
        )
        assert orjson.loads(await ws.recv())["op"] == "subscribed"
        event = orjson.loads(await ws.recv())
        assert event["op"] == "event" and event["event"]["kind"] == "done"
