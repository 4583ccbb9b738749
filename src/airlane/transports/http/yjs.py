"""``/v1/yjs/<room>``: Yjs rooms over WebSocket, in the y-websocket protocol.

A Yjs editor connects with y-websocket's provider, whose URL is ``serverUrl + "/" + room``::

    new WebsocketProvider("ws://host:port/v1/yjs", "my-room", doc,
                          { params: { access_token: KEY } })   // or an Authorization header

Binary messages only (`airlane.sync.yjs.protocol`); the rooms are `airlane.sync.yjs.YRooms`. The
principal needs ``subscribe`` on the stream ``yjs/<room>`` to connect and ``publish`` on it to
change the document (without it the peer is read-only: it syncs, sees presence, and is closed
with 4403 if it sends a change).

The socket is closed with a code and a reason, never a traceback:

====== =============================================================================
1001   the node is shutting down, or the room was closed under the peer
1003   a text message
1009   a message over `HttpConfig.max_ws_message_bytes`
1011   a bug on this side (logged here)
1013   a bound (rooms per node, peers per room) or the hub not answering: retry later
4400   a malformed or unknown message, an undecodable update, a bad room name
4401   missing or refused credentials; 4403: not allowed (subscribe, or a change while
       read-only)
4503   the peer read too slowly and its send queue overflowed (reconnect resyncs it)
====== =============================================================================

Codes 4400-4499 stop a y-websocket 3.x provider from reconnecting; every other code makes it
reconnect and resync.

Each socket has two tasks: the reader (the handler's messages go to the room in order, so a
peer's changes are applied and appended one at a time, which is its backpressure) and the
single writer, which drains the peer's bounded queue (`airlane.sync.yjs.YPeer`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from airlane.hub import HubError
from airlane.security import Action, Principal, SecurityError
from airlane.sync.yjs import (
    CLOSE_INTERNAL_ERROR,
    CLOSE_MESSAGE_TOO_BIG,
    CLOSE_TRY_AGAIN_LATER,
    CLOSE_UNSUPPORTED_DATA,
    InvalidRoomName,
    YjsError,
    YPeer,
    YRoom,
    YRooms,
    YRoomsConfig,
    valid_room_name,
)
from airlane.sync.yjs.records import doc_stream_id
from airlane.transports.http.asgi import Receive, Request, Send
from airlane.transports.http.context import AppContext
from airlane.transports.http.websocket import accept, close
from airlane.transports.http.ws_protocol import SEND_MANY, SEND_MANY_TYPE

__all__ = ["CLOSE_TIMEOUT_S", "YJS_PATH_PREFIX", "YjsEndpoint", "serve_yjs"]

log = logging.getLogger("airlane.yjs")

YJS_PATH_PREFIX = "/v1/yjs/"
"""WebSocket paths under this prefix are Yjs rooms: ``/v1/yjs/<room>``."""
CLOSE_TIMEOUT_S = 5.0
"""How long sending our close frame may take (a peer too slow to read may never take it)."""


class YjsEndpoint:
    """The ``/v1/yjs/<room>`` endpoint of one application: its `YRooms`, made on first use
    (an app that never serves Yjs holds none) and closed by `aclose` on shutdown."""

    def __init__(self, app: AppContext, config: YRoomsConfig | None = None) -> None:
        self.app = app
        self.config = config or YRoomsConfig()
        self._rooms: YRooms | None = None

    @property
    def rooms(self) -> YRooms:
        """This node's rooms (made now if need be)."""
        if self._rooms is None:
            self._rooms = YRooms(self.app.gateway.hub, self.config)
        return self._rooms

    async def __call__(self, request: Request, receive: Receive, send: Send) -> None:
        """Serve a WebSocket whose path starts with `YJS_PATH_PREFIX`."""
        room = request.path[len(YJS_PATH_PREFIX) :]
        await serve_yjs(self.app, request, receive, send, room, self.rooms)

    async def aclose(self) -> None:
        """Close every room (peers get 1001); a later connection makes new rooms."""
        rooms, self._rooms = self._rooms, None
        if rooms is not None:
            await rooms.aclose()


