"""``/v1/ws`` with the `websockets` client: many streams on one socket, resume on a new
socket, the msgpack subprotocol, and publish/subscribe between two sockets.

A socket's messages are dispatched by ``op``: replies (``generated``, ``subscribed``,
``published``...) carry the ``ref`` of their request, events carry their ``stream``. A test
never assumes that a reply arrives before the first event of its stream.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections import defaultdict
from typing import Any

import httpx
import msgspec
from websockets.asyncio.client import ClientConnection, connect

from tests.http.support import MODEL, Reader, chat_body, long_seed
from tests.sockets import ss_tos

JSON = "airlane.v1.json"
MSGPACK = "airlane.v1.msgpack"
PROMPT = "Many streams, one socket."
DEADLINE_S = 30


def ws_url(url: str) -> str:
    return url.replace("http://", "ws://", 1) + "/v1/ws"


class Session:
    """One socket: sends ops, and sorts what comes back into replies (by ``ref``), errors,
    and per-stream `Reader` objects."""

    def __init__(self, ws: ClientConnection, *, binary: bool = False) -> None:
        self.ws = ws
        self.binary = binary
        self.replies: dict[Any, dict[str, Any]] = {}
        self.errors: list[dict[str, Any]] = []
        self.readers: dict[str, Reader] = defaultdict(Reader)
        self.frames = 0
        self._refs = itertools.count()

    async def send(self, obj: dict[str, Any]) -> None:
        if self.binary:
            await self.ws.send(msgspec.msgpack.encode(obj))
        else:
            await self.ws.send(json.dumps(obj))

    async def receive(self) -> dict[str, Any]:
        frame = await self.ws.recv()
        self.frames += 1
        if self.binary:
            assert isinstance(frame, bytes), "msgpack subprotocol: binary messages only"
            message = msgspec.msgpack.decode(frame)
        else:
            assert isinstance(frame, str), "json subprotocol: text messages only"
            message = json.loads(frame)
        op = message["op"]
        if op == "event":
            self.readers[message["stream"]].apply(message["event"], message["id"])
        elif op == "error":
            self.errors.append(message)
        if "ref" in message:
            self.replies[message["ref"]] = message
        return message

    async def until(self, condition, what: str) -> None:
        """Receive until ``condition()`` holds; bounded in time."""
        try:
            async with asyncio.timeout(DEADLINE_S):
                while not condition():
                    await self.receive()
        except TimeoutError:
            raise AssertionError(f"timed out after {DEADLINE_S} s waiting for {what}") from None

    async def request(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Send an op with a fresh ``ref`` and wait for its reply."""
        ref = f"req-{next(self._refs)}"
        await self.send({**obj, "ref": ref})
        await self.until(lambda: ref in self.replies, f"a reply to {obj['op']}")
        return self.replies[ref]


async def expected_contents(url: str, bodies: list[dict]) -> list[str]:
    """Non-streaming answers to ``bodies`` (same seed: same text)."""
    async with httpx.AsyncClient(timeout=30) as client:
        responses = await asyncio.gather(
            *(client.post(f"{url}/v1/chat/completions", json=body) for body in bodies)
        )
    return [response.json()["choices"][0]["message"]["content"] for response in responses]


async def snapshot_content(url: str, stream_id: str) -> str:
    async with httpx.AsyncClient(timeout=10) as client:
        response = await client.get(f"{url}/v1/streams/{stream_id}/snapshot")
    assert response.status_code == 200
    return response.json()["text"]["content"]


async def test_fifty_streams_multiplexed_on_one_socket(paced_server):
    url = paced_server.url
    bodies = [chat_body(PROMPT, seed=5000 + i, max_tokens=48) for i in range(50)]
    async with connect(ws_url(url), subprotocols=[JSON]) as ws:
        assert ws.subprotocol == JSON
        session = Session(ws)
        for ref, body in enumerate(bodies):
            await session.send({"op": "generate", "request": body, "ref": ref})
        await session.until(lambda: len(session.replies) == 50, "50 generated replies")
        streams = [session.replies[ref]["stream"] for ref in range(50)]
        assert all(session.replies[ref]["op"] == "generated" for ref in range(50))
        assert len(set(streams)) == 50
        await session.until(
            lambda: all(session.readers[s].done for s in streams), "50 finished streams"
        )
        pong = await session.request({"op": "ping"})
        assert pong["op"] == "pong"

    assert session.errors == []
    expected = await expected_contents(url, bodies)
    snapshots = await asyncio.gather(*(snapshot_content(url, s) for s in streams))
    for stream_id, want, snap in zip(streams, expected, snapshots, strict=True):
        reader = session.readers[stream_id]
        assert reader.content == want == snap, stream_id
        assert reader.terminal["kind"] == "done"
        assert reader.epoch == session.replies[streams.index(stream_id)]["epoch"]
    assert len(set(expected)) == 50


