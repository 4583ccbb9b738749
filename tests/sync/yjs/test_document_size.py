"""A Yjs document is bounded (`YRoomsConfig.max_document_bytes`): its state record is one hub
event, and in a cluster one broker message. Real y-websocket editors under Node and pycrdt
peers over real WebSockets against `serve_yjs`, pycrdt peers on `YRooms` in memory, and the
growth arithmetic (`airlane.sync.yjs.growth`) against what pycrdt actually encodes."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
from pycrdt import Doc, Text, create_update_message
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from airlane.core.errors import ErrorCode
from airlane.hub import MemoryHub
from airlane.sync.yjs import DocumentTooLarge, YRoom, YRooms, YRoomsConfig
from airlane.sync.yjs.growth import (
    RANGE_BYTES,
    STRUCT_FACTOR,
    delete_set_of,
    growth_of,
    new_ranges,
    pending_of,
)
from airlane.sync.yjs.records import StateRecord, UpdateRecord, decode_record, doc_stream_id

from .support import PyClient, node_client_ok, py_client, run_node_client, running_node
from .test_interop import close_of, wait_for
from .test_rooms import Client

SMALL = YRoomsConfig(max_document_bytes=16 * 1024)


def room_of(rooms: YRooms, name: str) -> YRoom:
    room = rooms.get(name)
    assert room is not None
    return room


def text_of(room: YRoom) -> str:
    return str(room.doc.get("text", type=Text))


async def stream_text(hub: MemoryHub, room: str) -> str:
    """The text every record of the room's stream gives (what a node opening it loads)."""
    doc: Doc[Any] = Doc()
    stream = await hub.subscribe(doc_stream_id(room))
    for event in stream.poll():
        record = decode_record(event)
        if isinstance(record, StateRecord):
            doc.apply_update(record.state)
        elif isinstance(record, UpdateRecord):
            doc.apply_update(record.update)
    await stream.aclose()
    return str(doc.get("text", type=Text))


async def closed(client: PyClient) -> tuple[int | None, str | None]:
    """The close code and reason of ``client``, once the server has closed it (its reader
    task reads the socket: nothing else may)."""
    await wait_for(lambda: client.ws.close_code is not None)
    return client.ws.close_code, client.ws.close_reason


async def write_until_refused(client: PyClient, room: YRoom, size: int, limit: int = 200) -> str:
    """Append pieces of ``size`` characters until the server closes ``client``; the piece it
    refused."""
    for i in range(limit):
        piece = f"<{i}>" + "x" * size
        client.text.insert(len(client.text), piece)
        await client.flush()
        await wait_for(lambda p=piece: p in text_of(room) or client.ws.close_code is not None)
        if client.ws.close_code is not None:
            return piece
    raise AssertionError(f"{limit} pieces of {size} characters and still not refused")