async def serve_yjs(
    app: AppContext, request: Request, receive: Receive, send: Send, room: str, rooms: YRooms
) -> None:
    """Serve one y-websocket client in room ``room``: handshake, authentication and
    authorization, then messages until either side closes."""
    try:
        if not valid_room_name(room):
            raise InvalidRoomName(f"invalid room name {room[:80]!r}")
        # Browsers cannot set headers on a WebSocket: accept the key as ?access_token= too.
        principal = app.gateway.security.authenticate(
            request.bearer or request.query.get("access_token")
        )
        app.gateway.security.authorize(principal, Action.SUBSCRIBE, doc_stream_id(room))
    except (YjsError, SecurityError) as exc:
        if await accept(receive, send, None):
            await close(send, exc.close_code, str(exc))
        return
    if not await accept(receive, send, None):
        return
    peer = rooms.peer(principal.name, can_write=_may_publish(app, principal, room))
    try:
        joined = await rooms.join(room, peer)
    except YjsError as exc:
        await close(send, exc.close_code, str(exc))
        return
    except HubError as exc:
        await close(send, CLOSE_TRY_AGAIN_LATER, f"the hub cannot open the room: {exc}")
        return
    connections = app.metrics.connections
    connections["yjs"] = connections.get("yjs", 0) + 1
    session = _Session(app, joined, peer, send_many=request.extension(SEND_MANY) is not None)
    try:
        await session.run(receive, send)
    finally:
        connections["yjs"] -= 1
        await joined.remove(peer)
    await session.send_close(send)


def _may_publish(app: AppContext, principal: Principal, room: str) -> bool:
    try:
        app.gateway.security.authorize(principal, Action.PUBLISH, doc_stream_id(room))
    except SecurityError:
        return False
    return True


class _Session:
    """One socket: a reader task feeding the room, a writer task draining the peer."""

    def __init__(self, app: AppContext, room: YRoom, peer: YPeer, *, send_many: bool) -> None:
        self.app = app
        self.room = room
        self.peer = peer
        self.send_many = send_many
        self.disconnected = False

    async def run(self, receive: Receive, send: Send) -> None:
        """Until the client leaves or the peer is closed."""
        reader = asyncio.create_task(self._read(receive), name=f"yjs read {self.peer.name}")
        writer = asyncio.create_task(self._write(send), name=f"yjs write {self.peer.name}")
        # Closing the peer (the room: too slow, shutting down; the reader: a bad message)
        # stops the writer even while it waits on a socket that is not being read.
        self.peer.on_close = writer.cancel
        try:
            await asyncio.wait((reader, writer), return_when=asyncio.FIRST_COMPLETED)
        finally:
            self.peer.on_close = None
            for task in (reader, writer):
                task.cancel()
            for task in (reader, writer):
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def send_close(self, send: Send) -> None:
        """Close the socket with the peer's close code, unless the client left first."""
        peer = self.peer
        if self.disconnected or peer.close_code is None:
            return
        # The writer has stopped: this is the only write now. A peer too slow to read may not
        # take even the close frame; the server drops the connection when we return.
        with contextlib.suppress(TimeoutError, OSError):
            async with asyncio.timeout(CLOSE_TIMEOUT_S):
                await close(send, peer.close_code, peer.close_reason)

    async def _read(self, receive: Receive) -> None:
        limit = self.app.config.max_ws_message_bytes
        peer = self.peer
        while not peer.closed:
            message = await receive()
            kind = message["type"]
            if kind == "websocket.disconnect":
                self.disconnected = True
                return
            if kind != "websocket.receive":
                continue
            data = message.get("bytes")
            if data is None:
                peer.close(CLOSE_UNSUPPORTED_DATA, "y-websocket messages are binary")
            elif len(data) > limit:
                peer.close(CLOSE_MESSAGE_TOO_BIG, f"message over {limit} bytes")
            else:
                await self._handle(data)

    async def _handle(self, data: bytes) -> None:
        try:
            await self.room.receive(self.peer, data)
        except YjsError as exc:
            self.peer.close(exc.close_code, str(exc))
        except HubError as exc:
            self.peer.close(CLOSE_TRY_AGAIN_LATER, f"the hub did not take the change: {exc}")
        except Exception:
            # Reached only by a bug: logged here with its traceback, never sent out.
            log.exception("room %s: unhandled error on a message", self.room.name)
            self.peer.close(CLOSE_INTERNAL_ERROR, "internal error")

    async def _write(self, send: Send) -> None:
        metrics = self.app.metrics
        try:
            while messages := await self.peer.next_messages():
                if self.send_many:
                    await send({"type": SEND_MANY_TYPE, "bytes": messages})
                else:
                    for message in messages:
                        await send({"type": "websocket.send", "bytes": message})
                metrics.count_sent(sum(map(len, messages)))
        except OSError:  # the server's ClientDisconnected (the socket is closing or gone)
            self.disconnected = True
