"""`SharedRooms`: shared state, as every transport reaches it.

Two kinds of room live in the hub: LWW-map rooms (`airlane.sync.rooms`, resource
``rooms/<room>``) and Yjs documents (`airlane.sync.yjs`, resource ``yjs/<room>``). Reading a
room or joining it needs ``subscribe`` on its resource, changing it ``publish``. A room, LWW
or Yjs, is the caller's tenant's (`airlane.gateway.tenancy`): another tenant's room of the same
name is another room. A Yjs peer
without ``publish`` joins read-only (it syncs and sees presence; a change from it is refused
with ``read_only``). The Yjs rooms of a node are made on first use and closed with the gateway.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from airlane.core.errors import ErrorCode
from airlane.gateway.tenancy import client_names, scoped_name
from airlane.hub import Hub
from airlane.security import Action, PermissionDenied, Principal, SecurityPolicy
from airlane.sync.rooms import Room, RoomError, Rooms
from airlane.sync.yjs import InvalidRoomName, YPeer, YRoom, YRooms, YRoomsConfig, valid_room_name
from airlane.sync.yjs.records import doc_stream_id

__all__ = ["ROOM_NAME", "JoinedRoom", "SharedRooms", "room_resource"]

ROOM_NAME = re.compile(r"[A-Za-z0-9._-]{1,150}")
"""What an LWW room's name may look like."""

Listener = Callable[[list[dict[str, Any]]], None]
"""Called with the op dicts a room applied (one call per record); must not block."""


def room_resource(room: str) -> str:
    """The resource the security gate is asked about for LWW room ``room``."""
    return f"rooms/{room}"


class JoinedRoom:
    """One client in one LWW room: its state, its changes, and leaving."""

    def __init__(
        self, rooms: SharedRooms, room: Room, name: str, principal: Principal, listener: Listener
    ) -> None:
        self._rooms = rooms
        self._room = room
        self._name = name
        self._principal = principal
        self._listener = listener

    @property
    def name(self) -> str:
        """The room's name, as its client calls it."""
        return self._name

    def state(self) -> dict[str, Any]:
        """The room's state now: ``{"entries", "version", "state"}``."""
        return self._room.state()

    async def lost(self) -> None:
        """Return once the room can serve this client no more (its stream is gone): the
        client must reconnect."""
        await self._room.lost.wait()

    async def submit(self, ops: Any) -> int:
        """Apply a client's operations (``publish`` on the room); how many were taken."""
        return await self._rooms.submit(self._principal, self._name, ops)

    def leave(self) -> None:
        """Stop relaying changes to this client."""
        self._rooms.lww.leave(self._room, self._listener)


class SharedRooms:
    """The room operations; see the module docstring."""

    def __init__(self, hub: Hub, security: SecurityPolicy, *, node: str = "local") -> None:
        self._hub = hub
        self._security = security
        self.lww = Rooms(hub, node=node)
        """This node's LWW rooms (`airlane.sync.rooms.Rooms`)."""
        self._yjs: YRooms | None = None
        self.yjs_config = YRoomsConfig()
        """Bounds of this node's Yjs rooms (read when the first one opens)."""

    # -- LWW-map rooms ----------------------------------------------------------------------

    def _allow(self, principal: Principal, action: Action, name: str) -> str:
        """Authorize ``action`` on room ``name``; the key its tenant keeps it under."""
        if not ROOM_NAME.fullmatch(name):
            raise RoomError(
                "a room name is 1-150 of A-Z a-z 0-9 . _ -", code=ErrorCode.INVALID_ROOM
            )
        self._security.authorize(principal, action, room_resource(name))
        return scoped_name(principal, name)

    async def state(self, principal: Principal, name: str) -> dict[str, Any]:
        """Room ``name``'s state (opening it on this node if needed)."""
        key = self._allow(principal, Action.ROOMS_READ, name)
        with client_names(key, name):
            return await self.lww.state(key)

    async def submit(self, principal: Principal, name: str, ops: Any) -> int:
        """Apply operations to room ``name``; how many were taken (once stored)."""
        key = self._allow(principal, Action.ROOMS_WRITE, name)
        with client_names(key, name):
            return await (await self.lww.room(key)).submit(ops)

    async def join(self, principal: Principal, name: str, listener: Listener) -> JoinedRoom:
        """Follow room ``name``: ``listener`` gets every change from any client on any node
        until `JoinedRoom.leave`."""
        key = self._allow(principal, Action.ROOMS_READ, name)
        with client_names(key, name):
            room = await self.lww.room(key)
        self.lww.join(room, listener)
        return JoinedRoom(self, room, name, principal, listener)

    # -- Yjs documents ----------------------------------------------------------------------

    @property
    def yjs(self) -> YRooms:
        """This node's Yjs rooms (made now if need be)."""
        if self._yjs is None:
            self._yjs = YRooms(self._hub, self.yjs_config)
        return self._yjs

    async def join_yjs(self, principal: Principal, name: str) -> tuple[YRoom, YPeer]:
        """Put a new peer for ``principal`` in Yjs room ``name``: read-only unless it may
        ``rooms.write`` there. Raises `airlane.sync.yjs.YjsError`s (a bad name, a full room or
        node, shutting down), the gate's refusal, or the hub's errors."""
        if not valid_room_name(name):
            raise InvalidRoomName(f"invalid room name {name[:80]!r}")
        resource = doc_stream_id(name)
        self._security.authorize(principal, Action.ROOMS_READ, resource)
        try:
            self._security.authorize(principal, Action.ROOMS_WRITE, resource)
        except PermissionDenied:
            can_write = False
        else:
            can_write = True
        rooms = self.yjs
        peer = rooms.peer(principal.name, can_write=can_write)
        key = scoped_name(principal, name)  # the tenant's own room of that name
        with client_names(key, name):
            return await rooms.join(key, peer), peer

    async def aclose(self) -> None:
        """Close every room (Yjs peers are told the node is shutting down)."""
        yjs, self._yjs = self._yjs, None
        if yjs is not None:
            await yjs.aclose()
        await self.lww.aclose()
