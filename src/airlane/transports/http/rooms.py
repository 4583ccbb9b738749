"""Rooms over HTTP and WebSocket: shared `LWWMap` state (`airlane.sync.rooms`).

- ``GET  /v1/rooms/{room}``        the room's state: ``{"entries", "version", "state"}``
- ``POST /v1/rooms/{room}/ops``    ``{"ops": [...]}``: apply operations (202 once stored)
- ``WS   /v1/rooms/{room}``        JSON text messages. The server sends ``{"type": "state",
  ...}`` first, then ``{"type": "ops", "ops": [...]}`` for every change from any client on any
  node; a client sends ``{"type": "ops", "ops": [...]}`` and gets ``{"type": "ack", "count"}``
  or ``{"type": "error", "message"}`` (the socket stays open). Binary frames close with 1003;
  a client that does not read its messages is closed with 1008 rather than buffered without
  bound.

An op is `airlane.sync.ops.Op.to_dict`'s form: ``{"action": "set" | "delete", "stamp":
"<hlc>", "key": "...", "value": ...}``, made by the client's own `airlane.sync.lww.LWWMap`.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from typing import Any

import orjson

from airlane.hub import HubError
from airlane.security import Action, Principal, SecurityError
from airlane.sync.rooms import Room, RoomError, Rooms
from airlane.transports.http.asgi import (
    HttpError,
    Receive,
    Request,
    Send,
    allow_methods,
    read_json,
    send_json,
)
from airlane.transports.http.context import AppContext
from airlane.transports.http.websocket import accept, close

__all__ = ["MAX_PENDING_MESSAGES", "handle_rooms", "room_name", "serve_room"]

MAX_PENDING_MESSAGES = 1024
"""Messages waiting for one slow WebSocket client before it is closed."""
MAX_MESSAGE_BYTES = 1 << 20
"""Largest message a client may send."""
_NAME = re.compile(r"[A-Za-z0-9._-]{1,150}")
CLOSE_TOO_SLOW = 1008


def room_name(path: str) -> tuple[str, str]:
    """``(room, action)`` of a ``/v1/rooms/...`` path; a 400 for a bad room name."""
    rest = path[len("/v1/rooms/") :]
    name, _, action = rest.partition("/")
    if not _NAME.fullmatch(name):
        raise HttpError(400, "a room name is 1-150 of A-Z a-z 0-9 . _ -", code="invalid_room")
    return name, action


def _rooms(app: AppContext) -> Rooms:
    return app.gateway.rooms


async def handle_rooms(
    app: AppContext, principal: Principal, request: Request, receive: Receive, send: Send
) -> None:
    """The HTTP part: a room's state, and operations sent without a WebSocket."""
    name, action = room_name(request.path)
    security = app.gateway.security
    try:
        if action == "":
            allow_methods(request.method, "GET")
            security.authorize(principal, Action.SUBSCRIBE, f"rooms/{name}")
            await send_json(send, 200, await _rooms(app).state(name))
        elif action == "ops":
            allow_methods(request.method, "POST")
            security.authorize(principal, Action.PUBLISH, f"rooms/{name}")
            body = await read_json(receive, app.config.max_body_bytes)
            ops = body.get("ops") if isinstance(body, dict) else None
            count = await (await _rooms(app).room(name)).submit(ops)
            await send_json(send, 202, {"accepted": count})
        else:
            raise HttpError(404, f"no room resource {action[:40]!r}", code="not_found")
    except RoomError as exc:
        raise HttpError(exc.status, str(exc), code=exc.code) from None


async def serve_room(app: AppContext, request: Request, receive: Receive, send: Send) -> None:
    """The WebSocket part (see the module docstring)."""
    try:
        name, action = room_name(request.path)
        if action:
            raise HttpError(404, "a room's WebSocket is /v1/rooms/{room}")
        principal = app.gateway.security.authenticate(
            request.bearer or request.query.get("access_token")
        )
        app.gateway.security.authorize(principal, Action.SUBSCRIBE, f"rooms/{name}")
    except HttpError as exc:
        if await accept(receive, send, None):
            await close(send, 1008, exc.message)
        return
    except SecurityError as exc:
        if await accept(receive, send, None):
            await close(send, exc.close_code, str(exc))
        return
    if not await accept(receive, send, None):
        return
    room = await _rooms(app).room(name)
    await _RoomSocket(app, principal, room, send).run(receive)


class _RoomSocket:
    """One client of one room: a bounded outbox, a writer task, the reader loop."""

    def __init__(self, app: AppContext, principal: Principal, room: Room, send: Send) -> None:
        self.app = app
        self.principal = principal
        self.room = room
        self.send = send
        self.outbox: asyncio.Queue[bytes | None] = asyncio.Queue(MAX_PENDING_MESSAGES)
        self.too_slow = False

    def relay(self, ops: list[dict[str, Any]]) -> None:
        """The room's listener: queue the change for this client (closing a laggard)."""
        try:
            self.outbox.put_nowait(orjson.dumps({"type": "ops", "ops": ops}))
        except asyncio.QueueFull:
            self.too_slow = True
            with contextlib.suppress(asyncio.QueueFull):
                self.outbox.get_nowait()
                self.outbox.put_nowait(None)  # the writer closes the socket

    async def run(self, receive: Receive) -> None:
        rooms = self.app.gateway.rooms
        rooms.join(self.room, self.relay)
        writer = asyncio.create_task(self._write(), name=f"room {self.room.name} writer")
        try:
            await self.send(
                {"type": "websocket.send", "bytes": None,
                 "text": orjson.dumps({"type": "state", **self.room.state()}).decode()}
            )  # fmt: skip
            await self._read(receive)
        finally:
            rooms.leave(self.room, self.relay)
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writer

    async def _write(self) -> None:
        while (message := await self.outbox.get()) is not None:
            await self.send({"type": "websocket.send", "text": message.decode()})
        await close(self.send, CLOSE_TOO_SLOW, "too slow: messages were not read in time")

    async def _read(self, receive: Receive) -> None:
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect" or self.too_slow:
                return
            if message.get("bytes") is not None:
                await close(self.send, 1003, "send JSON text messages")
                return
            reply = await self._handle(message.get("text") or "")
            await self.outbox.put(orjson.dumps(reply))

    async def _handle(self, text: str) -> dict[str, Any]:
        if len(text) > MAX_MESSAGE_BYTES:
            return {"type": "error", "message": "message too large"}
        try:
            body = orjson.loads(text)
        except orjson.JSONDecodeError:
            return {"type": "error", "message": "not JSON"}
        if not isinstance(body, dict) or body.get("type") != "ops":
            return {"type": "error", "message": "send {'type': 'ops', 'ops': [...]}"}
        try:
            self.app.gateway.security.authorize(
                self.principal, Action.PUBLISH, f"rooms/{self.room.name}"
            )
            count = await self.room.submit(body.get("ops"))
        except (RoomError, SecurityError, HubError) as exc:
            return {"type": "error", "message": str(exc)}
        return {"type": "ack", "count": count}
