"""Rooms: shared `LWWMap` state kept in the hub, over WebSocket and HTTP.

Clients are real WebSocket clients (the `websockets` library) holding their own `LWWMap`
replicas; the in-process tests put two `Rooms` (two "nodes") on one hub.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time

import httpx
import orjson
import pytest
import websockets

import airlane
from airlane.core import Event, Kind
from airlane.hub import MemoryHub
from airlane.sync.hlc import HybridClock
from airlane.sync.lww import LWWMap
from airlane.sync.ops import Op
from airlane.sync.rooms import RoomConfig, RoomError, Rooms
from tests.asgi_server import serving
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


class _RoomClient:
    """A real WebSocket client of a room holding its own `LWWMap` replica: it applies the
    state it is sent on joining and every change relayed after, and queues acks and errors."""

    def __init__(self, ws, name: str) -> None:
        self.ws = ws
        self.map = replica(name)
        self.joined: dict | None = None
        """The ``state`` message the room sent on joining."""
        self.replies: asyncio.Queue[dict] = asyncio.Queue()
        self._reader = asyncio.create_task(self._read(), name=f"room client {name}")

    async def _read(self) -> None:
        async for raw in self.ws:
            message = orjson.loads(raw)
            if message["type"] == "state":
                self.joined = message
                items = message["entries"]
            elif message["type"] == "ops":
                items = message["ops"]
            else:  # ack or error: the writer waits for it
                self.replies.put_nowait(message)
                continue
            for item in items:
                self.map.apply(Op.from_dict(item), now_ms())

    async def send(self, op: Op) -> None:
        """Send one op (one message: one record of the room's stream) and wait for the ack."""
        await self.ws.send(orjson.dumps({"type": "ops", "ops": [op.to_dict()]}).decode())
        reply = await asyncio.wait_for(self.replies.get(), 5)
        assert reply == {"type": "ack", "count": 1}, reply

    async def aclose(self) -> None:
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, websockets.ConnectionClosed):
            await self._reader


async def test_a_client_joining_after_the_oldest_ops_were_trimmed_gets_the_whole_state():
    """docs/sync.md, Rooms: a compacted state is appended every 256 operations "so that a node
    or client joining late starts from state + tail" (and room.py: retention keeps at least
    one compacted state). The room's stream keeps 4 x 256 records; more are written here, so
    its oldest ops are trimmed for real; a client then joins on a node that opens the room
    from that trimmed stream, and must get the full state and converge with the clients that
    were there all along."""
    hub = MemoryHub()
    await hub.start()
    room = "late-joiner"
    stream = f"rooms/{room}"
    # Two gateway nodes on one hub, each a real HTTP/WebSocket server on a free port, with
    # the rooms' production settings (compact_every 256, so 1,024 records retained).
    node_one = airlane.create_app(airlane.Gateway(hub, airlane.SyntheticBackend()))
    node_two = airlane.create_app(airlane.Gateway(hub, airlane.SyntheticBackend()))
    try:
        compact_every = RoomConfig().compact_every
        records = 4 * compact_every + 2 * compact_every  # past the retention by 512 records
        async with serving(node_one) as one, serving(node_two) as two:
            url_one, url_two = f"{one.ws_url}/v1/rooms/{room}", f"{two.ws_url}/v1/rooms/{room}"
            async with websockets.connect(url_one) as ws_a, websockets.connect(url_one) as ws_b:
                alice, bob = _RoomClient(ws_a, "alice"), _RoomClient(ws_b, "bob")
                try:
                    await eventually(lambda: alice.joined and bob.joined, what="both to join")
                    async with asyncio.timeout(120):  # about 1,500 round trips, bounded
                        for i in range(records):
                            writer = alice if i % 2 == 0 else bob
                            if i < 20:  # keys only the first records set: trimmed, never rewritten
                                op = writer.map.set(f"first-{i}", i, now_ms())
                            elif i < 22:  # deletes of two of them, in the trimmed records too
                                op = writer.map.delete(f"first-{i - 20}", now_ms())
                            else:
                                op = writer.map.set(f"k{i % 40}", i, now_ms())
                            await writer.send(op)
                        # Relays of one stream arrive in order: a marker both have seen means
                        # both have every op before it.
                        await alice.send(alice.map.set("marker", 1, now_ms()))
                        await eventually(
                            lambda: (
                                alice.map.to_dict().get("marker") == 1
                                and bob.map.to_dict().get("marker") == 1
                            ),
                            timeout=10,
                            what="both clients to take every op",
                        )
                    settled = alice.map.to_dict()
                    assert bob.map.to_dict() == settled
                    assert {f"first-{i}" for i in range(2, 20)} <= settled.keys()
                    assert "first-0" not in settled and "first-1" not in settled
                    # The trimmed path for real: the stream no longer holds its first records
                    # (the ops that set first-*), and what it holds carries those keys only in
                    # compacted states.
                    info = await hub.info(stream)
                    assert info.last_seq > records
                    assert info.first_retained_seq > 22, info
                    assert info.retained_events == 4 * compact_every  # the room's retention
                    kept = await _records(hub, stream, info.last_seq)
                    assert all(
                        not str(op["key"]).startswith("first-")
                        for r in kept
                        for op in r.get("ops", [])
                    )
                    assert any(
                        any(op["key"] == "first-2" for op in r["state"])
                        for r in kept
                        if "state" in r
                    ), "no compacted state left in the stream"
                    # The late client, on the node that has not served the room yet: that node
                    # opens the room from the trimmed stream.
                    async with websockets.connect(url_two) as ws_c:
                        carol = _RoomClient(ws_c, "carol")
                        try:
                            await eventually(lambda: carol.joined, what="the late client to join")
                            assert carol.joined is not None
                            assert carol.joined["state"] == settled
                            assert carol.map.to_dict() == settled
                            # And it converges with the others from there: each writes, across
                            # both nodes (a key only in the compacted state is deleted, too).
                            await carol.send(carol.map.set("from-late", "c", now_ms()))
                            await alice.send(alice.map.set("k0", "a", now_ms()))
                            await bob.send(bob.map.delete("first-2", now_ms()))
                            await carol.send(carol.map.set("marker", 2, now_ms()))
                            clients = (alice, bob, carol)
                            await eventually(
                                lambda: all(c.map.to_dict().get("marker") == 2 for c in clients),
                                timeout=10,
                                what="the three clients to take the last ops",
                            )
                            final = alice.map.to_dict()
                            assert bob.map.to_dict() == carol.map.to_dict() == final
                            assert final["from-late"] == "c" and final["k0"] == "a"
                            assert "first-2" not in final and final["first-3"] == 3
                        finally:
                            await carol.aclose()
                finally:
                    await alice.aclose()
                    await bob.aclose()
    finally:
        await hub.aclose()  # (the gateways close it too, as they shut down)


