"""What can go wrong in a Yjs room, by its code (`airlane.core.errors.ErrorCode`).

Exceptions::

    YjsError                  base; ``code`` and ``str()`` are what the peer is told
    ├── YProtocolError        the peer sent something that is not the y-websocket protocol
    │   ├── MalformedMessage  truncated, overlong or otherwise unreadable framing
    │   ├── UnknownMessage    a message type or sync step this server does not take
    │   ├── InvalidUpdate     a CRDT update or state vector the document cannot decode
    │   └── AwarenessTooLarge presence past its bounds: more client ids than a peer may
    │                         hold, or a state over the size limit
    │                         (all four: invalid_message)
    ├── ReadOnlyPeer          the peer may read the room but sent a change to it (read_only)
    ├── DocumentTooLarge      a change would grow the document past its bound
    │                         (stream_too_large)
    ├── InvalidRoomName       not a room name (invalid_room)
    └── RoomUnavailable       a bound or shutdown keeps the peer out for now (room_unavailable)
        ├── TooManyRooms      the node holds its limit of open rooms
        ├── RoomFull          the room holds its limit of peers
        └── RoomsClosed       the node is shutting down (shutting_down)

The rooms know nothing of WebSocket close codes: the endpoint that serves them
(`airlane.transports.http.yjs`) turns each code into y-websocket's close code, where
4400-4499 is a decision reconnecting cannot change and every other code is transient.
"""

from __future__ import annotations

from airlane.core.errors import AirlaneError, ErrorCode

__all__ = [
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
    "YProtocolError",
    "YjsError",
]


class YjsError(AirlaneError):
    """Base of the errors a room reports to a peer; ``code`` says what went wrong."""

    code = ErrorCode.INTERNAL_ERROR


class YProtocolError(YjsError):
    """Remote misbehaviour: the peer sent bytes that are not a y-websocket message."""

    code = ErrorCode.INVALID_MESSAGE


class MalformedMessage(YProtocolError):
    """Truncated, overlong or otherwise unreadable framing."""


class UnknownMessage(YProtocolError):
    """A well-framed message of a type (or sync step) this server does not accept."""


class InvalidUpdate(YProtocolError):
    """A CRDT update or state vector that the document cannot decode."""


class AwarenessTooLarge(YProtocolError):
    """An awareness update that would make the peer hold more client ids than
    `YRoomsConfig.max_awareness_ids_per_peer`, or carries a state larger than
    `YRoomsConfig.max_awareness_state_bytes`. Not applied; the peer is closed (4400: sending
    it again after a reconnect would be refused again)."""


class ReadOnlyPeer(YjsError):
    """The peer may subscribe to the room but not publish to it, and sent a change."""

    code = ErrorCode.READ_ONLY


class DocumentTooLarge(YjsError):
    """A change would grow the document past `YRoomsConfig.max_document_bytes` (its state
    record must fit in one hub event). Not applied; the peer is closed (4413: its document
    holds the change, and would send it again after a reconnect)."""

    code = ErrorCode.STREAM_TOO_LARGE


class InvalidRoomName(YjsError):
    """Not a room name (see `airlane.sync.yjs.config.ROOM_NAME_PATTERN`)."""

    code = ErrorCode.INVALID_ROOM


class RoomUnavailable(YjsError):
    """A bound keeps the peer out for now; it may try again later."""

    code = ErrorCode.ROOM_UNAVAILABLE


class TooManyRooms(RoomUnavailable):
    """This node holds `YRoomsConfig.max_rooms` open rooms."""


class RoomFull(RoomUnavailable):
    """The room holds `YRoomsConfig.max_peers_per_room` peers."""


class RoomsClosed(RoomUnavailable):
    """The room manager is shutting down."""

    code = ErrorCode.SHUTTING_DOWN
