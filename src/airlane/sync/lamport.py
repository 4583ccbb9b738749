"""Lamport clocks and the agent session snapshot pipeline (seed chapter 3.2).

An agent's session state (a flat map of keys to JSON values) is shared as whole snapshots:

- **Trigger.** `SnapshotPipeline` takes snapshots when the state has been idle for ``idle_ms``
  (checked by `SnapshotPipeline.poll`, deadline from `SnapshotPipeline.get_timer`), or at once
  when a *key* changes: a key for which the caller's ``is_key`` predicate is true.
- **Pack.** A `Snapshot` is the state, the origin's Lamport time and the origin id.
- **Broadcast.** The pipeline returns the snapshot; the caller sends it (pure: no I/O here).
- **Apply.** `SnapshotReceiver` applies snapshots in the total order ``(stamp, origin)``,
  optionally holding arrivals back ``reorder_ms`` to release them sorted, and ignores any that
  order at or below the one it last applied (stale or duplicate).

What the total order buys: Lamport time alone numbers snapshots consistently with causality
(an agent that has seen snapshot ``a`` stamps its next one above ``a``), but two agents can
produce snapshots with the same number. Breaking those ties by origin id makes the order total,
so every receiver, whatever order snapshots arrive in, ends on the same snapshot, and a
snapshot never gives way to one its origin had already seen. It does not make concurrent
snapshots mergeable or order them by real time: between concurrent agents the winner is
arbitrary but agreed. Merging concurrent content is the CRDTs' job (`airlane.sync.lww`).
"""

from __future__ import annotations

import enum
import heapq
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final

from airlane.sync._json import JSONValue, check_json
from airlane.sync.errors import LocalSyncError, MalformedError

__all__ = [
    "DEFAULT_IDLE_MS",
    "DEFAULT_MAX_BUFFERED",
    "DEFAULT_MAX_KEYS",
    "LamportClock",
    "PipelineState",
    "Snapshot",
    "SnapshotPipeline",
    "SnapshotReceiver",
    "Trigger",
]

DEFAULT_IDLE_MS: Final = 1_500
"""Quiet time before an idle snapshot: long enough to coalesce a burst of agent events into
one snapshot, short enough that a reconnecting peer rarely sees state older than that."""
DEFAULT_MAX_KEYS: Final = 10_000
"""Session state size limit, in keys: every snapshot copies the whole state."""
DEFAULT_MAX_BUFFERED: Final = 64
"""Snapshots a receiver holds back for reordering before it releases the oldest early."""


class LamportClock:
    """A Lamport clock: a counter that ticks on local events and jumps past received stamps."""

    def __init__(self, time: int = 0) -> None:
        if time < 0:
            raise LocalSyncError("Lamport time starts at 0 or later")
        self._time = time

    @property
    def time(self) -> int:
        """The last time issued or seen."""
        return self._time

    def tick(self) -> int:
        """Stamp a local event."""
        self._time += 1
        return self._time

    def receive(self, remote: int) -> int:
        """Merge a received stamp; returns the receive event's stamp (above both clocks)."""
        self._time = max(self._time, remote) + 1
        return self._time


