"""Rooms over HTTP and WebSocket: shared `LWWMap` state (`airlane.sync.rooms`).

- ``GET  /v1/rooms/{room}``        the room's state: ``{"entries", "version", "state"}``
- ``POST /v1/rooms/{room}/ops``    ``{"ops": [...]}``: apply operations (202 once stored)
- ``WS   /v1/rooms/{room}``        JSON text messages. The server sends ``{"type": "state",
  ...}`` first, then ``{"type": "ops", "ops": [...]}`` for every change from any client on any
  node; a client sends ``{"type": "ops", "ops": [...]}`` and gets ``{"type": "ack", "count"}``
  or ``{"type": "error", "code", "message"}`` (the socket stays open). Binary frames close
  with 1003; a client that does not read its messages is closed with 4503 (``too_slow``: try
  again later) rather than buffered without bound.

An op is `airlane.sync.ops.Op.to_dict`'s form: ``{"action": "set" | "delete", "stamp":
"<hlc>", "key": "...", "value": ...}``, made by the client's own `airlane.sync.lww.LWWMap`.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import orjson

from airlane.core.errors import AirlaneError, BadRequest, ErrorCode, NotFound
from airlane.gateway import JoinedRoom, Principal
from airlane.transports.http.asgi import (
    Receive,
    Request,
    Send,
    allow_methods,
    read_json,
    send_json,
)
from airlane.transports.http.auth import authenticate
from airlane.transports.http.context import AppContext
from airlane.transports.http.errors import close_code
from airlane.transports.http.websocket import accept, close_within, refuse

__all__ = ["MAX_PENDING_MESSAGES", "handle_rooms", "room_name", "serve_room"]

MAX_PENDING_MESSAGES = 1024
"""Messages waiting for one slow WebSocket client before it is closed."""
MAX_MESSAGE_BYTES = 1 << 20
"""Largest message a client may send."""


def room_name(path: str) -> tuple[str, str]:
    """``(room, action)`` of a ``/v1/rooms/...`` path (the gateway checks the name)."""
    name, _, action = path[len("/v1/rooms/") :].partition("/")
    return name, action


async def handle_rooms(
    app: AppContext, principal: Principal, request: Request, receive: Receive, send: Send
) -> None:
    """The HTTP part: a room's state, and operations sent without a WebSocket."""
    name, action = room_name(request.path)
    rooms = app.gateway.rooms
    if action == "":
        allow_methods(request.method, "GET")
        await send_json(send, 200, await rooms.state(principal, name))
    elif action == "ops":
        allow_methods(request.method, "POST")
        body = await read_json(receive, app.config.max_body_bytes)
        ops = body.get("ops") if isinstance(body, dict) else None
        await send_json(send, 202, {"accepted": await rooms.submit(principal, name, ops)})
    else:
        raise NotFound(f"no room resource {action[:40]!r}")


async def serve_room(app: AppContext, request: Request, receive: Receive, send: Send) -> None:
    """The WebSocket part (see the module docstring)."""
    socket: _RoomSocket | None = None
    try:
        name, action = room_name(request.path)
        if action:
            raise NotFound("a room's WebSocket is /v1/rooms/{room}")
        principal = authenticate(app.gateway, app.config, request)
        socket = _RoomSocket(send)
        joined = await app.gateway.rooms.join(principal, name, socket.relay)
    except AirlaneError as exc:
        if await accept(receive, send, None):
            await refuse(send, exc)
        return
    try:
        if await accept(receive, send, None):
            await socket.run(joined, receive)
    finally:
        joined.leave()


class _RoomSocket:
    """One client of one room: a bounded outbox, a writer task, a reader task."""

    def __init__(self, send: Send) -> None:
        self.send = send
        self.outbox: asyncio.Queue[bytes] = asyncio.Queue(MAX_PENDING_MESSAGES)
        self.too_slow = False
        self._writer: asyncio.Task[None] | None = None

    def relay(self, ops: list[dict[str, Any]]) -> None:
        """The room's listener: queue the change for this client; one whose outbox is full
        is closed as too slow."""
        if self.too_slow:
            return
        try:
            self.outbox.put_nowait(orjson.dumps({"type": "ops", "ops": ops}))
        except asyncio.QueueFull:
            self.too_slow = True
            if self._writer is not None:
                # It may wait on a socket the client does not read: stopped now, not when
                # (if ever) the client reads again.
                self._writer.cancel()

    async def run(self, room: JoinedRoom, receive: Receive) -> None:
        """Send the room's state, then relay both ways until the client leaves or is too
        slow."""
        state = orjson.dumps({"type": "state", **room.state()})
        writer = asyncio.create_task(self._write(state), name=f"room {room.name} writer")
        reader = asyncio.create_task(self._read(room, receive), name=f"room {room.name} reader")
        lost = asyncio.create_task(room.lost(), name=f"room {room.name} lost")
        self._writer = writer
        tasks = (reader, writer, lost)
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if self.too_slow:
            reason = "too slow: messages were not read in time"
            await close_within(self.send, close_code(ErrorCode.TOO_SLOW), reason)
        elif lost.done() and not lost.cancelled():
            reason = "the room's stream is gone; reconnect"
            await close_within(self.send, close_code(ErrorCode.ROOM_UNAVAILABLE), reason)

    async def _write(self, state: bytes) -> None:
        message = state
        while True:
            await self.send({"type": "websocket.send", "text": message.decode()})
            message = await self.outbox.get()

    async def _read(self, room: JoinedRoom, receive: Receive) -> None:
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                return
            if message.get("bytes") is not None:
                wrong = AirlaneError("send JSON text messages", code=ErrorCode.UNSUPPORTED)
                await refuse(self.send, wrong)
                return
            reply = await self._handle(room, message.get("text") or "")
            await self.outbox.put(orjson.dumps(reply))

    async def _handle(self, room: JoinedRoom, text: str) -> dict[str, Any]:
        try:
            if len(text) > MAX_MESSAGE_BYTES:
                raise BadRequest("message too large", code=ErrorCode.BODY_TOO_LARGE)
            try:
                body = orjson.loads(text)
            except orjson.JSONDecodeError:
                raise BadRequest("not JSON", code=ErrorCode.INVALID_JSON) from None
            if not isinstance(body, dict) or body.get("type") != "ops":
                raise BadRequest("send {'type': 'ops', 'ops': [...]}")
            count = await room.submit(body.get("ops"))
        except AirlaneError as exc:
            return {"type": "error", "code": exc.code.value, "message": str(exc)}
        return {"type": "ack", "count": count}
