"""Which gateway nodes are alive, which streams each produces, and where streams have readers.

Pure bookkeeping (time is passed in). Every node publishes a heartbeat on
``<prefix>.ctl.hb`` each `JetStreamHubConfig.heartbeat_s` (and at once when a stream gains its
first or loses its last local reader): its id, the streams whose producer it runs, and its
reader count per stream. From them each node knows

- when another node died (silent for ``node_timeout_s``): the streams it produced can never
  end normally, so a node reading one ends it with a ``producer_lost`` error;
- how many nodes read each stream it produces, which its orphan policy needs: a stream read
  only on other nodes is not an orphan.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

__all__ = ["Heartbeat", "NodeTable"]

MAX_ENTRIES = 50_000
"""Most streams one heartbeat lists (readers and producing each); the rest wait for the next."""


@dataclass(slots=True)
class Heartbeat:
    """One node's report."""

    node: str
    readers: dict[str, int] = field(default_factory=dict)
    producing: list[str] = field(default_factory=list)
    partial: bool = False
    """True for a change announcement: streams it omits keep their last known counts."""
    leaving: bool = False
    """The node is shutting down cleanly (no need to wait for its timeout)."""

    def to_bytes(self) -> bytes:
        """The wire form (JSON)."""
        return orjson.dumps(
            {
                "node": self.node,
                "readers": dict(list(self.readers.items())[:MAX_ENTRIES]),
                "producing": self.producing[:MAX_ENTRIES],
                "partial": self.partial,
                "leaving": self.leaving,
            }
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> Heartbeat | None:
        """Parse a heartbeat; None for anything malformed (it is ignored, not fatal)."""
        try:
            raw: Any = orjson.loads(data)
            readers = {str(k): int(v) for k, v in dict(raw.get("readers") or {}).items()}
            producing = [str(s) for s in raw.get("producing") or []]
            return cls(
                str(raw["node"]),
                readers,
                producing,
                bool(raw.get("partial")),
                bool(raw.get("leaving")),
            )
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
            return None


class NodeTable:
    """What this node knows of the others, from their heartbeats."""

    def __init__(self, me: str, started: float, timeout_s: float) -> None:
        self.me = me
        self.started = started
        self.timeout_s = timeout_s
        self.last_seen: dict[str, float] = {}
        self.readers: dict[str, dict[str, int]] = {}
        """Per other node: its reader count per stream."""
        self.producers: dict[str, str] = {}
        """Stream id -> the node that said it produces it."""

    def observe(self, beat: Heartbeat, now: float) -> list[tuple[str, int, int]]:
        """Take in a heartbeat; return ``(stream_id, before, after)`` for every stream whose
        reader count on that node changed."""
        if beat.node == self.me:
            return []
        if beat.leaving:
            return self.forget(beat.node)
        self.last_seen[beat.node] = now
        for stream_id in beat.producing:
            self.producers[stream_id] = beat.node
        known = self.readers.setdefault(beat.node, {})
        changes = []
        new = dict(known) if beat.partial else {}
        new.update(beat.readers)
        for stream_id in set(known) | set(new):
            before, after = known.get(stream_id, 0), new.get(stream_id, 0)
            if before != after:
                changes.append((stream_id, before, after))
        self.readers[beat.node] = {k: v for k, v in new.items() if v > 0}
        return changes

    def alive(self, node: str, now: float) -> bool | None:
        """True if ``node`` was heard from within the timeout; False if it is dead; None if
        this node has not been up long enough to tell."""
        if node == self.me:
            return True
        seen = self.last_seen.get(node)
        if seen is not None and now - seen <= self.timeout_s:
            return True
        if seen is None and now - self.started < self.timeout_s:
            return None
        return False

    def expire(self, now: float) -> tuple[list[str], list[tuple[str, int, int]]]:
        """Forget nodes silent for longer than the timeout: the dead nodes, and the reader
        counts that went with them."""
        dead = [n for n, seen in self.last_seen.items() if now - seen > self.timeout_s]
        changes: list[tuple[str, int, int]] = []
        for node in dead:
            changes.extend(self.forget(node))
        return dead, changes

    def forget(self, node: str) -> list[tuple[str, int, int]]:
        """Drop ``node``; its streams lose its readers."""
        self.last_seen.pop(node, None)
        # Its producers stay recorded: streams it produced are still owed a producer_lost.
        return [(s, n, 0) for s, n in self.readers.pop(node, {}).items() if n > 0]

    def remote_readers(self, stream_id: str) -> int:
        """How many other nodes read ``stream_id``."""
        return sum(1 for counts in self.readers.values() if counts.get(stream_id, 0) > 0)