async def test_resume_on_a_new_socket(paced_server):
    url = paced_server.url
    seed = long_seed(PROMPT, min_tokens=120, max_tokens=240)
    body = chat_body(PROMPT, seed=seed, max_tokens=240)
    async with connect(ws_url(url), subprotocols=[JSON]) as ws:
        first = Session(ws)
        generated = await first.request({"op": "generate", "request": body})
        stream_id = generated["stream"]
        reader = first.readers[stream_id]
        await first.until(lambda: reader.kinds.count("delta") >= 10, "ten deltas")
    # The socket is gone mid-stream; the generation keeps going (orphan grace period).
    assert not reader.done
    last_id = reader.last_id
    epoch, _, seq = last_id.rpartition(":")

    async with connect(ws_url(url), subprotocols=[JSON]) as ws:
        second = Session(ws)
        second.readers[stream_id] = reader  # the client carries its state over
        subscribed = await second.request({"op": "subscribe", "stream": stream_id, "from": last_id})
        assert subscribed["op"] == "subscribed"
        assert (subscribed["stream"], subscribed["epoch"]) == (stream_id, epoch)
        assert subscribed["from"] == int(seq)
        await second.until(lambda: reader.done, "the resumed stream to end")
    assert second.errors == []
    assert reader.terminal["finish_reason"] in ("stop", "length")
    assert reader.content == await snapshot_content(url, stream_id)
    assert reader.content == (await expected_contents(url, [body]))[0]


async def test_msgpack_subprotocol(paced_server):
    url = paced_server.url
    body = chat_body(PROMPT, seed=77, max_tokens=40, airlane={"reasoning": True})
    async with connect(ws_url(url), subprotocols=[MSGPACK]) as ws:
        assert ws.subprotocol == MSGPACK
        session = Session(ws, binary=True)
        generated = await session.request({"op": "generate", "request": body})
        stream_id = generated["stream"]
        await session.until(lambda: session.readers[stream_id].done, "the stream to end")
        pong = await session.request({"op": "ping"})
        assert pong["op"] == "pong"
    reader = session.readers[stream_id]
    assert reader.content == await snapshot_content(url, stream_id)
    async with httpx.AsyncClient(timeout=10) as client:
        whole = (await client.post(f"{url}/v1/chat/completions", json=body)).json()
    message = whole["choices"][0]["message"]
    assert reader.content == message["content"]
    assert reader.text["reasoning"] == message["reasoning_content"]
    assert isinstance(reader.terminal["usage"], dict)


async def test_publish_and_subscribe_between_two_sockets(server):
    url = server.url
    name = "rooms/ws-pubsub"
    async with (
        connect(ws_url(url), subprotocols=[JSON]) as publisher_ws,
        connect(ws_url(url), subprotocols=[JSON]) as subscriber_ws,
    ):
        publisher, subscriber = Session(publisher_ws), Session(subscriber_ws)
        first = await publisher.request(
            {"op": "publish", "stream": name, "event": {"payload": {"n": 0}}}
        )
        assert (first["op"], first["stream"], first["seq"]) == ("published", name, 1)
        subscribed = await subscriber.request({"op": "subscribe", "stream": name})
        assert subscribed["op"] == "subscribed" and subscribed["from"] == 0

        seqs = []
        for n in range(1, 6):
            reply = await publisher.request(
                {"op": "publish", "stream": name, "event": {"kind": "message", "payload": {"n": n}}}
            )
            seqs.append(reply["seq"])
        reply = await publisher.request(
            {"op": "publish", "stream": name, "event": {"kind": "delta", "text": "über"}}
        )
        seqs.append(reply["seq"])
        reply = await publisher.request(
            {"op": "publish", "stream": name, "event": {"kind": "done", "finish_reason": "stop"}}
        )
        seqs.append(reply["seq"])
        assert seqs == [2, 3, 4, 5, 6, 7, 8]

        reader = subscriber.readers[name]
        await subscriber.until(lambda: reader.done, "the subscriber to see the end")
        # The publisher never subscribed: it got replies only.
        assert name not in publisher.readers

        # After the end, publishing is refused but the socket stays usable.
        refused = await publisher.request(
            {"op": "publish", "stream": name, "event": {"payload": {}}}
        )
        assert refused["op"] == "error" and refused["code"] == "stream_ended"
        assert (await publisher.request({"op": "ping"}))["op"] == "pong"

    assert reader.messages == [{"n": n} for n in range(6)]
    assert reader.content == "über"
    assert reader.terminal["finish_reason"] == "stop"
    assert reader.last_seq == 8
    assert subscriber.errors == []


