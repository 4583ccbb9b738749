"""`YRooms` and `YRoom` without sockets: pycrdt clients joined to rooms in memory, over a real
`MemoryHub` (two managers on one hub are two gateway nodes)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import pytest
from pycrdt import Awareness, Doc, Map, Text, create_sync_message, create_update_message

from airlane.core import Event, Kind
from airlane.core.errors import ErrorCode
from airlane.hub import HubUnavailable, MemoryHub
from airlane.sync.yjs import (
    InvalidRoomName,
    InvalidUpdate,
    MalformedMessage,
    ReadOnlyPeer,
    RoomFull,
    RoomsClosed,
    RoomUnavailable,
    TooManyRooms,
    UnknownMessage,
    YRoom,
    YRooms,
    YRoomsConfig,
)
from airlane.sync.yjs.protocol import (
    AwarenessMessage,
    QueryAwareness,
    SyncStep1,
    SyncStep2,
    SyncUpdate,
    encode,
    parse_awareness_update,
    parse_message,
)
from airlane.sync.yjs.records import StateRecord, decode_record, doc_stream_id
from tests.waiting import elapse, virtual_time

FAST = YRoomsConfig(idle_close_s=0.05)


class Client:
    """A pycrdt editor joined to a room through a `YPeer`, pumped by hand."""

    def __init__(self, rooms: YRooms, name: str, *, can_write: bool = True) -> None:
        self.rooms = rooms
        self.peer = rooms.peer(name, can_write=can_write)
        self.doc: Doc[Any] = Doc()
        self.text = self.doc.get("text", type=Text)
        self.map = self.doc.get("map", type=Map)
        self.awareness = Awareness(self.doc)
        self.awareness.set_local_state({"user": {"name": name}})
        self.seen: dict[int, Any] = {}
        self.room: YRoom | None = None
        self._remote = False
        self._out: list[bytes] = []
        self.doc.observe(lambda e: None if self._remote else self._out.append(e.update))

    async def join(self, name: str = "room") -> Client:
        self.room = await self.rooms.join(name, self.peer)
        await self.send(create_sync_message(self.doc))
        update = self.awareness.encode_awareness_update([self.doc.client_id])
        await self.send(encode(AwarenessMessage(update)))
        await self.pump()
        return self

    async def send(self, data: bytes) -> None:
        assert self.room is not None
        await self.room.receive(self.peer, data)

    async def pump(self) -> None:
        """Handle what the room queued for this client."""
        while self.peer.queued:
            for data in await self.peer.next_messages():
                message = parse_message(data)
                if isinstance(message, SyncStep1):
                    await self.send(encode(SyncStep2(self.doc.get_update(message.state_vector))))
                elif isinstance(message, SyncStep2 | SyncUpdate):
                    self._remote = True
                    try:
                        self.doc.apply_update(message.update)
                    finally:
                        self._remote = False
                elif isinstance(message, AwarenessMessage):
                    for entry in parse_awareness_update(message.update):
                        self.seen[entry.client_id] = entry.state

    async def edit(self, change: Callable[[Client], object]) -> None:
        change(self)
        out, self._out = self._out, []
        for update in out:
            await self.send(create_update_message(update))

    async def leave(self) -> None:
        if self.room is not None:
            await self.room.remove(self.peer)

    def peers(self) -> set[str]:
        return {s["user"]["name"] for s in self.seen.values() if s}

    def state(self) -> dict[str, Any]:
        return {"text": str(self.text), "map": self.map.to_py()}


async def eventually(check: Callable[[], bool], *clients: Client, timeout: float = 5.0) -> None:
    """Pump ``clients`` until ``check()`` holds, after every loop turn (hub followers run in
    tasks of this loop)."""
    async with asyncio.timeout(timeout):
        while True:
            for client in clients:
                await client.pump()
            if check():
                return
            await asyncio.sleep(0)


def insert(text: str) -> Callable[[Client], object]:
    return lambda c: c.text.insert(len(c.text), text)


@pytest.fixture
async def rooms(hub: MemoryHub) -> Any:
    manager = YRooms(hub, FAST)
    yield manager
    await manager.aclose()


async def test_two_clients_sync_and_relay(rooms: YRooms) -> None:
    alice = await Client(rooms, "alice").join()
    bob = await Client(rooms, "bob").join()
    await alice.edit(insert("hello "))
    await bob.edit(lambda c: c.map.__setitem__("k", 1))
    await eventually(
        lambda: alice.state() == bob.state() == {"text": "hello ", "map": {"k": 1}}, alice, bob
    )
    assert alice.peers() == bob.peers() == {"alice", "bob"}
    room = rooms.get("room")
    assert room is not None and room.peers == 2
    assert str(room.doc.get("text", type=Text)) == "hello "


async def test_late_joiner_gets_the_full_state(rooms: YRooms) -> None:
    alice = await Client(rooms, "alice").join()
    for word in ("one ", "two ", "three"):
        await alice.edit(insert(word))
    carol = await Client(rooms, "carol").join()
    assert carol.state()["text"] == "one two three"


async def test_room_closes_when_idle_and_reloads_from_the_hub(hub: MemoryHub) -> None:
    rooms = YRooms(hub, FAST)
    alice = await Client(rooms, "alice").join()
    await alice.edit(insert("kept"))
    first = rooms.get("room")
    await alice.leave()
    await eventually(lambda: rooms.get("room") is None)
    # Its close compacts, then lets go of its cursors: wait for the close to finish.
    await eventually(lambda: hub.stats().subscribers == 0)
    assert first is not None and first.compactions == 1
    records = [decode_record(e) for e in (await hub.subscribe(doc_stream_id("room"))).poll()]
    assert isinstance(records[-1], StateRecord)
    bob = await Client(rooms, "bob").join()
    assert rooms.get("room") is not first
    assert bob.state()["text"] == "kept"
    await rooms.aclose()


@virtual_time
async def test_a_new_peer_cancels_the_idle_close() -> None:
    # In loop time: the idle close alice's leaving armed would be due within the elapse.
    hub = MemoryHub()
    await hub.start()
    rooms = YRooms(hub, FAST)
    try:
        alice = await Client(rooms, "alice").join()
        room = rooms.get("room")
        await alice.leave()
        await Client(rooms, "bob").join()
        await elapse(2 * FAST.idle_close_s)
        assert rooms.get("room") is room and room is not None and not room.closing
    finally:
        await rooms.aclose()
        await hub.aclose()


async def test_two_nodes_on_one_hub(hub: MemoryHub) -> None:
    node_a, node_b = YRooms(hub, FAST), YRooms(hub, FAST)
    alice = await Client(node_a, "alice").join()
    bob = await Client(node_b, "bob").join()
    await alice.edit(insert("from A "))
    await bob.edit(insert("from B"))
    await eventually(
        lambda: "from A" in bob.state()["text"] and "from B" in alice.state()["text"], alice, bob
    )
    assert alice.state() == bob.state()
    # Presence crosses nodes too: the query on open brought alice's, bob's went by record.
    await eventually(lambda: alice.peers() == bob.peers() == {"alice", "bob"}, alice, bob)
    await bob.leave()
    await eventually(lambda: alice.peers() == {"alice"}, alice)
    await node_a.aclose()
    await node_b.aclose()


async def test_compaction_keeps_the_document_past_retention(hub: MemoryHub) -> None:
    config = YRoomsConfig(compact_every=4, idle_close_s=0.05)
    node_a = YRooms(hub, config)
    alice = await Client(node_a, "alice").join()
    pieces = [f"{i:03d}," for i in range(150)]
    for piece in pieces:
        await alice.edit(insert(piece))
    room = node_a.get("room")
    await eventually(lambda: room is not None and room.compactions >= 10)
    info = await hub.info(doc_stream_id("room"))
    assert info.first_retained_seq > 1, "history must have been folded for this test to count"
    # A node that opens the room now reads the latest state and what followed.
    node_b = YRooms(hub, config)
    late = await Client(node_b, "late").join()
    assert late.state()["text"] == "".join(pieces)
    late_room = node_b.get("room")
    assert late_room is not None and late_room.updates_since_state < 4 + 2
    await node_a.aclose()
    await node_b.aclose()


async def test_read_only_peer_syncs_but_may_not_change(rooms: YRooms) -> None:
    alice = await Client(rooms, "alice").join()
    await alice.edit(insert("hello world"))
    await alice.edit(lambda c: c.text.__delitem__(slice(0, 6)))  # a delete set from now on
    reader = await Client(rooms, "reader", can_write=False).join()
    assert reader.state()["text"] == "world"
    # Its answer to the room's step 1 carried its delete set and nothing new: accepted above.
    with pytest.raises(ReadOnlyPeer):
        await reader.edit(insert("!"))
    # Presence is not content: a read-only peer shows up.
    await eventually(lambda: "reader" in alice.peers(), alice)


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b"\x07", UnknownMessage),
        (b"\x00\x00\x05ab", MalformedMessage),
        (b"\x00\x02\x03abc", InvalidUpdate),  # framed well, not a Yjs update
        (b"\x00\x00\x02\xff\xff", InvalidUpdate),  # not a state vector
        (b"\x00\x00\x04\xff\xff\xff\x7f", InvalidUpdate),  # 2**28 entries in 4 bytes
        (b"\x00\x02\x04\xff\xff\xff\x7f", InvalidUpdate),  # 2**28 client groups
        (b"\x01\x03\x05\x01\x01", MalformedMessage),  # awareness lies about its entries
        (b"\x02\x00\x01x", UnknownMessage),  # auth goes server to client only
    ],
)
async def test_bad_messages_are_refused_and_change_nothing(
    rooms: YRooms, data: bytes, error: type[Exception]
) -> None:
    alice = await Client(rooms, "alice").join()
    await alice.edit(insert("safe"))
    before = alice.state()
    with pytest.raises(error):
        await alice.send(data)
    bob = await Client(rooms, "bob").join()
    assert bob.state() == before


async def test_query_awareness(rooms: YRooms) -> None:
    alice = await Client(rooms, "alice").join()
    bob = await Client(rooms, "bob").join()
    await alice.pump()
    alice.seen.clear()
    await alice.send(encode(QueryAwareness()))
    await alice.pump()
    assert alice.peers() == {"alice", "bob"}
    await bob.leave()


async def test_slow_peer_is_closed_not_buffered(hub: MemoryHub) -> None:
    rooms = YRooms(hub, YRoomsConfig(max_queued_messages=8))
    alice = await Client(rooms, "alice").join()
    slow = rooms.peer("slow")
    await rooms.join("room", slow)  # never drained
    for i in range(20):
        await alice.edit(insert(str(i)))
    assert slow.close_code is ErrorCode.TOO_SLOW
    assert "too slow" in slow.close_reason
    assert await slow.next_messages() == []
    await rooms.aclose()


async def test_bounds(hub: MemoryHub) -> None:
    rooms = YRooms(hub, YRoomsConfig(max_rooms=1, max_peers_per_room=1))
    await Client(rooms, "alice").join("one")
    with pytest.raises(RoomFull):
        await Client(rooms, "bob").join("one")
    with pytest.raises(TooManyRooms):
        await Client(rooms, "carol").join("two")
    with pytest.raises(InvalidRoomName):
        await Client(rooms, "dave").join("no spaces")
    await rooms.aclose()


async def test_aclose_closes_peers_and_refuses_joins(hub: MemoryHub) -> None:
    rooms = YRooms(hub, FAST)
    alice = await Client(rooms, "alice").join()
    await rooms.aclose()
    assert alice.peer.close_code is ErrorCode.SHUTTING_DOWN
    with pytest.raises(RoomsClosed):
        await Client(rooms, "bob").join()


async def test_concurrent_joins_open_one_room(rooms: YRooms) -> None:
    clients = [Client(rooms, f"c{i}") for i in range(5)]
    await asyncio.gather(*(c.join("shared") for c in clients))
    assert len(rooms) == 1
    assert {c.room for c in clients} == {rooms.get("shared")}


async def test_room_whose_stream_is_deleted_closes_its_peers(
    rooms: YRooms, hub: MemoryHub, caplog: pytest.LogCaptureFixture
) -> None:
    alice = await Client(rooms, "alice").join()
    await alice.edit(insert("x"))
    with caplog.at_level(logging.WARNING, logger="airlane.yjs"):
        await hub.delete(doc_stream_id("room"))
        await eventually(lambda: alice.peer.closed)
    assert alice.peer.close_code is ErrorCode.ROOM_UNAVAILABLE
    await eventually(lambda: rooms.get("room") is None)


async def test_foreign_and_corrupt_records_are_skipped(
    hub: MemoryHub, rooms: YRooms, caplog: pytest.LogCaptureFixture
) -> None:
    await hub.create(doc_stream_id("room"))
    await hub.append(doc_stream_id("room"), Event.message({"hello": "world"}))
    await hub.append(doc_stream_id("room"), Event.status(note="not a record"))
    with caplog.at_level(logging.WARNING, logger="airlane.yjs"):
        alice = await Client(rooms, "alice").join()
    assert "not a version 1 room record" in caplog.text
    await alice.edit(insert("fine"))
    assert (await hub.snapshot(doc_stream_id("room"))).kind is Kind.SNAPSHOT


async def test_loading_applies_every_record_after_what_the_best_state_covers(
    hub: MemoryHub,
) -> None:
    # Two writers: A's updates 1, 2, 4 and B's 3; a state written at seq 5 by a node that had
    # followed only to seq 2 (so it covers 2 and lacks B's 3), a later update 6. Loading must
    # give the document every record gives, whatever order they came in.
    from airlane.sync.yjs.records import UpdateRecord, record_event

    a, b = Doc(), Doc()
    a_text, b_text = a.get("text", type=Text), b.get("text", type=Text)
    stream = doc_stream_id("two-writers")
    await hub.create(stream)

    async def update(doc: Doc, text: Text, word: str, origin: str) -> bytes:
        before = doc.get_state()
        text.insert(len(text), word)
        change = doc.get_update(before)
        await hub.append(stream, record_event(UpdateRecord(origin, change)))
        return change

    one = await update(a, a_text, "one ", "A")
    two = await update(a, a_text, "two ", "A")
    b.apply_update(one)
    b.apply_update(two)
    await update(b, b_text, "THREE ", "B")  # seq 3: B's, not seen by the state's writer
    await update(a, a_text, "four ", "A")  # seq 4
    lagging = Doc()
    lagging.apply_update(one)
    lagging.apply_update(two)
    state = StateRecord("C", lagging.get_update(), 2)  # seq 5, covers 2
    await hub.append(stream, record_event(state))
    await update(a, a_text, "six", "A")  # seq 6
    everything = Doc()
    for event in (await hub.subscribe(stream)).poll():
        record = decode_record(event)
        everything.apply_update(record.state if isinstance(record, StateRecord) else record.update)
    expected = str(everything.get("text", type=Text))
    assert "THREE" in expected and "four" in expected

    rooms = YRooms(hub, FAST)
    try:
        carol = await Client(rooms, "carol").join("two-writers")
        assert carol.state()["text"] == expected
    finally:
        await rooms.aclose()


class RefusingHub(MemoryHub):
    """A `MemoryHub` whose appends to one stream fail while ``refusing`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.refusing = False

    async def append(self, stream_id: str, event: Event) -> Event:
        if self.refusing and stream_id == doc_stream_id("room"):
            raise HubUnavailable("the hub is partitioned away")
        return await super().append(stream_id, event)


async def test_a_change_the_hub_refuses_closes_the_room_and_the_writer_resends_it() -> None:
    """A change applied but not appended must not stay in a room that keeps serving: the room
    closes, reopens from the stream, and the writer's resync sends the change again."""
    hub = RefusingHub()
    rooms = YRooms(hub, FAST)
    try:
        alice = await Client(rooms, "alice").join()
        bob = await Client(rooms, "bob").join()
        await alice.edit(insert("logged "))
        hub.refusing = True
        with pytest.raises(RoomUnavailable):
            await alice.edit(insert("refused"))
        assert alice.peer.close_code is ErrorCode.ROOM_UNAVAILABLE
        assert bob.peer.close_code is ErrorCode.ROOM_UNAVAILABLE
        await eventually(lambda: rooms.get("room") is None)
        hub.refusing = False
        # The writer reconnects with its document; a fresh reader gets everything.
        alice.peer = rooms.peer("alice")
        await alice.join()
        carol = await Client(rooms, "carol").join()
        await eventually(lambda: str(carol.text) == "logged refused", alice, carol)
    finally:
        await rooms.aclose()
    # And the stream alone gives it: a node that opens the room later loads it.
    later = YRooms(hub, FAST)
    try:
        dave = await Client(later, "dave").join("room")
        await eventually(lambda: str(dave.text) == "logged refused", dave)
    finally:
        await later.aclose()
