"""What can go wrong in a Yjs room, and the WebSocket close code that reports it.

Exceptions::

    YjsError                  base; ``close_code`` and ``str()`` are what the peer is told
    ├── YProtocolError        the peer sent something that is not the y-websocket protocol
    │   ├── MalformedMessage  truncated, overlong or otherwise unreadable framing (4400)
    │   ├── UnknownMessage    a message type or sync step this server does not take (4400)
    │   └── InvalidUpdate     a CRDT update or state vector the document cannot decode (4400)
    ├── ReadOnlyPeer          the peer may read the room but sent a change to it (4403)
    ├── InvalidRoomName       not a room name (4400)
    └── RoomUnavailable       a bound or shutdown keeps the peer out for now (1013)
        ├── TooManyRooms      the node holds its limit of open rooms
        ├── RoomFull          the room holds its limit of peers
        └── RoomsClosed       the node is shutting down (1001)

Close codes follow y-websocket 3.x's convention (``defaultShouldReconnect``): 4400-4499 is a
decision reconnecting cannot change (the provider stops), every other code is transient (the
provider reconnects with backoff and resyncs from step 1, losing nothing).
"""

from __future__ import annotations

__all__ = [
    "CLOSE_BAD_MESSAGE",
    "CLOSE_FORBIDDEN",
    "CLOSE_GOING_AWAY",
    "CLOSE_INTERNAL_ERROR",
    "CLOSE_MESSAGE_TOO_BIG",
    "CLOSE_NORMAL",
    "CLOSE_TOO_SLOW",
    "CLOSE_TRY_AGAIN_LATER",
    "CLOSE_UNSUPPORTED_DATA",
    "InvalidRoomName",
    "InvalidUpdate",
    "MalformedMessage",
    "ReadOnlyPeer",
    "RoomFull",
    "RoomUnavailable",
    "RoomsClosed",
    "TooManyRooms",
    "UnknownMessage",
    "YProtocolError",
    "YjsError",
]

CLOSE_NORMAL = 1000
"""RFC 6455 7.4.1: normal closure."""
CLOSE_GOING_AWAY = 1001
"""The node is shutting down or the room was closed under the peer; reconnect elsewhere."""
CLOSE_UNSUPPORTED_DATA = 1003
"""A text frame: y-websocket speaks binary messages only."""
CLOSE_MESSAGE_TOO_BIG = 1009
"""A message over the configured size limit."""
CLOSE_INTERNAL_ERROR = 1011
"""A bug on this side; the peer may reconnect."""
CLOSE_TRY_AGAIN_LATER = 1013
"""A capacity bound (rooms, peers per room) or the hub not answering; transient."""
CLOSE_BAD_MESSAGE = 4400
"""The peer broke the protocol. In y-websocket's 4400-4499 range, so the provider does not
reconnect to send the same bytes again."""
CLOSE_FORBIDDEN = 4403
"""A read-only peer sent a change (the same code as a refused credential, `airlane.security`)."""
CLOSE_TOO_SLOW = 4503
"""The peer did not read fast enough and its send queue overflowed. In the 4500-4599 "try again
later" range: the provider reconnects and resyncs from step 1, which is exactly what a peer
that fell behind needs."""


class YjsError(Exception):
    """Base of the errors a room reports to a peer; ``close_code`` says how."""

    close_code = CLOSE_INTERNAL_ERROR


class YProtocolError(YjsError):
    """Remote misbehaviour: the peer sent bytes that are not a y-websocket message."""

    close_code = CLOSE_BAD_MESSAGE


class MalformedMessage(YProtocolError):
    """Truncated, overlong or otherwise unreadable framing."""


class UnknownMessage(YProtocolError):
    """A well-framed message of a type (or sync step) this server does not accept."""


class InvalidUpdate(YProtocolError):
    """A CRDT update or state vector that the document cannot decode."""


class ReadOnlyPeer(YjsError):
    """The peer may subscribe to the room but not publish to it, and sent a change."""

    close_code = CLOSE_FORBIDDEN


class InvalidRoomName(YjsError):
    """Not a room name (see `airlane.sync.yjs.config.ROOM_NAME_PATTERN`)."""

    close_code = CLOSE_BAD_MESSAGE


class RoomUnavailable(YjsError):
    """A bound keeps the peer out for now; it may try again later."""

    close_code = CLOSE_TRY_AGAIN_LATER


class TooManyRooms(RoomUnavailable):
    """This node holds `YRoomsConfig.max_rooms` open rooms."""


class RoomFull(RoomUnavailable):
    """The room holds `YRoomsConfig.max_peers_per_room` peers."""


class RoomsClosed(RoomUnavailable):
    """The room manager is shutting down."""

    close_code = CLOSE_GOING_AWAY