async def test_cancel_over_the_socket(paced_server):
    url = paced_server.url
    seed = long_seed(PROMPT, min_tokens=120, max_tokens=240)
    async with connect(ws_url(url), subprotocols=[JSON]) as ws:
        session = Session(ws)
        generated = await session.request(
            {"op": "generate", "request": chat_body(PROMPT, seed=seed, max_tokens=240)}
        )
        stream_id = generated["stream"]
        reader = session.readers[stream_id]
        await session.until(lambda: reader.kinds.count("delta") >= 3, "three deltas")
        cancelled = await session.request({"op": "cancel", "stream": stream_id})
        assert (cancelled["op"], cancelled["cancelled"]) == ("cancelled", True)
        await session.until(lambda: reader.done, "the cancelled stream to end")
    assert reader.terminal["finish_reason"] == "cancelled"
    assert reader.content == await snapshot_content(url, stream_id)


async def test_generate_without_subscribing_then_subscribe(server):
    url = server.url
    body = chat_body(PROMPT, seed=88, max_tokens=20, model=MODEL)
    async with connect(ws_url(url), subprotocols=[JSON]) as ws:
        session = Session(ws)
        generated = await session.request({"op": "generate", "request": body, "subscribe": False})
        stream_id = generated["stream"]
        assert (await session.request({"op": "ping"}))["op"] == "pong"
        subscribed = await session.request({"op": "subscribe", "stream": stream_id})
        assert subscribed["op"] == "subscribed"
        await session.until(lambda: session.readers[stream_id].done, "the stream to end")
    assert session.readers[stream_id].content == (await expected_contents(url, [body]))[0]


async def test_a_control_socket_beside_the_data_socket(paced_server):
    """``lane`` marks the gateway's end of the socket (``ss`` reads it from outside), and a
    cancel sent on the control socket stops the generation the data socket reads."""
    url = paced_server.url
    seed = long_seed(PROMPT, min_tokens=120, max_tokens=240)
    async with (
        connect(ws_url(url), subprotocols=[JSON]) as data_ws,
        connect(ws_url(url), subprotocols=[JSON]) as control_ws,
    ):
        data, control = Session(data_ws), Session(control_ws)
        lane = await control.request({"op": "lane", "lane": "control"})
        assert (lane["op"], lane["marks"]) == ("lane", "dscp=40 priority=6")
        port = control_ws.transport.get_extra_info("sockname")[1]
        shown = ss_tos("dport", port)
        assert "tos:0xa0" in shown and "class_id:0x6" in shown, shown
        bulk = await data.request({"op": "lane", "lane": "bulk"})
        assert bulk["marks"] == "dscp=10 priority=2 notsent_lowat=131072"
        bad = await control.request({"op": "lane", "lane": "urgent"})
        assert bad["op"] == "error" and bad["code"] == "invalid_request"

        generated = await data.request(
            {"op": "generate", "request": chat_body(PROMPT, seed=seed, max_tokens=240)}
        )
        stream_id = generated["stream"]
        reader = data.readers[stream_id]
        await data.until(lambda: reader.kinds.count("delta") >= 3, "three deltas")
        cancelled = await control.request({"op": "cancel", "stream": stream_id})
        assert cancelled["cancelled"] is True
        await data.until(lambda: reader.done, "the cancelled stream to end")
    assert reader.terminal["finish_reason"] == "cancelled"
