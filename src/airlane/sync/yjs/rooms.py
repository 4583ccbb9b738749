"""`YRooms`: the Yjs rooms of one node, bounded.

A room opens (loads from the hub) when its first peer joins, and closes (compacting into the
hub) `YRoomsConfig.idle_close_s` after its last peer left, or when it loses its hub stream.
Peers that join a room while it opens wait for that one opening. Every room, and every closing
under way, is owned here and finished by `YRooms.aclose`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from airlane.core.errors import ErrorCode
from airlane.core.scope import split_scope
from airlane.hub import Hub
from airlane.sync.yjs.config import YRoomsConfig, valid_room_name
from airlane.sync.yjs.errors import InvalidRoomName, RoomsClosed, TooManyRooms
from airlane.sync.yjs.peer import YPeer
from airlane.sync.yjs.room import YRoom

__all__ = ["YRooms"]


class YRooms:
    """The Yjs rooms of one node, on one hub. See the module docstring.

    Use `connect` (an async context manager) or `join` / `leave`; close with `aclose`.
    """

    def __init__(self, hub: Hub, config: YRoomsConfig | None = None) -> None:
        self.hub = hub
        self.config = config or YRoomsConfig()
        self._rooms: dict[str, YRoom] = {}
        self._opening: dict[str, asyncio.Event] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self._closed = False

    def __len__(self) -> int:
        return len(self._rooms)

    def get(self, name: str) -> YRoom | None:
        """The open room called ``name``, if any."""
        return self._rooms.get(name)

    def peer(self, name: str = "", *, can_write: bool = True) -> YPeer:
        """A new peer with this node's queue bounds."""
        return YPeer(
            name,
            can_write=can_write,
            max_queued_messages=self.config.max_queued_messages,
            max_queued_bytes=self.config.max_queued_bytes,
        )

    @contextlib.asynccontextmanager
    async def connect(self, name: str, peer: YPeer) -> AsyncIterator[YRoom]:
        """``peer`` in room ``name`` for the duration of the block."""
        room = await self.join(name, peer)
        try:
            yield room
        finally:
            await room.remove(peer)

    async def join(self, name: str, peer: YPeer) -> YRoom:
        """Put ``peer`` in room ``name``, opening the room (loading it from the hub) if it is
        not open on this node. Raises `InvalidRoomName`, `TooManyRooms`, `RoomFull`,
        `RoomsClosed` or the hub's errors."""
        if not valid_room_name(split_scope(name)[1]):  # a tenant's room: the name in its scope
            raise InvalidRoomName(
                f"invalid room name {name[:80]!r}: use 1-180 of A-Z a-z 0-9 . _ : / -"
            )
        room = await self._open(name)
        room.add(peer)
        return room

    async def _open(self, name: str) -> YRoom:
        while True:
            if self._closed:
                raise RoomsClosed("the Yjs rooms of this node are shutting down")
            room = self._rooms.get(name)
            if room is not None and not room.closing:
                return room
            opening = self._opening.get(name)
            if opening is None:
                break
            # Another peer is opening it: wait, then look again (and open it ourselves if
            # that failed: its error was its own to report).
            await opening.wait()
        if len(self._rooms) + len(self._opening) >= self.config.max_rooms:
            raise TooManyRooms(f"this node holds {self.config.max_rooms} rooms, its limit")
        opened = self._opening[name] = asyncio.Event()
        room = YRoom(name, self.hub, self.config, on_idle=self._retire)
        try:
            await room.open()
        except BaseException:
            await room.aclose()
            raise
        else:
            self._rooms[name] = room
        finally:
            del self._opening[name]
            opened.set()
        return room

    def _retire(self, room: YRoom) -> None:
        """Close ``room`` (idle, or lost its stream) in a task this manager owns."""
        if self._rooms.get(room.name) is room:
            del self._rooms[room.name]
        task = asyncio.create_task(room.aclose(), name=f"yjs close {room.name}")
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def leave(self, room: YRoom, peer: YPeer) -> None:
        """``peer`` left ``room``."""
        await room.remove(peer)

    async def aclose(self) -> None:
        """Close every room (its peers get 1001) and wait for closings under way."""
        self._closed = True
        rooms, self._rooms = list(self._rooms.values()), {}
        for room in rooms:
            await room.aclose(ErrorCode.SHUTTING_DOWN, "server shutting down")
        while self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)
