"""Limits and timers of Yjs rooms."""

from __future__ import annotations

import re
from dataclasses import dataclass

from airlane.core import Retention

__all__ = [
    "DEFAULT_AWARENESS_RETENTION",
    "DEFAULT_AWARENESS_TIMEOUT_S",
    "DEFAULT_COMPACT_EVERY",
    "DEFAULT_IDLE_CLOSE_S",
    "DEFAULT_MAX_AWARENESS_IDS_PER_PEER",
    "DEFAULT_MAX_AWARENESS_STATE_BYTES",
    "DEFAULT_MAX_DOCUMENT_BYTES",
    "DEFAULT_MAX_PEERS_PER_ROOM",
    "DEFAULT_MAX_QUEUED_BYTES",
    "DEFAULT_MAX_QUEUED_MESSAGES",
    "DEFAULT_MAX_REMOTE_AWARENESS_STATES",
    "DEFAULT_MAX_ROOMS",
    "ROOM_NAME_PATTERN",
    "YRoomsConfig",
    "valid_room_name",
]

ROOM_NAME_PATTERN = re.compile(r"[A-Za-z0-9._:/-]{1,180}")
"""A room name: the stream id alphabet, short enough for ``yjs-awareness/`` in front."""

DEFAULT_MAX_ROOMS = 1024
"""Rooms open on one node at once; each holds a document in memory and two hub cursors."""
DEFAULT_MAX_PEERS_PER_ROOM = 256
"""Peers in one room on one node: every change is sent to each, so fan-out is bounded too."""
DEFAULT_COMPACT_EVERY = 256
"""Updates after the latest state record before a node appends a new one. Loading a room reads
at most about this many updates after the state; 256 small Yjs updates cost ~1 ms to apply."""
DEFAULT_IDLE_CLOSE_S = 30.0
"""A room with no peer stays open this long (a reload reconnects within it), then closes."""
DEFAULT_MAX_QUEUED_MESSAGES = 1024
"""Messages waiting for one peer's socket before it is disconnected as too slow."""
DEFAULT_MAX_QUEUED_BYTES = 8 << 20
"""Bytes waiting for one peer's socket before it is disconnected as too slow (one message is
always accepted into an empty queue, so a document larger than this still reaches a peer)."""
DEFAULT_AWARENESS_TIMEOUT_S = 30.0
"""y-protocols' ``outdatedTimeout``: a presence not renewed for this long is dropped (clients
renew theirs every 15 s)."""
DEFAULT_AWARENESS_RETENTION = 256
"""Awareness records a presence stream keeps: presence is ephemeral, nobody reads it back."""
DEFAULT_MAX_DOCUMENT_BYTES = 640 * 1024
"""A document's encoded state (what its state record holds). The record is one hub event, and
in a cluster one broker message (nats-server's ``max_payload``, 1 MiB by default) carrying the
state in base64: 640 KiB, and the 40 KiB that deletions may add past it, make 907 KiB as
stored, which leaves room for what nodes accept at the same moment."""
DEFAULT_MAX_AWARENESS_IDS_PER_PEER = 4
"""Awareness client ids one connection may hold at once. A y-websocket provider announces one
(its document's ``clientID``); the others it sends are echoes of what the room told it, which
are not its own and are not counted."""
DEFAULT_MAX_AWARENESS_STATE_BYTES = 16 * 1024
"""One awareness state, as JSON. Presence is a user's name and colour, a cursor and a selection
(relative positions), a few hundred bytes; 16 KiB leaves room for richer ones."""
DEFAULT_MAX_REMOTE_AWARENESS_STATES = 4096
"""Awareness states a room holds for peers on other nodes (one node's records may claim at
most `YRoomsConfig.max_awareness_ids_per_node` of them)."""


def valid_room_name(name: str) -> bool:
    """True if ``name`` may name a room."""
    return ROOM_NAME_PATTERN.fullmatch(name) is not None


