"""Real Yjs editors through a real server: yjs + y-websocket under Node, and pycrdt over
websockets, against `serve_yjs` on 127.0.0.1 (on Airlane's own server, as `airlane serve` runs
it; one node on uvicorn, a plain ASGI server)."""

from __future__ import annotations

import asyncio
import os
import socket
from typing import Any

from pycrdt import Map
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from airlane.hub import MemoryHub
from airlane.security import Action, PermissionDenied, Principal, Unauthenticated
from airlane.sync.yjs import YRoomsConfig
from airlane.sync.yjs.records import StateRecord, decode_record, doc_stream_id
from airlane.transports.http.config import HttpConfig

from .support import (
    node_client_ok,
    py_client,
    run_node_client,
    running_node,
    state,
)

FAST = YRoomsConfig(idle_close_s=0.2)
"""Rooms close 0.2 s after their last peer left (the persistence tests)."""
KEEP = YRoomsConfig()
"""Rooms stay open after the clients are done, so a test can look at them."""


async def wait_for(check: Any, timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not check():
            await asyncio.sleep(0.01)


async def close_of(ws: ClientConnection, timeout: float = 5.0) -> tuple[int | None, str | None]:
    """Read until the server closes; its close code and reason."""
    async with asyncio.timeout(timeout):
        try:
            async for _ in ws:
                pass
        except ConnectionClosed:
            pass
    return ws.close_code, ws.close_reason


async def test_two_js_clients_collaborate(hub: MemoryHub, node: str) -> None:
    async with running_node(hub, KEEP) as server:
        common = {"url": server.url, "room": "doc-1"}
        alice, bob = await asyncio.gather(
            node_client_ok(
                node,
                **common,
                name="alice",
                text=["alpha "],
                map={"a": 1},
                expectText=["bravo"],
                expectMap=["b"],
                expectPeers=["bob"],
            ),
            node_client_ok(
                node,
                **common,
                name="bob",
                text=["bravo "],
                map={"b": 2},
                expectText=["alpha"],
                expectMap=["a"],
                expectPeers=["alice"],
            ),
        )
        assert alice["text"] == bob["text"] and sorted(alice["text"].split()) == ["alpha", "bravo"]
        assert alice["map"] == bob["map"] == {"a": 1, "b": 2}
        room = server.rooms.get("doc-1")
        assert room is not None
        assert state(room.doc) == {"text": alice["text"], "map": alice["map"]}


async def test_python_and_js_clients_converge(hub: MemoryHub, node: str) -> None:
    async with running_node(hub, KEEP) as server, py_client(server, "mixed", "py") as py:
        py.text.insert(0, "from python ")
        py.map["py"] = True
        await py.flush()
        js = await node_client_ok(
            node,
            url=server.url,
            room="mixed",
            name="js",
            text=["from js"],
            map={"js": 1},
            expectText=["from python"],
            expectMap=["py"],
            expectPeers=["py"],
        )
        await py.wait_until(lambda: "from js" in str(py.text) and "js" in py.map)
        assert state(py.doc) == {"text": js["text"], "map": js["map"]}
        assert js["map"] == {"py": True, "js": 1}


async def test_late_joiner_gets_the_full_state(hub: MemoryHub, node: str) -> None:
    async with running_node(hub, KEEP) as server, py_client(server, "late", "keeper"):
        # The room stays open (a peer is in it) while the first editor comes and goes.
        await node_client_ok(node, url=server.url, room="late", name="w", text=["a", "b", "c"])
        late = await node_client_ok(node, url=server.url, room="late", name="l", expectText=["abc"])
        assert late["text"] == "abc"


async def test_room_closes_and_comes_back_from_the_hub(hub: MemoryHub, node: str) -> None:
    async with running_node(hub, FAST) as server:
        await node_client_ok(
            node, url=server.url, room="kept", name="w", text=["persisted"], map={"k": "v"}
        )
        await wait_for(lambda: server.rooms.get("kept") is None)  # idle close
        stream = await hub.subscribe(doc_stream_id("kept"))
        records = [decode_record(event) for event in stream.poll()]
        await stream.aclose()
        assert isinstance(records[-1], StateRecord)  # the closing room compacted
        back = await node_client_ok(
            node, url=server.url, room="kept", name="r", expectText=["persisted"], expectMap=["k"]
        )
        assert back["map"] == {"k": "v"}


async def test_two_nodes_share_one_hub(hub: MemoryHub, node: str) -> None:
    async with (
        running_node(hub, KEEP) as node_a,
        running_node(hub, KEEP, on_uvicorn=True) as node_b,
    ):
        alice, bob = await asyncio.gather(
            node_client_ok(
                node,
                url=node_a.url,
                room="shared",
                name="alice",
                text=["on A "],
                expectText=["on B"],
                expectPeers=["bob"],
            ),
            node_client_ok(
                node,
                url=node_b.url,
                room="shared",
                name="bob",
                text=["on B "],
                expectText=["on A"],
                expectPeers=["alice"],
            ),
        )
        assert alice["text"] == bob["text"]
        room_a, room_b = node_a.rooms.get("shared"), node_b.rooms.get("shared")
        assert room_a is not None and room_b is not None and room_a is not room_b
        await wait_for(lambda: state(room_a.doc) == state(room_b.doc))


async def test_compaction_with_js_editors(hub: MemoryHub, node: str) -> None:
    config = YRoomsConfig(compact_every=8, idle_close_s=0.2)
    pieces = [f"<{i}>" for i in range(120)]
    async with running_node(hub, config) as server:
        await node_client_ok(node, url=server.url, room="long", name="w", text=pieces)
        room = server.rooms.get("long")
        assert room is not None
        await wait_for(lambda: server.rooms.get("long") is None)
        assert room.compactions >= 5
        info = await hub.info(doc_stream_id("long"))
        assert info.first_retained_seq > 1, "the hub folded the oldest records away"
        async with running_node(hub, config) as fresh:
            late = await node_client_ok(
                node, url=fresh.url, room="long", name="l", expectText=[pieces[-1]]
            )
        assert late["text"] == "".join(pieces)


async def test_bad_input_gets_a_close_code_and_the_server_keeps_serving(
    hub: MemoryHub, node: str
) -> None:
    http = HttpConfig(max_ws_message_bytes=64 * 1024)
    async with running_node(hub, KEEP, http=http) as server:
        cases: list[tuple[str, Any, int, str]] = [
            ("r", "a text frame", 1003, "binary"),
            ("r", b"\x07", 4400, "unknown message type 7"),
            ("r", b"\x00\x00\x09ab", 4400, "claims 9 bytes"),
            ("r", b"\x00\x02\x03abc", 4400, "claims 97 entries"),
            ("r", b"\x00\x02\x05\x01\x01\x01\x01\x01", 4400, "cannot be applied"),
            ("r", b"\x01\x03\x05\x01\x01", 4400, "entries"),
            ("r", bytes(100 * 1024), 1009, ""),
            ("bad!name", None, 4400, "invalid room name"),
        ]
        for room, data, code, words in cases:
            async with connect(f"{server.url}/{room}", max_size=None) as ws:
                if data is not None:
                    await ws.send(data)
                got_code, reason = await close_of(ws)
            assert got_code == code, (data, got_code, reason)
            assert words in (reason or ""), (data, reason)
        assert not any("Traceback" in (r or "") for *_, r in cases)
        ok = await node_client_ok(node, url=server.url, room="r", name="after", text=["fine"])
        assert ok["text"] == "fine"


class Keys:
    """Two keys: a writer and a read-only reader."""

    def authenticate(self, bearer: str | None) -> Principal:
        if bearer in ("writer", "reader"):
            return Principal(bearer)
        raise Unauthenticated("missing or invalid key")

    def authorize(self, principal: Principal, action: Action, stream_id: str) -> None:
        if principal.name == "reader" and action in (Action.PUBLISH, Action.ROOMS_WRITE):
            raise PermissionDenied(f"reader may not publish to {stream_id}")


async def test_authentication_and_read_only_peers(hub: MemoryHub, node: str) -> None:
    async with running_node(hub, KEEP, security=Keys()) as server:
        async with connect(f"{server.url}/secret") as ws:
            assert await close_of(ws) == (4401, "missing or invalid key")
        common = {"url": server.url, "room": "secret"}
        # Browsers cannot set headers on a WebSocket: each gets a ticket first (over HTTP,
        # POST /v1/tickets; this test app serves only the Yjs endpoint, so from the gateway).
        gateway = server.app.gateway
        tickets = {
            key: gateway.issue_ticket(gateway.authenticate(key))[0] for key in ("writer", "reader")
        }
        await node_client_ok(
            node, **common, name="w", text=["written"], params={"ticket": tickets["writer"]}
        )
        reader = await node_client_ok(
            node, **common, name="r", expectText=["written"], params={"ticket": tickets["reader"]}
        )
        assert reader["text"] == "written"
        refused = await run_node_client(
            node,
            **common,
            name="r2",
            text=["nope"],
            expectText=["never"],
            params={"ticket": tickets["reader"]},
        )
        assert refused["status"] == 3, refused
        assert refused["code"] == 4403 and "read-only" in refused["reason"]


async def test_a_peer_that_does_not_read_is_disconnected(hub: MemoryHub) -> None:
    config = YRoomsConfig(
        max_queued_messages=16,
        max_queued_bytes=256 * 1024,
        max_document_bytes=64 << 20,  # the writer writes up to 30 MB
    )
    async with running_node(hub, config) as server, py_client(server, "flood", "writer") as w:
        # A client that stops reading once one message is queued, with a small receive
        # buffer and no compression, so that the server's writes back up soon.
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
        sock.connect(("127.0.0.1", server.port))
        url = f"{server.url}/flood"
        async with connect(url, sock=sock, max_queue=1, compression=None) as slow:
            await wait_for(lambda: (r := server.rooms.get("flood")) is not None and r.peers == 2)
            room = server.rooms.get("flood")
            assert room is not None
            for _ in range(300):  # up to 30 MB; the kernel and the server buffer ~4 MB of it
                w.text.insert(len(w.text), os.urandom(50_000).hex())
                await w.flush()
                await asyncio.sleep(0)
                if room.peers == 1:
                    break
            await wait_for(lambda: room.peers == 1)
            # The writer is still served.
            w.map["still"] = "here"
            await w.flush()
            await wait_for(lambda: room.doc.get("map", type=Map).get("still") == "here")
            # The close frame waits behind what the client has not read (4503 once it reads
            # it all; the server gives up on it after CLOSE_TIMEOUT_S).
            assert slow.close_code is None or slow.close_code in (4503, 1006)
            slow.transport.abort()  # it would wait for the close handshake it cannot read


async def test_each_tenant_has_its_own_room_of_a_name(hub: MemoryHub) -> None:
    from airlane.security import ApiKeyPolicy

    from .support import PyClient

    keys = ApiKeyPolicy({"sk-a": "alice", "sk-b": "bob"})
    async with running_node(hub, KEEP, security=keys) as server:

        async def editor(key: str) -> PyClient:
            ws = await connect(
                f"{server.url}/notes", additional_headers={"authorization": f"Bearer {key}"}
            )
            client = PyClient(ws, key)
            await client.start()
            await asyncio.wait_for(client.synced.wait(), 10)
            return client

        alice = await editor("sk-a")
        alice.text.insert(0, "alice's notes")
        await alice.flush()
        again = await editor("sk-a")  # the same tenant: the same room
        await again.wait_until(lambda: str(again.text) == "alice's notes")
        bob = await editor("sk-b")  # another tenant: a room of his own, empty
        assert str(bob.text) == ""
        bob.text.insert(0, "BOB")
        await bob.flush()
        for client in (alice, again, bob):
            await client.aclose()
    # Kept apart in the hub: alice's and bob's streams of the same room name.
    assert (await hub.info("@alice/yjs/notes")).last_seq >= 1
    assert (await hub.info("@bob/yjs/notes")).last_seq >= 1
    assert str(alice.text) == "alice's notes"


async def test_a_bound_closes_with_1013_and_a_yjs_editor_gets_in_once_there_is_room(
    hub: MemoryHub, node: str
) -> None:
    config = YRoomsConfig(max_rooms=1, max_peers_per_room=1, idle_close_s=0.2)
    async with running_node(hub, config) as server:
        async with py_client(server, "a", "first"):
            async with connect(f"{server.url}/a") as second:
                code, reason = await close_of(second)
            assert (code, reason) == (1013, "room 'a' holds 1 peers, its limit"), reason
            async with connect(f"{server.url}/b") as third:
                code, reason = await close_of(third)
            assert code == 1013 and "1 rooms, its limit" in (reason or ""), reason
            # A real editor told 1013 tries again (y-websocket reconnects on any code outside
            # 4400-4499), and gets in once the first peer has left.
            later = asyncio.create_task(
                run_node_client(node, url=server.url, room="a", name="later", text=["in"])
            )
            await asyncio.sleep(1.5)  # several tries, each refused
            assert not later.done()
        result = await later
    assert (result["status"], result["text"]) == (0, "in"), result