class Trigger(enum.StrEnum):
    """Why a snapshot was taken."""

    IDLE = "idle"
    KEY_CHANGE = "key-change"
    FLUSH = "flush"


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A packed session state: ``state`` as of Lamport time ``stamp`` at ``origin``."""

    stamp: int
    """The origin's Lamport time when it took the snapshot."""
    origin: str
    """The agent that took it; breaks ties between equal stamps."""
    state: Mapping[str, JSONValue] = field(hash=False)
    """The whole session state (a copy)."""
    trigger: Trigger = Trigger.FLUSH
    """Why it was taken."""

    @property
    def order_key(self) -> tuple[int, str]:
        """The total order receivers apply snapshots in."""
        return (self.stamp, self.origin)

    def to_dict(self) -> dict[str, JSONValue]:
        """A JSON-compatible form."""
        return {
            "stamp": self.stamp,
            "origin": self.origin,
            "state": dict(self.state),
            "trigger": self.trigger.value,
        }

    @classmethod
    def from_dict(cls, data: object) -> Snapshot:
        """Parse `to_dict`'s form; raises `MalformedError` if it is not one."""
        if not isinstance(data, Mapping):
            raise MalformedError("a snapshot is a JSON object")
        stamp, origin, state = data.get("stamp"), data.get("origin"), data.get("state")
        if not isinstance(stamp, int) or isinstance(stamp, bool) or stamp < 0:
            raise MalformedError("snapshot stamp must be an int >= 0")
        if not isinstance(origin, str) or not origin:
            raise MalformedError("snapshot origin must be a non-empty string")
        try:
            trigger = Trigger(data.get("trigger", Trigger.FLUSH.value))
            check_json(state)
        except (ValueError, TypeError) as exc:  # LocalSyncError is a ValueError
            raise MalformedError(f"bad snapshot: {exc}") from None
        if not isinstance(state, dict):
            raise MalformedError("snapshot state must be an object")
        return cls(stamp, origin, state, trigger)


class PipelineState(enum.Enum):
    """`CLEAN`: nothing changed since the last snapshot. `DIRTY`: changes wait for one."""

    CLEAN = "clean"
    DIRTY = "dirty"


class SnapshotPipeline:
    """The sending side: holds one agent's session state and decides when to snapshot it.

    ======  =========================  ===========================================
    state   event                      result
    ======  =========================  ===========================================
    any     update, value unchanged    nothing
    any     update of a key            snapshot now (key-change) -> CLEAN
    any     update of another key      DIRTY, idle deadline = now + idle_ms
    DIRTY   poll at/after deadline     snapshot (idle) -> CLEAN
    DIRTY   flush                      snapshot (flush) -> CLEAN
    CLEAN   poll / flush               nothing
    ======  =========================  ===========================================
    """

    def __init__(
        self,
        origin: str,
        *,
        idle_ms: int = DEFAULT_IDLE_MS,
        is_key: Callable[[str], bool] = lambda key: False,
        clock: LamportClock | None = None,
        max_keys: int = DEFAULT_MAX_KEYS,
    ) -> None:
        if not origin or idle_ms <= 0 or max_keys <= 0:
            raise LocalSyncError("need an origin id, idle_ms > 0 and max_keys > 0")
        self.origin: Final = origin
        """This agent's id, in every snapshot it takes."""
        self.idle_ms: Final = idle_ms
        """Quiet time, in ms, after which pending changes are snapshotted."""
        self.clock: Final = clock if clock is not None else LamportClock()
        """The Lamport clock that stamps snapshots (share it with this agent's receiver)."""
        self._is_key = is_key
        self._max_keys = max_keys
        self._state: dict[str, JSONValue] = {}
        self._pipeline_state = PipelineState.CLEAN
        self._deadline: int | None = None

    @property
    def state(self) -> PipelineState:
        """Whether changes are waiting for a snapshot."""
        return self._pipeline_state

    @property
    def session(self) -> Mapping[str, JSONValue]:
        """A copy of the current session state."""
        return dict(self._state)

    def update(self, key: str, value: JSONValue, now_ms: int) -> Snapshot | None:
        """Set ``key`` to ``value``; returns a snapshot to broadcast if ``key`` is a key."""
        if key in self._state and self._state[key] == value:
            return None
        if key not in self._state and len(self._state) >= self._max_keys:
            raise LocalSyncError(f"session state is limited to {self._max_keys} keys")
        check_json(value)
        self._state[key] = value
        return self._changed(key, now_ms)

    def discard(self, key: str, now_ms: int) -> Snapshot | None:
        """Remove ``key``; returns a snapshot to broadcast if ``key`` is a key."""
        if key not in self._state:
            return None
        del self._state[key]
        return self._changed(key, now_ms)

    def get_timer(self) -> int | None:
        """When `poll` will next take a snapshot (ms), or None if nothing is pending."""
        return self._deadline

    def poll(self, now_ms: int) -> Snapshot | None:
        """Take the idle snapshot if its deadline has passed."""
        if self._deadline is None or now_ms < self._deadline:
            return None
        return self._take(Trigger.IDLE)

    def flush(self) -> Snapshot | None:
        """Snapshot pending changes now (shutdown, handover); None if there are none."""
        return self._take(Trigger.FLUSH) if self._pipeline_state is PipelineState.DIRTY else None

    def _changed(self, key: str, now_ms: int) -> Snapshot | None:
        if self._is_key(key):
            return self._take(Trigger.KEY_CHANGE)
        self._pipeline_state = PipelineState.DIRTY
        self._deadline = now_ms + self.idle_ms  # any change restarts the quiet period
        return None

    def _take(self, trigger: Trigger) -> Snapshot:
        self._pipeline_state = PipelineState.CLEAN
        self._deadline = None
        return Snapshot(self.clock.tick(), self.origin, dict(self._state), trigger)


