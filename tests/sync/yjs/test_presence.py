"""Presence (awareness) is bounded: real y-websocket editors under Node and pycrdt peers over
real WebSockets against `serve_yjs` on 127.0.0.1, and another node's records through a real
`MemoryHub`.

A peer may hold a few client ids (a y-websocket provider uses one), states of at most 16 KiB,
and only its own ids: what it says about anyone else's is skipped (a provider echoes every
change it is told of). Another node's records are bounded the same way. Removed ids' clocks
are forgotten after the presence timeout, which now applies to this node's peers too."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

from websockets.asyncio.client import ClientConnection, connect

from airlane.hub import MemoryHub
from airlane.sync.yjs import YRoom, YRooms, YRoomsConfig
from airlane.sync.yjs.protocol import (
    AwarenessEntry,
    AwarenessMessage,
    encode,
    encode_awareness_update,
)
from airlane.sync.yjs.records import AwarenessRecord, awareness_stream_id, record_event
from airlane.transports.http.config import HttpConfig

from .support import node_client_ok, py_client, running_node
from .test_interop import close_of, wait_for

KEEP = YRoomsConfig()


def presence(*entries: tuple[int, int, Any]) -> bytes:
    """An awareness message with ``(client id, clock, state)`` entries."""
    update = encode_awareness_update([AwarenessEntry(*entry) for entry in entries])
    return encode(AwarenessMessage(update))


def user(name: str) -> dict[str, Any]:
    return {"user": {"name": name, "color": "#30bced"}, "cursor": {"anchor": 1, "head": 4}}


def room_of(rooms: YRooms, name: str) -> YRoom:
    room = rooms.get(name)
    assert room is not None
    return room


async def still_open(ws: ClientConnection) -> bool:
    """True if the server has not closed ``ws`` (a ping is answered: connect with
    ``max_queue=None``, or the pong waits behind the messages the test does not read)."""
    try:
        await asyncio.wait_for(await ws.ping(), 5)
    except Exception:
        return False
    return ws.close_code is None


async def test_a_peer_announcing_100_client_ids_is_closed_and_others_presence_goes_on(
    hub: MemoryHub, node: str
) -> None:
    async with running_node(hub, KEEP) as server, py_client(server, "many", "alice") as alice:
        room = room_of(server.rooms, "many")
        async with connect(f"{server.url}/many") as mallory:
            await mallory.send(presence(*((1000 + i, 1, user(f"ghost-{i}")) for i in range(100))))
            code, reason = await close_of(mallory)
        assert code == 4400, (code, reason)
        assert reason == "presence for 100 client ids; a connection may hold 4"
        assert set(room.awareness_states) == {alice.doc.client_id}
        assert not any(name.startswith("ghost") for name in alice.seen_peers)
        # Presence keeps working: a y-websocket editor and alice see each other.
        bob = await node_client_ok(
            node, url=server.url, room="many", name="bob", expectPeers=["alice"]
        )
        assert "alice" in bob["seenPeers"] and not any(p.startswith("ghost") for p in bob["peers"])
        await alice.wait_until(lambda: "bob" in alice.seen_peers)
        # Four ids are within the bound, and stay the peer's.
        async with connect(f"{server.url}/many", max_queue=None) as carol:
            await carol.send(presence(*((2000 + i, 1, user(f"carol-{i}")) for i in range(4))))
            await wait_for(lambda: len(room.awareness_states) == 5)
            assert await still_open(carol)
        await wait_for(lambda: set(room.awareness_states) == {alice.doc.client_id})


async def test_a_1_mib_presence_state_is_refused(hub: MemoryHub, node: str) -> None:
    http = HttpConfig(max_ws_message_bytes=2 << 20)  # the state reaches the room
    async with (
        running_node(hub, KEEP, http=http) as server,
        py_client(server, "big", "alice") as alice,
    ):
        room = room_of(server.rooms, "big")
        async with connect(f"{server.url}/big", max_size=None) as mallory:
            huge = {"user": {"name": "huge"}, "blob": "x" * (1 << 20)}
            size = len(json.dumps(huge, separators=(",", ":")))
            await mallory.send(presence((4242, 1, huge)))
            code, reason = await close_of(mallory)
        assert code == 4400, (code, reason)
        assert reason == f"the presence state of client 4242 takes {size} bytes; at most 16384"
        assert set(room.awareness_states) == {alice.doc.client_id}
        assert "huge" not in alice.seen_peers
        bob = await node_client_ok(
            node, url=server.url, room="big", name="bob", expectPeers=["alice"]
        )
        assert "huge" not in bob["seenPeers"]


async def test_a_peer_cannot_remove_or_overwrite_another_peers_presence(
    hub: MemoryHub, node: str
) -> None:
    async with running_node(hub, KEEP) as server, py_client(server, "mine", "alice") as alice:
        room = room_of(server.rooms, "mine")
        victim = alice.doc.client_id
        await wait_for(lambda: victim in room.awareness_states)
        async with connect(f"{server.url}/mine", max_queue=None) as mallory:
            await mallory.send(presence((victim, 2, None)))  # "alice left"
            await mallory.send(presence((victim, 3, user("mallory-as-alice"))))
            await mallory.send(presence((7777, 1, user("mallory"))))  # its own: applied
            await wait_for(lambda: 7777 in room.awareness_states)
            assert room.awareness_states[victim] == {"user": {"name": "alice"}}
            # Skipped, not refused: a y-websocket provider echoes others' states and their
            # removal when its own timer drops them.
            assert await still_open(mallory)
            bob = await node_client_ok(
                node, url=server.url, room="mine", name="bob", expectPeers=["alice", "mallory"]
            )
        assert "mallory-as-alice" not in bob["seenPeers"]
        assert "mallory-as-alice" not in alice.seen_peers
        await alice.wait_until(lambda: alice.peers() == ["alice"])  # the others left, not her


async def test_six_y_websocket_editors_see_each_other(hub: MemoryHub, node: str) -> None:
    # Each provider echoes the others' states back: echoes are not claims, so none of them
    # passes the bound of 4 ids per connection.
    names = [f"editor-{i}" for i in range(6)]
    async with running_node(hub, KEEP) as server:
        results = await asyncio.gather(
            *(
                node_client_ok(
                    node, url=server.url, room="six", name=name, text=[name], expectPeers=names
                )
                for name in names
            )
        )
    for result in results:
        assert result["seenPeers"] == names, result


async def test_removed_client_ids_are_forgotten(hub: MemoryHub) -> None:
    # pycrdt keeps a clock for every id it ever saw: a peer that announces and removes a new
    # id over and over made the room keep them all. The room now forgets a removed id's clock
    # after the presence timeout.
    config = YRoomsConfig(awareness_timeout_s=0.5)
    async with (
        running_node(hub, config) as server,
        connect(f"{server.url}/churn", max_queue=None) as churn,
    ):
        for i in range(200):
            await churn.send(presence((10_000 + i, 1, user(f"n{i}"))))
            await churn.send(presence((10_000 + i, 2, None)))
        room = room_of(server.rooms, "churn")
        clocks = room._awareness.meta  # pycrdt's, by client id (no public view of it)
        await wait_for(lambda: 10_199 in clocks)
        assert not room.awareness_states
        assert await still_open(churn)
        await wait_for(lambda: len(clocks) <= 1)  # the room's own (the server has no state)


async def test_removed_client_ids_are_bounded_in_number(hub: MemoryHub) -> None:
    config = YRoomsConfig(max_peers_per_room=2, max_remote_awareness_states=4)
    assert config.max_removed_awareness_ids == 12  # 2 peers x 4 ids + 4 from other nodes
    async with (
        running_node(hub, config) as server,
        connect(f"{server.url}/churn", max_queue=None) as churn,
    ):
        for i in range(200):
            await churn.send(presence((10_000 + i, 1, user(f"n{i}"))))
            await churn.send(presence((10_000 + i, 2, None)))
        await churn.send(presence((99, 1, user("last"))))
        room = room_of(server.rooms, "churn")
        await wait_for(lambda: 99 in room.awareness_states)
        assert set(room.awareness_states) == {99}
        # The room's own client id, the live one, and the removed ones it remembers.
        assert len(room._awareness.meta) == 2 + config.max_removed_awareness_ids
        assert await still_open(churn)


async def test_presence_not_renewed_is_dropped_and_comes_back(hub: MemoryHub) -> None:
    config = YRoomsConfig(awareness_timeout_s=1.5)
    async with (
        running_node(hub, config) as server,
        py_client(server, "quiet", "alice") as alice,
        py_client(server, "quiet", "bob") as bob,
    ):
        room = room_of(server.rooms, "quiet")
        await wait_for(lambda: len(room.awareness_states) == 2)

        async def renew() -> None:  # bob renews his (as providers do, at half the timeout)
            for clock in range(2, 200):  # 20 s at most
                state = {"user": {"name": "bob"}}
                await bob.ws.send(presence((bob.doc.client_id, clock, state)))
                await asyncio.sleep(0.1)

        renewing = asyncio.create_task(renew())
        try:
            # Alice does not renew hers: dropped after 1.5 s (swept every 0.5 s).
            await wait_for(lambda: alice.doc.client_id not in room.awareness_states, 10)
            assert set(room.awareness_states) == {bob.doc.client_id}
            await bob.wait_until(lambda: bob.peers() == ["bob"])
            # Alice, told (a provider does this by itself), announces herself again.
            state = {"user": {"name": "alice"}}
            await alice.ws.send(presence((alice.doc.client_id, 2, state)))
            await bob.wait_until(lambda: bob.peers() == ["alice", "bob"])
        finally:
            renewing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewing


async def test_another_nodes_records_are_bounded(hub: MemoryHub) -> None:
    # Presence from other nodes comes as records on the room's presence stream (appended
    # here as a node would, or as anyone allowed to publish there could). By default one
    # node's records may hold 256 x 4 = 1024 ids here, all of them together 4096.
    async with running_node(hub, KEEP) as server, py_client(server, "remote", "alice") as alice:
        room = room_of(server.rooms, "remote")
        mine = alice.doc.client_id
        stream = awareness_stream_id("remote")

        async def record(origin: str, *entries: tuple[int, int, Any]) -> None:
            update = encode_awareness_update([AwarenessEntry(*entry) for entry in entries])
            await hub.append(stream, record_event(AwarenessRecord(origin, update)))

        # node-0: 1100 ids, 1024 kept; node-1..3: 1000 each; node-4: 72 of its 1000 fit.
        for n, count in enumerate((1100, 1000, 1000, 1000, 1000)):
            base = 10_000 * (n + 1)
            await record(f"node-{n}", *((base + i, 1, user(f"r{n}")) for i in range(count)))
        await record("node-5", (5000, 1, {"blob": "y" * 20_000}))  # over 16 KiB: skipped
        await record("node-5", (mine, 5, None), (mine, 6, user("not-alice")))  # not theirs
        await record("node-0", (10_000, 2, None))  # node-0 removes one: room for one more
        await record("node-5", (6000, 1, user("marker")))
        await wait_for(lambda: 6000 in room.awareness_states)
        remote = set(room.awareness_states) - {mine}
        assert len(remote) == 4096
        by_node = [sum(1 for i in remote if 10_000 * n <= i < 10_000 * (n + 1)) for n in range(6)]
        assert by_node == [1, 1023, 1000, 1000, 1000, 72]  # [0] is the marker, 6000
        assert 5000 not in remote
        assert room.awareness_states[mine] == {"user": {"name": "alice"}}
        await alice.wait_until(lambda: "marker" in alice.seen_peers)
        assert "not-alice" not in alice.seen_peers