async def test_a_document_growing_past_its_bound_is_refused_and_the_room_goes_on(
    hub: MemoryHub, node: str
) -> None:
    async with running_node(hub, SMALL) as server, py_client(server, "full", "bob") as bob:
        room = room_of(server.rooms, "full")
        async with py_client(server, "full", "alice") as alice:
            refused = await write_until_refused(alice, room, 1000)
            code, reason = await closed(alice)
        assert code == 4413, (code, reason)
        assert (reason or "").startswith("document full: this change would take it from"), reason
        kept = text_of(room)
        assert refused not in kept and len(kept) > 10_000
        assert len(room.doc.get_update()) <= 16 * 1024
        assert await stream_text(hub, "full") == kept  # the stream has what the room has
        # The room goes on: bob was never refused; he deletes, and then may write again.
        await bob.wait_until(lambda: str(bob.text) == kept)
        del bob.text[0 : len(kept) // 2]
        await bob.flush()
        bob.text.insert(len(bob.text), "<after>")
        await bob.flush()
        await wait_for(lambda: text_of(room).endswith("<after>"))
        assert bob.ws.close_code is None
        # A y-websocket editor joins and reads it; one that writes past the bound is told
        # 4413 and stops reconnecting (its document holds the change: it would resend it).
        reader = await node_client_ok(node, url=server.url, room="full", expectText=["<after>"])
        assert reader["text"] == text_of(room)
        writer = await run_node_client(
            node, url=server.url, room="full", name="w", text=["y" * 20_000], expectText=["?"]
        )
        assert (writer["status"], writer["code"]) == (3, 4413), writer
        assert writer["reason"].startswith("document full"), writer
        assert "y" * 100 not in text_of(room)
        assert await stream_text(hub, "full") == text_of(room)


async def test_a_large_document_within_the_bound_gets_in(hub: MemoryHub, node: str) -> None:
    # 400 KB in one update: the estimate (structs counted twice) says 800 KB, past the default
    # 640 KiB; the room tries it on a copy before refusing, and takes it.
    body = "0123456789" * 40_000
    async with running_node(hub, YRoomsConfig()) as server:
        writer = await node_client_ok(
            node, url=server.url, room="big", name="w", text=["0123456789"], repeat=40_000
        )
        assert writer["text"] == body
        room = room_of(server.rooms, "big")
        assert text_of(room) == body
        assert room.document_bytes == len(room.doc.get_update())  # measured, not estimated
        assert await stream_text(hub, "big") == body


async def test_a_delete_that_would_split_the_document_apart_is_refused(hub: MemoryHub) -> None:
    # Deleting every other character of one long insert splits it into thousands of items:
    # the update is a fraction of the document, the state it leaves several times larger.
    config = YRoomsConfig(max_document_bytes=64 * 1024)
    async with running_node(hub, config) as server, py_client(server, "split", "alice") as alice:
        room = room_of(server.rooms, "split")
        alice.text.insert(0, "a" * 20_000)
        await alice.flush()
        await wait_for(lambda: len(text_of(room)) == 20_000)
        probe: Doc[Any] = Doc()
        probe.apply_update(alice.doc.get_update())
        before = alice.doc.get_state()
        with alice.doc.transaction():
            for i in range(9_999, 0, -1):
                del alice.text[2 * i : 2 * i + 1]
        bomb = alice.doc.get_update(before)  # no struct, 9,999 deleted ranges
        probe.apply_update(bomb)
        assert len(bomb) < 64 * 1024 < len(probe.get_update()) // 2  # what it would have done
        await alice.flush()
        code, reason = await closed(alice)
        assert code == 4413, (code, reason)
        assert text_of(room) == "a" * 20_000
        assert len(room.doc.get_update()) < 21_000


async def test_an_editor_in_sync_rejoins_a_full_document(hub: MemoryHub) -> None:
    # A peer's answer to sync step 1 carries its whole delete set: near the bound it must
    # count for nothing when the room has deleted all of it already.
    async with running_node(hub, SMALL) as server, py_client(server, "holes", "bob") as bob:
        room = room_of(server.rooms, "holes")
        async with py_client(server, "holes", "alice") as alice:
            for i in range(1000):  # many small deletions: a delete set of hundreds of ranges
                alice.text.insert(len(alice.text), f"[{i:04d}" + "-" * 40 + "]")
                del alice.text[len(alice.text) - 20 : len(alice.text) - 18]
                try:
                    await alice.flush()
                except ConnectionClosed:
                    break
            code, reason = await closed(alice)
        assert code == 4413, (code, reason)
        await bob.wait_until(lambda: str(bob.text) == text_of(room))
        ranges = delete_set_of(bob.doc.get_update(bob.doc.get_state()))
        assert sum(map(len, ranges.values())) * RANGE_BYTES > 16 * 1024 - room.document_bytes
        await bob.aclose()
        # Bob comes back with his document: his sync step 2 is nothing but that delete set.
        async with connect(f"{server.url}/holes") as ws:
            again = PyClient(ws, "bob")
            again.doc.apply_update(bob.doc.get_update())
            await again.start()
            await asyncio.wait_for(again.synced.wait(), 10)
            del again.text[0:100]  # and he can delete
            await again.flush()
            await wait_for(lambda: len(text_of(room)) == len(str(bob.text)) - 100)
            assert ws.close_code is None
            await again.aclose()


async def test_updates_waiting_for_what_precedes_them_count(hub: MemoryHub) -> None:
    # pycrdt keeps an update whose predecessors it lacks in the document, in no state it
    # encodes, until they come: a peer could pile them up without ever growing the state.
    async with running_node(hub, SMALL) as server, connect(f"{server.url}/gaps") as ws:
        doc: Doc[Any] = Doc()
        text = doc.get("text", type=Text)
        text.insert(0, "first")  # never sent
        sent = 0
        for i in range(100):  # 100 KB, if nothing stopped them
            before = doc.get_state()
            text.insert(len(text), f"<{i}>" + "z" * 1000)
            try:
                await ws.send(create_update_message(doc.get_update(before)))
            except ConnectionClosed:
                break
            sent += 1
        code, reason = await close_of(ws)
        assert code == 4413, (code, reason, sent)
        room = room_of(server.rooms, "gaps")
        assert text_of(room) == ""
        assert 8 * 1024 < room.document_bytes <= 16 * 1024


@pytest.mark.parametrize("seed", [1, 2])
async def test_the_estimate_covers_the_document_and_refusals_are_exact(
    hub: MemoryHub, seed: int
) -> None:
    # Three editors insert, delete and make multi-place changes at random until one is
    # refused; the estimate is never below what pycrdt encodes, the document never past the
    # bound, and a refusal comes with the document measured within one change of it.
    config = YRoomsConfig(max_document_bytes=48 * 1024, compact_every=64)
    rng = random.Random(seed)
    rooms = YRooms(hub, config)
    try:
        clients = [await Client(rooms, f"c{i}").join() for i in range(3)]
        room = room_of(rooms, "room")
        refused = 0
        for step in range(3000):
            client = rng.choice(clients)
            length = len(client.text)

            def change(c: Client, n: int = length) -> None:
                roll = rng.random()
                if roll < 0.75 or n < 40:
                    c.text.insert(rng.randint(0, n), "ab" * rng.randint(1, 150))
                elif roll < 0.95:
                    at = rng.randrange(n - 20)
                    del c.text[at : at + rng.randint(1, 20)]
                else:
                    with c.doc.transaction():
                        for _ in range(10):
                            at = rng.randrange(len(c.text) - 2)
                            del c.text[at : at + 1]
                            c.text.insert(rng.randrange(len(c.text)), "q")

            try:
                await client.edit(change)
            except DocumentTooLarge as exc:
                refused += 1
                assert str(exc).startswith("document full")
                # Refused on a measurement, not on the estimate alone.
                assert room.document_bytes == len(room.doc.get_update())
                clients.remove(client)
                if len(clients) == 1:
                    break
            for other in clients:
                await other.pump()
            actual = len(room.doc.get_update())
            assert room.document_bytes >= actual, step
            assert actual <= config.max_document_bytes + config.delete_allowance, step
        assert refused == 2
    finally:
        await rooms.aclose()


async def test_a_refused_peer_is_closed_with_stream_too_large(hub: MemoryHub) -> None:
    rooms = YRooms(hub, YRoomsConfig(max_document_bytes=4096))
    try:
        alice = await Client(rooms, "alice").join()
        with pytest.raises(DocumentTooLarge) as refused:
            await alice.edit(lambda c: c.text.insert(0, "w" * 5000))
        assert refused.value.code is ErrorCode.STREAM_TOO_LARGE
        bob = await Client(rooms, "bob").join()
        assert bob.state()["text"] == ""
    finally:
        await rooms.aclose()


# -- the arithmetic ------------------------------------------------------------------------------


def test_growth_of_structs_and_deletions() -> None:
    doc: Doc[Any] = Doc(client_id=2**31 + 5)
    text = doc.get("text", type=Text)
    text.insert(0, "hello world " * 100)
    server: Doc[Any] = Doc()
    server.apply_update(doc.get_update())
    changes: list[bytes] = []
    doc.observe(lambda event: changes.append(event.update))

    def measured(change: Any) -> tuple[int, int]:
        """(growth counted, growth encoded) of one change applied to the server."""
        changes.clear()
        with doc.transaction():
            change()
        growth = growth_of(changes[0], server.get_state())
        size = len(server.get_update())
        server.apply_update(changes[0])
        return growth.bytes(), len(server.get_update()) - size

    counted, grew = measured(lambda: text.insert(3, "X"))  # splits an item
    assert grew <= counted <= STRUCT_FACTOR * len(changes[0])
    counted, grew = measured(lambda: text.__delitem__(slice(100, 103)))
    assert counted == RANGE_BYTES and grew <= counted
    counted, grew = measured(lambda: text.__delitem__(slice(200, 900)))  # frees content
    assert grew < 0 < counted
    # A peer's sync step 2 carries its whole delete set and nothing new.
    step2 = doc.get_update(server.get_state())
    growth = growth_of(step2, server.get_state())
    assert growth.only_deletes and growth.deleted is not None
    known = delete_set_of(server.get_update(server.get_state()))
    assert new_ranges(growth.deleted, known) == 0 and growth.bytes(0) == 0
    ranges = sum(map(len, growth.deleted.values()))
    assert ranges and growth.bytes() == RANGE_BYTES * ranges  # as new, it would not be nothing


def test_delete_set_of_merges_and_new_ranges_checks_containment() -> None:
    doc: Doc[Any] = Doc(client_id=7)
    text = doc.get("text", type=Text)
    text.insert(0, "abcdefghijklmnopqrstuvwxyz")
    del text[20:22]
    del text[2:4]
    del text[2:3]  # "e": next to the first range, which yrs may keep apart
    known = delete_set_of(doc.get_update(doc.get_state()))
    assert known == {7: [(2, 3), (20, 2)]}
    assert new_ranges({7: [(2, 2), (21, 1)]}, known) == 0
    assert new_ranges({7: [(1, 2), (22, 1)], 8: [(0, 1)]}, known) == 3


def test_pending_of_an_update_missing_its_predecessor() -> None:
    writer: Doc[Any] = Doc(client_id=9)
    text = writer.get("text", type=Text)
    text.insert(0, "first")
    first = writer.get_update()
    before = writer.get_state()
    text.insert(5, "second" * 50)
    second = writer.get_update(before)
    doc: Doc[Any] = Doc()
    doc.apply_update(second)
    assert str(doc.get("text", type=Text)) == ""
    assert pending_of(second, doc.get_state()) == len(second)
    doc.apply_update(first)
    assert pending_of(second, doc.get_state()) == 0