@dataclass(frozen=True, slots=True)
class YRoomsConfig:
    """Limits and timers of the rooms of one node (`airlane.sync.yjs.YRooms`)."""

    max_rooms: int = DEFAULT_MAX_ROOMS
    """Rooms open at once; one more is refused (`TooManyRooms`, close 1013)."""
    max_peers_per_room: int = DEFAULT_MAX_PEERS_PER_ROOM
    """Peers per room; one more is refused (`RoomFull`, close 1013)."""
    compact_every: int = DEFAULT_COMPACT_EVERY
    """Updates after the latest state record before this node appends a new state record."""
    idle_close_s: float = DEFAULT_IDLE_CLOSE_S
    """How long a room without peers stays open."""
    max_queued_messages: int = DEFAULT_MAX_QUEUED_MESSAGES
    """Per peer: queued messages before it is disconnected as too slow (close 4503)."""
    max_queued_bytes: int = DEFAULT_MAX_QUEUED_BYTES
    """Per peer: queued bytes before it is disconnected as too slow (close 4503)."""
    awareness_timeout_s: float = DEFAULT_AWARENESS_TIMEOUT_S
    """Presence of peers on other nodes not renewed for this long is dropped."""
    awareness_retention: int = DEFAULT_AWARENESS_RETENTION
    """Events kept by each room's presence stream."""
    read_batch: int = 64
    """Hub events taken per read when loading and following a room."""
    max_document_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES
    """A document's encoded state; a change that would grow it past this is refused and its
    peer closed (4413). Changes that only delete may take it `delete_allowance` further."""
    max_awareness_ids_per_peer: int = DEFAULT_MAX_AWARENESS_IDS_PER_PEER
    """Awareness client ids one peer may hold; an update claiming more closes it (4400)."""
    max_awareness_state_bytes: int = DEFAULT_MAX_AWARENESS_STATE_BYTES
    """Bytes of one awareness state (its JSON); a peer sending a larger one is closed (4400),
    another node's larger one is skipped."""
    max_remote_awareness_states: int = DEFAULT_MAX_REMOTE_AWARENESS_STATES
    """Awareness states of other nodes' peers a room holds; past it their new ones are
    skipped."""

    def __post_init__(self) -> None:
        for name in (
            "max_rooms",
            "max_peers_per_room",
            "compact_every",
            "max_queued_messages",
            "max_document_bytes",
            "max_awareness_ids_per_peer",
            "max_awareness_state_bytes",
            "max_remote_awareness_states",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"YRoomsConfig.{name} must be at least 1")
        if self.idle_close_s < 0 or self.awareness_timeout_s <= 0:
            raise ValueError("YRoomsConfig timers must be positive")

    @property
    def delete_allowance(self) -> int:
        """How far past `max_document_bytes` changes that only delete may take a document (a
        sixteenth of it): deleting is how a full document is made smaller, but a deletion
        inside an item splits it and adds a few bytes before the content it frees shows."""
        return self.max_document_bytes // 16

    @property
    def max_awareness_ids_per_node(self) -> int:
        """Awareness client ids one other node's records may make a room hold: what that
        node's own peers could hold (`max_peers_per_room` x `max_awareness_ids_per_peer`)."""
        return self.max_peers_per_room * self.max_awareness_ids_per_peer

    @property
    def max_removed_awareness_ids(self) -> int:
        """Removed awareness client ids whose clock a room remembers (for
        `awareness_timeout_s`, so a late echo of a state cannot bring it back): as many as it
        may hold live ones."""
        return self.max_awareness_ids_per_node + self.max_remote_awareness_states

    @property
    def doc_retention(self) -> Retention:
        """Retention of a document stream: four compaction periods and some slack.

        A reader needs the latest state record and every update after the seq it covers. A
        state record is appended once `compact_every` updates follow the previous one, so
        about `compact_every` updates (plus those appended on other nodes while it was
        written) follow it; four times that keeps it with room to spare for nodes whose
        followers lag. No time limit: a document outlives any TTL. Records carry their bytes in
        ``data``, which `Event.size` does not count, so the event count is the binding limit.
        """
        return Retention(max_events=4 * self.compact_every + 64, max_bytes=1 << 40, ttl_s=None)

    @property
    def awareness_retention_policy(self) -> Retention:
        """Retention of a presence stream: a few hundred events, nothing older than a minute."""
        return Retention(max_events=self.awareness_retention, max_bytes=1 << 40, ttl_s=60.0)