async def _records(hub: MemoryHub, stream: str, last_seq: int) -> list[dict]:
    """The room records the stream holds now (from its first retained one to ``last_seq``)."""
    kept: list[dict] = []
    async with await hub.subscribe(stream) as subscription:
        async with asyncio.timeout(5):
            seq = 0
            while seq < last_seq:
                batch = await subscription.next_batch(1024)
                assert batch, "the room's stream ended"
                seq = batch[-1].seq
                kept += [e.data["payload"] for e in batch if e.kind is Kind.MESSAGE]
    return kept


async def test_a_room_state_is_bounded_and_ops_that_shrink_it_still_pass():
    # Nothing bounded a room's state: every new key grew it, and every compaction wrote it
    # whole as one hub event. Ops that would grow it past max_state_bytes are refused (the
    # state's size counted on every node alike); deletes and smaller values still pass.
    hub = MemoryHub()
    await hub.start()
    config = RoomConfig(max_state_bytes=4096)
    one, two = Rooms(hub, node="one", config=config), Rooms(hub, node="two", config=config)
    try:
        room, other = await one.room("bounded"), await two.room("bounded")
        writer = replica("w")
        for i in range(6):  # about 560 bytes each as JSON
            await room.submit([writer.set(f"k{i}", "v" * 500, now_ms()).to_dict()])
        with pytest.raises(RoomError) as refused:
            await room.submit([writer.set("k6", "v" * 1000, now_ms()).to_dict()])
        assert refused.value.code == "stream_too_large"
        assert "4096 bytes" in str(refused.value)
        assert "k6" not in room.map.to_dict()
        await room.submit([writer.set("k0", "v" * 400, now_ms()).to_dict()])  # smaller
        await room.submit([writer.delete("k1", now_ms()).to_dict()])  # a tombstone
        await room.submit([writer.set("k6", "v" * 500, now_ms()).to_dict()])  # room again
        await eventually(
            lambda: other.map.to_dict() == room.map.to_dict() == writer.to_dict(),
            what="node two to take every record",
        )
        assert other.state_bytes == room.state_bytes <= 4096
        assert room.state_bytes == sum(len(orjson.dumps(op.to_dict())) for op in room.map.entries())
    finally:
        await one.aclose()
        await two.aclose()
        await hub.aclose()


async def test_a_room_at_its_bound_still_compacts_on_a_jetstream_cluster(nats_session):
    # A compacted state is one hub event, which in a cluster is one broker message (1 MiB):
    # past it the compaction could not be stored (and nothing said so), and once the count
    # retention trimmed the last stored state, a node opening the room lost every op before
    # it. Held to the default bound, a room as full as it may be compacts.
    from tests.hub.test_jetstream import hub_config, two_nodes

    config = hub_config(nats_session, layout="node", compression="none")
    rooms_config = RoomConfig(compact_every=11)  # a compaction of the room at its fullest
    async with two_nodes(config) as (a, b):
        one = Rooms(a, node="one", config=rooms_config)
        try:
            room = await one.room("full")
            writer = replica("w")
            blob = "x" * (64 * 1024)
            refused = None
            for i in range(20):  # 11 fit in 768 KiB
                try:
                    await room.submit([writer.set(f"k{i:02d}", blob, now_ms()).to_dict()])
                except RoomError as exc:
                    refused = exc
                    break
            assert refused is not None and refused.code == "stream_too_large"
            assert len(room.map.entries()) == 11  # 65,605 bytes each as JSON
            async with await a.subscribe("rooms/full") as stream:
                records: list[dict] = []
                async with asyncio.timeout(10):  # the compaction is stored, whole
                    while not any("state" in r for r in records):
                        batch = await stream.next_batch(100)
                        assert batch, "the room's stream ended"
                        records += [e.data["payload"] for e in batch]
            state = next(r for r in records if "state" in r)
            assert len(state["state"]) == len(room.map.entries())
            late = Rooms(b, node="late", config=rooms_config)  # the other node opens it
            assert (await late.state("full"))["state"] == room.map.to_dict()
            await late.aclose()
        finally:
            await one.aclose()
