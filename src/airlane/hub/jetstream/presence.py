"""Which gateway processes are alive, which streams each produces, and where streams have readers.

Pure bookkeeping (time is passed in). Every node publishes a heartbeat on
``<prefix>.ctl.hb`` each `JetStreamHubConfig.heartbeat_s`: its id, the run of the process
(random per start), the streams whose producer it runs, and its reader count per stream; and
within 20 ms of a stream gaining its first or losing its last local reader, a partial one
naming every stream that did so meanwhile. From them each node knows

- when another process died (silent for ``node_timeout_s``): the streams it produced can never
  end normally, so a node reading one ends it with a ``producer_lost`` error;
- how many processes read each stream it produces, which its orphan policy needs: a stream
  read only on other nodes is not an orphan.

Silence is counted only while this process can hear. Its own heartbeats come back to it
through the broker like everyone's; the time between two of them counts towards every other
member's silence only when they came back close together (within half the timeout). A process
that was paused (SIGSTOP, a long stall) or cut off from the broker, or that lived through a
broker restart, heard nobody, itself included, and so declares nobody dead from a silence it
could not have heard through: every member gets ``node_timeout_s`` of this process's hearing.

A process about to stop on purpose for a while (a full garbage-collector pass, which stops
every thread: seconds in a process holding tens of thousands of connections) says so first:
a heartbeat with ``pause_s``, and its silence counts only from the end of that (at most
`MAX_PAUSE_S`, so that a process cannot hide its death for long).

Liveness belongs to a **member**, a node id and a run together, not to the node id alone: a node
restarted under its ``--node-id`` is a new member, and the old one's heartbeats stop, so the
streams the old process produced end with ``producer_lost`` however fast the node came back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

import orjson

__all__ = ["Heartbeat", "Member", "NodeTable"]

MAX_REPORTED = 20
"""Streams a report names per member (it counts them all)."""
MAX_DEPARTED = 32
"""Members gone that a node still reports (for people looking at the cluster)."""
MAX_PAUSE_S = 30.0
"""The longest pause a heartbeat may announce (longer ones count as this)."""
MAX_ENTRIES = 50_000
"""Most streams one heartbeat lists (readers and producing each); the rest wait for the next."""


class Member(NamedTuple):
    """One process among the gateway nodes: its node id and the run of that process."""

    node: str
    run: str
    """Random per process start; empty for a record made before runs existed (then any
    process of ``node`` stands for it)."""

    def __str__(self) -> str:
        return f"{self.node} (run {self.run})" if self.run else self.node


@dataclass(slots=True)
class Heartbeat:
    """One process's report."""

    node: str
    readers: dict[str, int] = field(default_factory=dict)
    producing: list[str] = field(default_factory=list)
    partial: bool = False
    """True for a change announcement: streams it omits keep their last known counts."""
    leaving: bool = False
    """The process is shutting down cleanly (no need to wait for its timeout)."""
    run: str = ""
    """The run of the process (see `Member`)."""
    logs: dict[str, int] = field(default_factory=dict)
    """How far it has applied each home log it follows, by the log's process
    (``<node token>.<run>``; the ``node`` layout): a home keeps what they have not read."""
    pause_s: float = 0.0
    """The process is about to stop for about this long (a full garbage-collector pass):
    its silence counts from the end of that, up to `MAX_PAUSE_S`."""

    @property
    def member(self) -> Member:
        """Who sent it."""
        return Member(self.node, self.run)

    def to_bytes(self) -> bytes:
        """The wire form (JSON)."""
        body: dict[str, object] = {
            "node": self.node,
            "run": self.run,
            "readers": dict(list(self.readers.items())[:MAX_ENTRIES]),
            "producing": self.producing[:MAX_ENTRIES],
            "partial": self.partial,
            "leaving": self.leaving,
            "logs": self.logs,
        }
        if self.pause_s > 0:
            body["pause_s"] = self.pause_s
        return orjson.dumps(body)

    @classmethod
    def from_bytes(cls, data: bytes) -> Heartbeat | None:
        """Parse a heartbeat; None for anything malformed (it is ignored, not fatal)."""
        try:
            raw: Any = orjson.loads(data)
            readers = {str(k): int(v) for k, v in dict(raw.get("readers") or {}).items()}
            producing = [str(s) for s in raw.get("producing") or []]
            logs = {str(k): int(v) for k, v in dict(raw.get("logs") or {}).items()}
            pause_s = min(max(float(raw.get("pause_s") or 0.0), 0.0), MAX_PAUSE_S)
            return cls(
                str(raw["node"]),
                readers,
                producing,
                bool(raw.get("partial")),
                bool(raw.get("leaving")),
                str(raw.get("run") or ""),
                logs,
                pause_s,
            )
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
            return None


