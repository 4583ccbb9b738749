"""Rooms: shared `LWWMap` state kept in the hub, over WebSocket and HTTP.

Clients are real WebSocket clients (the `websockets` library) holding their own `LWWMap`
replicas; the in-process tests put two `Rooms` (two "nodes") on one hub.
"""

from __future__ import annotations

import asyncio
import socket
import time

import httpx
import orjson
import pytest
import websockets

from airlane.core import Event
from airlane.hub import MemoryHub
from airlane.sync.hlc import HybridClock
from airlane.sync.lww import LWWMap
from airlane.sync.ops import Op
from airlane.sync.rooms import RoomConfig, RoomError, Rooms
from tests.waiting import eventually


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def replica(node: str) -> LWWMap:
    return LWWMap(HybridClock(node))


async def receive_json(ws) -> dict:
    return orjson.loads(await asyncio.wait_for(ws.recv(), 5))


async def test_two_clients_converge_through_a_room(server):
    url = server.url.replace("http://", "ws://") + "/v1/rooms/doc-1"
    alice, bob = replica("alice"), replica("bob")
    async with websockets.connect(url) as a, websockets.connect(url) as b:
        assert (await receive_json(a))["type"] == "state"
        assert (await receive_json(b))["type"] == "state"
        op = alice.set("title", "draft", now_ms())
        await a.send(orjson.dumps({"type": "ops", "ops": [op.to_dict()]}).decode())
        replies = [await receive_json(a), await receive_json(a)]
        assert {"type": "ack", "count": 1} in replies
        relayed = await receive_json(b)
        assert relayed["type"] == "ops"
        for item in relayed["ops"]:
            bob.apply(Op.from_dict(item), now_ms())
        assert bob.to_dict() == {"title": "draft"}
        later = bob.set("title", "final", now_ms())
        gone = bob.delete("draft-notes", now_ms())
        await b.send(
            orjson.dumps({"type": "ops", "ops": [later.to_dict(), gone.to_dict()]}).decode()
        )
        relayed = await receive_json(a)  # one record: both ops in one message
        assert relayed["type"] == "ops" and len(relayed["ops"]) == 2
        for item in relayed["ops"]:
            alice.apply(Op.from_dict(item), now_ms())
        assert alice.to_dict() == bob.to_dict() == {"title": "final"}
    async with httpx.AsyncClient() as http:
        state = (await http.get(f"{server.url}/v1/rooms/doc-1")).json()
        assert state["state"] == {"title": "final"}
        posted = await http.post(
            f"{server.url}/v1/rooms/doc-1/ops",
            json={"ops": [alice.set("owner", "carol", now_ms()).to_dict()]},
        )
        assert posted.status_code == 202, posted.text
    async with websockets.connect(url) as late:  # a late joiner gets the state first
        state = await receive_json(late)
        assert state["type"] == "state"
        assert state["state"] == {"title": "final", "owner": "carol"}


async def test_bad_input_is_answered_and_the_room_keeps_serving(server):
    url = server.url.replace("http://", "ws://") + "/v1/rooms/doc-2"
    async with websockets.connect(url) as ws:
        await receive_json(ws)
        for bad in ("not json", '{"type": "dance"}', '{"type": "ops", "ops": [{"action": "x"}]}',
                    '{"type": "ops", "ops": []}'):  # fmt: skip
            await ws.send(bad)
            reply = await receive_json(ws)
            assert reply["type"] == "error" and reply["message"], reply
        future = HybridClock("x").now(now_ms() + 3_600_000)  # an hour ahead: past the bound
        op = Op.from_dict({"action": "set", "stamp": future.encode(), "key": "k", "value": 1})
        await ws.send(orjson.dumps({"type": "ops", "ops": [op.to_dict()]}).decode())
        assert "refused" in (await receive_json(ws))["message"]
        await ws.send(b"\x00binary")
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await asyncio.wait_for(ws.recv(), 5)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1003
    async with httpx.AsyncClient() as http:
        bad_name = await http.get(f"{server.url}/v1/rooms/no%20spaces")
        assert bad_name.status_code == 400
        bad_ops = await http.post(f"{server.url}/v1/rooms/doc-2/ops", json={"ops": "x"})
        assert bad_ops.status_code == 400 and "ops" in bad_ops.json()["error"]["message"]
        assert (await http.get(f"{server.url}/healthz")).status_code == 200


async def test_two_nodes_on_one_hub_share_a_room_and_compaction_keeps_the_state():
    hub = MemoryHub()
    await hub.start()
    config = RoomConfig(compact_every=4, idle_close_s=0.5)
    one, two = Rooms(hub, node="one", config=config), Rooms(hub, node="two", config=config)
    try:
        room_one, room_two = await one.room("shared"), await two.room("shared")
        seen: list[dict] = []
        two.join(room_two, seen.extend)
        writer = replica("w")
        for i in range(10):
            await room_one.submit([writer.set(f"k{i % 3}", i, now_ms()).to_dict()])
        # Both nodes follow the stream in tasks: node two's listener has every op once node
        # two has taken all ten records.
        await eventually(
            lambda: len(seen) == 10 and room_one.map.to_dict() == writer.to_dict(),
            what="both nodes to take the ten records",
        )
        assert room_two.map.to_dict() == room_one.map.to_dict() == writer.to_dict()
        assert len(seen) == 10
        async with await hub.subscribe("rooms/shared") as stream:
            records: list[dict] = []
            async with asyncio.timeout(5):  # compacted at least once
                while not any("state" in r for r in records):
                    batch = await stream.next_batch(100)
                    assert batch, "the room's stream ended"
                    records += [e.data["payload"] for e in batch]
        # A third node starting now gets the same state (state record + tail).
        three = Rooms(hub, node="three", config=config)
        assert (await three.state("shared"))["state"] == writer.to_dict()
        await three.aclose()
        with pytest.raises(RoomError):
            await room_one.submit("nope")
        await hub.append("rooms/shared", Event.message({"ops": [{"bad": 1}]}))  # skipped
        # A good record after it: once node two has applied that, it has read past the bad
        # one (and still follows the stream).
        await room_one.submit([writer.set("after", True, now_ms()).to_dict()])
        await eventually(lambda: len(seen) == 11, what="node two to read past the bad record")
        assert room_two.map.to_dict() == writer.to_dict()
    finally:
        await one.aclose()
        await two.aclose()
        await hub.aclose()