class SnapshotReceiver:
    """The receiving side: applies snapshots in ``(stamp, origin)`` order.

    With ``reorder_ms`` 0 a newer snapshot applies on arrival. Otherwise arrivals wait up to
    ``reorder_ms`` so that ones overtaken in transit are released (and seen) in order; when one
    is due, it and everything ordered before it is released. A snapshot ordering at or below
    the last one applied is ignored. Give it the local pipeline's ``clock`` so the agent's next
    snapshot orders after everything it has received.
    """

    def __init__(
        self,
        *,
        clock: LamportClock | None = None,
        reorder_ms: int = 0,
        max_buffered: int = DEFAULT_MAX_BUFFERED,
    ) -> None:
        if reorder_ms < 0 or max_buffered <= 0:
            raise LocalSyncError("need reorder_ms >= 0 and max_buffered > 0")
        self._clock = clock
        self._reorder_ms = reorder_ms
        self._max_buffered = max_buffered
        self._held: list[tuple[tuple[int, str], int, Snapshot]] = []  # (order, due_ms, snap)
        self._current: Snapshot | None = None
        self.ignored = 0
        """Snapshots dropped as stale or duplicate."""

    @property
    def current(self) -> Snapshot | None:
        """The last snapshot applied."""
        return self._current

    def receive(self, snapshot: Snapshot, now_ms: int) -> list[Snapshot]:
        """Take an arrived snapshot; returns the snapshots applied now, in order."""
        if self._clock is not None:
            self._clock.receive(snapshot.stamp)
        if self._is_stale(snapshot) or any(e[0] == snapshot.order_key for e in self._held):
            self.ignored += 1
            return []
        heapq.heappush(self._held, (snapshot.order_key, now_ms + self._reorder_ms, snapshot))
        return self.poll(now_ms)

    def get_timer(self) -> int | None:
        """When `poll` will next release a held snapshot (ms), or None if none is held."""
        return min((due for _, due, _ in self._held), default=None)

    def poll(self, now_ms: int) -> list[Snapshot]:
        """Release the held snapshots that are due, and all that order before them."""
        due = [entry[0] for entry in self._held if entry[1] <= now_ms]
        if len(self._held) > self._max_buffered:  # full: the oldest goes early
            due.append(heapq.nsmallest(len(self._held) - self._max_buffered, self._held)[-1][0])
        if not due:
            return []
        upto = max(due)
        applied = []
        while self._held and self._held[0][0] <= upto:
            snapshot = heapq.heappop(self._held)[2]
            if self._is_stale(snapshot):
                self.ignored += 1
                continue
            self._current = snapshot
            applied.append(snapshot)
        return applied

    def _is_stale(self, snapshot: Snapshot) -> bool:
        return self._current is not None and snapshot.order_key <= self._current.order_key