class NodeTable:
    """What this process knows of the others, from their heartbeats."""

    def __init__(self, me: Member, started: float, timeout_s: float) -> None:
        self.me = me
        self.started = started
        self.timeout_s = timeout_s
        self.heard_self: float | None = None
        """When this process's own heartbeat last came back (see the module docstring)."""
        self.hearing_s = 0.0
        """How long this process has been hearing, in all."""
        self.silent_s: dict[Member, float] = {}
        """Per member: how long this process has heard it say nothing."""
        self.paused_until: dict[Member, float] = {}
        """Per member that announced a pause: when it ends (silence before it does not
        count)."""
        self.last_seen: dict[Member, float] = {}
        self.readers: dict[Member, dict[str, int]] = {}
        """Per other member: its reader count per stream."""
        self.producers: dict[str, Member] = {}
        """Stream id -> the member that said it produces it."""
        self.departed: dict[Member, tuple[float, str]] = {}
        """Members gone, newest last (at most `MAX_DEPARTED`): when each was last heard, and
        how it went (``silent``: it stopped sending heartbeats; ``left``: it said so)."""

    def observe(self, beat: Heartbeat, now: float) -> list[tuple[str, int, int]]:
        """Take in a heartbeat; return ``(stream_id, before, after)`` for every stream whose
        reader count on that member changed."""
        member = beat.member
        if member == self.me:
            self._heard_self(now)
            return []
        if beat.leaving:
            self._depart(member, now, "left")
            return self.forget(member)
        self.departed.pop(member, None)
        self.last_seen[member] = now
        self.silent_s[member] = 0.0
        if beat.pause_s > 0:
            self.paused_until[member] = now + min(beat.pause_s, MAX_PAUSE_S)
        for stream_id in beat.producing:
            self.producers[stream_id] = member
        known = self.readers.setdefault(member, {})
        changes = []
        if beat.partial:
            # An announcement names only what changed: touch only that (a copy of every
            # count per announcement made a burst of N new readers cost N squared).
            for stream_id, after in beat.readers.items():
                before = known.get(stream_id, 0)
                if before != after:
                    changes.append((stream_id, before, after))
                if after > 0:
                    known[stream_id] = after
                else:
                    known.pop(stream_id, None)
            return changes
        new = beat.readers
        for stream_id in set(known) | set(new):
            before, after = known.get(stream_id, 0), new.get(stream_id, 0)
            if before != after:
                changes.append((stream_id, before, after))
        self.readers[member] = {k: v for k, v in new.items() if v > 0}
        return changes

    def alive(self, member: Member) -> bool | None:
        """True if ``member`` was heard from within the timeout; False if it is dead; None if
        this process has not been up long enough to tell.

        Another run of this process's own node id is dead at once: it is this node before a
        restart. (Two live processes sharing one node id is a misconfiguration; they see each
        other's heartbeats and keep each other alive.)
        """
        if member == self.me:
            return True
        if member.run:
            members = [member] if member in self.last_seen else []
        else:  # recorded before runs existed: any process of that node stands for it
            members = [m for m in self.last_seen if m.node == member.node]
        if any(not self._silent_too_long(m) for m in members):
            return True
        if member.node == self.me.node and member.run:
            return False
        if not members and self.hearing_s < self.timeout_s:
            return None
        return False

    def report(self, now: float) -> list[dict[str, object]]:
        """Every member this process knows, itself first: its node and run, whether it is
        alive (None: too early to tell), seconds since it was last heard, the streams it says
        it produces (how many, and the first `MAX_REPORTED` by name) and the readers it says
        it serves; then the members gone, newest first, with ``gone``: ``silent`` or
        ``left``."""
        produced: dict[Member, list[str]] = {}
        for stream_id, member in self.producers.items():
            produced.setdefault(member, []).append(stream_id)
        rows: list[dict[str, object]] = []
        for member in [self.me, *sorted(set(self.last_seen) - {self.me})]:
            heard = self.last_seen.get(member)
            rows.append({
                "node": member.node,
                "run": member.run,
                "self": member == self.me,
                "alive": self.alive(member),
                "heard_s_ago": 0.0 if member == self.me or heard is None else round(now - heard, 3),
                "producing": len(produced.get(member, ())),
                "streams": sorted(produced.get(member, ()))[:MAX_REPORTED],
                "readers": sum(self.readers.get(member, {}).values()),
            })  # fmt: skip
        for member, (heard, how) in reversed(self.departed.items()):
            rows.append({"node": member.node, "run": member.run, "self": False, "alive": False,
                         "gone": how, "heard_s_ago": round(now - heard, 3), "producing": 0,
                         "streams": [], "readers": 0})  # fmt: skip
        return rows

    def expire(self) -> tuple[list[Member], list[tuple[str, int, int]]]:
        """Forget members silent for longer than the timeout: the dead members, and the
        reader counts that went with them."""
        dead = [m for m in self.last_seen if self._silent_too_long(m)]
        changes: list[tuple[str, int, int]] = []
        for member in dead:
            self._depart(member, self.last_seen[member], "silent")
            changes.extend(self.forget(member))
        return dead, changes

    def _depart(self, member: Member, heard: float, how: str) -> None:
        self.departed.pop(member, None)
        self.departed[member] = (heard, how)
        while len(self.departed) > MAX_DEPARTED:
            del self.departed[next(iter(self.departed))]

    def _silent_too_long(self, member: Member) -> bool:
        return self.silent_s.get(member, 0.0) > self.timeout_s

    def _heard_self(self, now: float) -> None:
        """This process's own heartbeat came back: the time since the previous one counts
        as hearing (and as silence of whoever said nothing in it) if it is short."""
        previous, self.heard_self = self.heard_self, now
        if previous is None or now - previous > self.timeout_s / 2:
            return  # deaf in between (paused, cut off, no broker): nothing counts
        self.hearing_s += now - previous
        paused_until = self.paused_until
        for member, seen in self.last_seen.items():
            since = max(previous, seen, paused_until.get(member, 0.0))
            if now > since:
                self.silent_s[member] = self.silent_s.get(member, 0.0) + now - since

    def forget(self, member: Member) -> list[tuple[str, int, int]]:
        """Drop ``member``; its streams lose its readers."""
        self.last_seen.pop(member, None)
        self.silent_s.pop(member, None)
        self.paused_until.pop(member, None)
        # Its producers stay recorded: streams it produced are still owed a producer_lost.
        return [(s, n, 0) for s, n in self.readers.pop(member, {}).items() if n > 0]

    def remote_readers(self, stream_id: str) -> int:
        """How many other processes read ``stream_id``."""
        return sum(1 for counts in self.readers.values() if counts.get(stream_id, 0) > 0)