async def test_an_op_near_the_drift_bound_is_applied_by_a_node_whose_clock_is_behind(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Accepted 59.5 s ahead of the accepting node's clock (the bound is 60 s); the nodes that
    # apply it run a second behind. They once checked the bound again, with their own clocks,
    # and skipped the op for good: their replicas parted from the writer's.
    hub = MemoryHub()
    await hub.start()
    one, two = Rooms(hub, node="one"), Rooms(hub, node="two")
    try:
        room_one, room_two = await one.room("skewed"), await two.room("skewed")
        writer = replica("w")
        ahead = writer.set("k", "v", now_ms() + 59_500).to_dict()
        assert await room_one.submit([ahead]) == 1
        real = time.time_ns
        monkeypatch.setattr("airlane.sync.rooms.room.time.time_ns", lambda: real() - 1_000_000_000)
        await eventually(
            lambda: room_one.map.to_dict() == room_two.map.to_dict() == {"k": "v"},
            what="both nodes to apply the op",
        )
        # One written to the stream directly, past the bound of the time it carries: every
        # node skips it (it would move their clocks that far ahead), and the room goes on.
        wild = replica("wild").set("k", "far", now_ms() + 3_600_000).to_dict()
        stale = now_ms() - 1000
        await hub.append("rooms/skewed", Event.message({"ops": [wild], "at": stale}))
        assert await room_one.submit([replica("w2").set("j", 1, now_ms()).to_dict()]) == 1
        await eventually(
            lambda: room_one.map.to_dict() == room_two.map.to_dict() == {"k": "v", "j": 1},
            what="both nodes to skip the wild op and take the next",
        )
    finally:
        await one.aclose()
        await two.aclose()
        await hub.aclose()


async def test_a_client_that_does_not_read_is_closed_and_its_backlog_dropped(server):
    """A client that stops reading: once its outbox is full it is closed as too slow, at
    once, rather than when (if ever) it reads again; what was queued for it is dropped, and
    the room goes on serving the others."""
    url = server.url.replace("http://", "ws://") + "/v1/rooms/flooded"
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)  # its buffers fill soon
    sock.connect(("127.0.0.1", httpx.URL(server.url).port))
    writer = replica("flood")
    async with websockets.connect(url, max_size=None) as fast:
        async with websockets.connect(url, sock=sock, max_queue=1, compression=None) as slow:
            assert (await receive_json(slow))["type"] == "state"
            assert (await receive_json(fast))["type"] == "state"
            # A few large changes fill the slow client's socket, then a queue's worth of
            # small ones fill its outbox.
            messages = [
                [writer.set(f"big{i}", "x" * 60_000, now_ms()).to_dict() for i in range(10)]
                for _ in range(10)
            ]
            messages += [[writer.set("n", n, now_ms()).to_dict()] for n in range(1200)]
            for ops in messages:  # one at a time: the client that reads is never behind
                await fast.send(orjson.dumps({"type": "ops", "ops": ops}).decode())
                while (await receive_json(fast))["type"] != "ack":
                    pass
            # Now the slow client reads: what the kernel held, then the end. Not the
            # thousand changes that were queued for it.
            received = 0
            with pytest.raises(websockets.ConnectionClosed) as closed:
                async with asyncio.timeout(15):
                    async for _ in slow:
                        received += 1
            assert received < 200, received
            code = closed.value.rcvd.code if closed.value.rcvd is not None else 1006
            assert code in (4503, 1006), closed.value
        # The room still serves the one that reads.
        await fast.send(
            orjson.dumps(
                {"type": "ops", "ops": [writer.set("after", 1, now_ms()).to_dict()]}
            ).decode()
        )
        assert "ack" in {(await receive_json(fast))["type"], (await receive_json(fast))["type"]}


async def test_a_room_whose_stream_is_deleted_closes_its_clients_and_opens_again(server):
    # The room's follower ends with its stream: its clients once stayed connected and heard
    # nothing more, and the room served a frozen state, until the node restarted.
    url = server.url.replace("http://", "ws://") + "/v1/rooms/deleted-1"
    writer = replica("w")
    async with websockets.connect(url) as client:
        assert (await receive_json(client))["type"] == "state"
        op = writer.set("k", 1, now_ms())
        await client.send(orjson.dumps({"type": "ops", "ops": [op.to_dict()]}).decode())
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as http:
            assert (await http.delete("/v1/streams/rooms/deleted-1")).status_code == 204
        with pytest.raises(websockets.ConnectionClosed) as closed:
            async with asyncio.timeout(5):
                while True:
                    await client.recv()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1013, closed.value
    assert "reconnect" in closed.value.rcvd.reason
    async with websockets.connect(url) as again:  # the room, opened again from its stream
        state = await receive_json(again)
        assert state["type"] == "state" and state["state"] == {}
        later = writer.set("k", 2, now_ms())
        await again.send(orjson.dumps({"type": "ops", "ops": [later.to_dict()]}).decode())
        replies = [await receive_json(again), await receive_json(again)]  # ack, and the op
        assert {"type": "ack", "count": 1} in replies
