"""Yjs interoperability: rooms that speak the y-websocket protocol, persisted through the hub.

Existing Yjs editors (``yjs`` + ``y-websocket`` in a browser or under Node) collaborate through
Airlane: `YRooms` holds one pycrdt document per room per node, and every node that has a room
open follows the room's hub streams, so peers on different nodes edit one document.

- `airlane.sync.yjs.protocol`: the y-websocket messages, sans I/O.
- `airlane.sync.yjs.records`: how a room's document and presence are kept in the hub.
- `airlane.sync.yjs.growth`: how much an update adds to a document, told before applying it.
- `airlane.sync.yjs.room`: `YRoom` (loading, relaying, compaction, presence).
- `airlane.sync.yjs.rooms`: `YRooms`, the rooms of one node (bounds, idle close, shutdown).
- `airlane.sync.yjs.peer`: `YPeer`, a client with a bounded send queue.

The WebSocket endpoint is `airlane.transports.http.yjs` (``/v1/yjs/<room>``).
"""

from airlane.sync.yjs.config import ROOM_NAME_PATTERN, YRoomsConfig, valid_room_name
from airlane.sync.yjs.errors import (
    AwarenessTooLarge,
    DocumentTooLarge,
    InvalidRoomName,
    InvalidUpdate,
    MalformedMessage,
    ReadOnlyPeer,
    RoomFull,
    RoomsClosed,
    RoomUnavailable,
    TooManyRooms,
    UnknownMessage,
    YjsError,
    YProtocolError,
)
from airlane.sync.yjs.peer import YPeer
from airlane.sync.yjs.room import YRoom
from airlane.sync.yjs.rooms import YRooms

__all__ = [
    "ROOM_NAME_PATTERN",
    "AwarenessTooLarge",
    "DocumentTooLarge",
    "InvalidRoomName",
    "InvalidUpdate",
    "MalformedMessage",
    "ReadOnlyPeer",
    "RoomFull",
    "RoomUnavailable",
    "RoomsClosed",
    "TooManyRooms",
    "UnknownMessage",
    "YPeer",
    "YProtocolError",
    "YRoom",
    "YRooms",
    "YRoomsConfig",
    "YjsError",
    "valid_room_name",
]
