"""``/v1/yjs/<room>``: Yjs rooms over WebSocket, in the y-websocket protocol.

A Yjs editor connects with y-websocket's provider, whose URL is ``serverUrl + "/" + room``::

    new WebsocketProvider("ws://host:port/v1/yjs", "my-room", doc,
                          { params: { ticket: TICKET } })   // from POST /v1/tickets

Binary messages only (`airlane.sync.yjs.protocol`); the rooms are `airlane.sync.yjs.YRooms`. The
principal needs ``subscribe`` on the stream ``yjs/<room>`` to connect and ``publish`` on it to
change the document (without it the peer is read-only: it syncs, sees presence, and is closed
with 4403 if it sends a change).

The socket is closed with a code and a reason, never a traceback; the code is the transport's
close code for the refusal's `ErrorCode` (`airlane.transports.http.errors.WS_CLOSE`):

====== =============================================================================
1001   the node is shutting down, or the room was closed under the peer
1003   a text message
1009   a message over `HttpConfig.max_ws_message_bytes`
1011   a bug on this side (logged here)
1013   a bound (rooms per node, peers per room) or the hub not answering: retry later
4400   a malformed or unknown message, an undecodable update, a bad room name, presence
       past its bounds (too many client ids for one connection, a state over the size limit)
4401   missing or refused credentials; 4403: not allowed (subscribe, or a change while
       read-only)
4413   a change that would grow the document past `YRoomsConfig.max_document_bytes`
       (the change is not applied; the provider, whose document holds it, stops there)
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

from airlane.core.errors import AirlaneError, ErrorCode
from airlane.gateway import YPeer, YRoom
from airlane.transports.http.asgi import Receive, Request, Send
from airlane.transports.http.auth import authenticate
from airlane.transports.http.context import AppContext
from airlane.transports.http.errors import close_code
from airlane.transports.http.websocket import CLOSE_TIMEOUT_S, accept, close_within, refuse
from airlane.transports.http.ws_protocol import SEND_MANY, SEND_MANY_TYPE

__all__ = ["CLOSE_TIMEOUT_S", "YJS_PATH_PREFIX", "serve_yjs"]

log = logging.getLogger("airlane.yjs")

YJS_PATH_PREFIX = "/v1/yjs/"
"""WebSocket paths under this prefix are Yjs rooms: ``/v1/yjs/<room>``."""


async def serve_yjs(app: AppContext, request: Request, receive: Receive, send: Send) -> None:
    """Serve one y-websocket client of ``/v1/yjs/<room>``: handshake, authentication and
    joining the room (read-only without ``publish``), then messages until either side
    closes."""
    room = request.path[len(YJS_PATH_PREFIX) :]
    try:
        # Browsers cannot set headers on a WebSocket: a ?ticket= stands for them.
        principal = authenticate(app.gateway, app.config, request)
        joined, peer = await app.gateway.rooms.join_yjs(principal, room)
    except AirlaneError as exc:
        if await accept(receive, send, None):
            await refuse(send, exc)
        return
    connections = app.metrics.connections
    connections["yjs"] = connections.get("yjs", 0) + 1
    session = _Session(app, joined, peer, send_many=request.extension(SEND_MANY) is not None)
    try:
        if await accept(receive, send, None):
            await session.run(receive, send)
    finally:
        connections["yjs"] -= 1
        await joined.remove(peer)
    await session.send_close(send)


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
        # The writer has stopped: this is the only write now.
        await close_within(send, close_code(peer.close_code), peer.close_reason)

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
                peer.close(ErrorCode.UNSUPPORTED, "y-websocket messages are binary")
            elif len(data) > limit:
                peer.close(ErrorCode.BODY_TOO_LARGE, f"message over {limit} bytes")
            else:
                await self._handle(data)

    async def _handle(self, data: bytes) -> None:
        try:
            await self.room.receive(self.peer, data)
        except AirlaneError as exc:
            self.peer.close(exc.code, str(exc))
        except Exception:
            # Reached only by a bug: logged here with its traceback, never sent out.
            log.exception("room %s: unhandled error on a message", self.room.name)
            self.peer.close(ErrorCode.INTERNAL_ERROR, "internal error")

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
