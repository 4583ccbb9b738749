"""Last-writer-wins CRDTs on HLC stamps: `LWWElementSet`, `LWWRegister`, `LWWMap`.

**State.** Each replica keeps, per key (set element, map key, or the register's one slot), the
winning `Op`: the greatest by

1. HLC time (`Stamp.logical`, i.e. ``(wall_ms, counter)``);
2. then the bias, if a write and a removal tie on time: add/set wins under ``add-wins``,
   remove/delete under ``remove-wins``;
3. then the node id, if two writes of the same kind tie on time;
4. then the canonical JSON of the value: only a faulty node reuses a whole stamp, but even then
   every replica must pick the same winner.

That is a total order, so the state is a join-semilattice (per key, keep the maximum): applying
ops or merging states is commutative, associative and idempotent, and replicas that have seen
the same ops hold the same state whatever the order, duplication or grouping of delivery.

**Sync.** Op-based: send each local op (`Op.to_dict`) and `apply` it remotely. State-based:
`merge`. Delta-based: ``a.apply_delta(b.delta_since(a.version))`` sends only the winning ops
``a`` lacks. A replica's `version` (a `VersionVector` of HLC logical times) reads ``v[n] = t``:
"every op of node ``n`` up to time ``t`` is included". It advances on local writes (the node's
own clock reading), on `merge`, and on `apply_delta` when the receiver held the delta's
``since``. A single remotely `apply`'d op does not advance it: HLC stamps have gaps, so one op of
node ``n`` says nothing about ``n``'s earlier ops, and the next delta sync re-sends such ops,
harmlessly. A replica's entry for its own node is its clock reading, so a replica that lost
its state must come back under a new node id (or be restored from a peer before it writes):
otherwise it would claim its own lost ops and peers would never re-send them.

**Tombstone GC.** A removal leaves a tombstone so that an older write arriving later cannot
resurrect the key. ``gc(stable)`` drops tombstones at or below ``stable`` when ``stable`` is
*causally stable*: every live replica has acknowledged a version vector whose every live
entry is at least ``stable`` (`airlane.sync.vclock.stable_point`: the minimum over replicas of
the last stamp each has seen of each writer). Then every op at or below it has reached every
replica, so none can still arrive that the tombstone would have to beat; and the replica
ignores any op at or below its floor from then on (re-sent duplicates), so a dropped tombstone
cannot be undone either. The floor travels in the version vector.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import ClassVar, Self

import orjson

from airlane.sync.errors import LocalSyncError, MalformedError
from airlane.sync.hlc import HybridClock, Stamp
from airlane.sync.ops import Action, Bias, Delta, JSONValue, Op
from airlane.sync.vclock import VersionVector

__all__ = ["LWWElementSet", "LWWMap", "LWWRegister"]


class _LWWReplica:
    """The machinery the three LWW types share: per-key winners, sync, version, GC."""

    _WRITE: ClassVar[Action]
    _REMOVAL: ClassVar[Action | None]

    def __init__(self, clock: HybridClock, bias: Bias = Bias.ADD_WINS) -> None:
        self._clock = clock
        self._bias = Bias(bias)
        self._slots: dict[str, Op] = {}
        self._seen: dict[str, int] = {}  # the version vector's entries, kept mutable
        self._floor = 0  # causally stable point: ops at or below it are ignored

    @property
    def node(self) -> str:
        """This replica's node id (its clock's)."""
        return self._clock.node

    @property
    def bias(self) -> Bias:
        """How a write and a removal with the same HLC time are ordered."""
        return self._bias

    @property
    def floor(self) -> int:
        """The stability point last collected to (`gc`) or learned from a peer; 0 if none."""
        return self._floor

    @property
    def version(self) -> VersionVector:
        """What this replica holds: per node, the HLC time up to which it has all its ops."""
        entries = dict(self._seen)
        last = self._clock.last
        if last is not None:  # every op this node will issue is stamped after its clock
            entries[self.node] = max(entries.get(self.node, 0), last.logical)
        return VersionVector(entries, self._floor)

    def entry(self, key: str) -> Op | None:
        """The winning op for ``key`` (a tombstone if it was removed last), or None."""
        return self._slots.get(key)

    def entries(self) -> tuple[Op, ...]:
        """The state: the winning op of every key, tombstones included, sorted by key."""
        return tuple(self._slots[key] for key in sorted(self._slots))

    def apply(self, op: Op, now_ms: int) -> bool:
        """Apply a remote op; True if it changed the state.

        Raises `MalformedError` if this type does not take the op, and `ClockDriftError` if its
        stamp is too far ahead of ``now_ms``; either way nothing changes.
        """
        return self._ingest((op,), now_ms) > 0

    def merge(self, other: Self, now_ms: int) -> None:
        """Join another replica's whole state into this one (state-based sync)."""
        if type(other) is not type(self) or other._bias is not self._bias:
            raise LocalSyncError("merge needs a replica of the same type and bias")
        self._ingest(other._slots.values(), now_ms)
        self._absorb(other.version)

    def delta_since(self, since: VersionVector | Stamp | None = None) -> Delta:
        """The winning ops a replica at version ``since`` may lack.

        ``since`` is the receiver's `version` (exact), a `Stamp` (every op after it: the
        receiver has everything up to it from every node), or None (everything).
        """
        if since is None:
            since = VersionVector()
        elif isinstance(since, Stamp):
            since = VersionVector(floor=since.logical)
        newer = [op for op in self._slots.values() if op.stamp.logical > since[op.stamp.node]]
        newer.sort(key=lambda op: (op.stamp, op.key))
        return Delta(tuple(newer), since, self.version)

    def apply_delta(self, delta: Delta, now_ms: int) -> int:
        """Apply a delta from `delta_since`; returns how many keys changed. Atomic like
        `apply`: a refused op or stamp leaves everything as it was."""
        held_since = self.version.dominates(delta.since)
        changed = self._ingest(delta.ops, now_ms)
        if held_since:  # then we now hold everything the sender's version covers
            self._absorb(delta.version)
        return changed

    def gc(self, stable: Stamp | int) -> int:
        """Drop tombstones at or below the causally stable point ``stable`` (module
        docstring); returns how many were dropped."""
        floor = stable.logical if isinstance(stable, Stamp) else stable
        dead = [
            key
            for key, op in self._slots.items()
            if op.action.is_removal and op.stamp.logical <= floor
        ]
        for key in dead:
            del self._slots[key]
        self._raise_floor(floor)
        return len(dead)

    def _write(self, action: Action, key: str, value: JSONValue, now_ms: int) -> Op:
        """Stamp and apply a local op; the caller broadcasts what this returns."""
        op = Op(action, self._clock.now(now_ms), key, value)
        self._put(op)
        self._seen[self.node] = op.stamp.logical
        return op

    def _ingest(self, ops: Iterable[Op], now_ms: int) -> int:
        batch = list(ops)
        for op in batch:  # vet everything before changing anything
            if not self._accepts(op):
                raise MalformedError(f"{type(self).__name__} does not take {op.action} ops")
        if not batch:
            return 0
        self._clock.receive(max(op.stamp for op in batch), now_ms)  # may raise drift
        return sum(self._put(op) for op in batch)

    def _accepts(self, op: Op) -> bool:
        return op.action is self._WRITE or op.action is self._REMOVAL

    def _put(self, op: Op) -> bool:
        if op.stamp.logical <= self._floor:  # stable: already here, or beaten by a GC'd stone
            return False
        current = self._slots.get(op.key)
        if current is not None and not self._outranks(op, current):
            return False
        self._slots[op.key] = op
        return True

    def _outranks(self, new: Op, old: Op) -> bool:
        if new.stamp.logical != old.stamp.logical:
            return new.stamp.logical > old.stamp.logical
        new_rank, old_rank = self._rank(new), self._rank(old)
        if new_rank != old_rank:
            return new_rank > old_rank
        if new.stamp.node != old.stamp.node:
            return new.stamp.node > old.stamp.node
        return _canonical(new) > _canonical(old)

    def _rank(self, op: Op) -> int:
        """The bias as a number: the side that wins ties ranks 1."""
        return int(op.action.is_removal == (self._bias is Bias.REMOVE_WINS))

    def _absorb(self, version: VersionVector) -> None:
        for node, value in version.entries.items():
            if value > self._seen.get(node, 0):
                self._seen[node] = value
        self._raise_floor(version.floor)

    def _raise_floor(self, floor: int) -> None:
        if floor > self._floor:
            self._floor = floor
            self._seen = {node: value for node, value in self._seen.items() if value > floor}

    def _live(self) -> Iterator[Op]:
        return (op for op in self._slots.values() if not op.action.is_removal)


class LWWElementSet(_LWWReplica):
    """A set of strings; an element is in it if its latest add beats its latest remove.

    ``bias`` decides an add and a remove with the same HLC time: ``add-wins`` (the default)
    keeps the element, ``remove-wins`` drops it.
    """

    _WRITE = Action.ADD
    _REMOVAL = Action.REMOVE

    def add(self, element: str, now_ms: int) -> Op:
        """Add ``element``; returns the op to broadcast."""
        return self._write(Action.ADD, element, None, now_ms)

    def remove(self, element: str, now_ms: int) -> Op:
        """Remove ``element`` (present or not); returns the op to broadcast."""
        return self._write(Action.REMOVE, element, None, now_ms)

    def __contains__(self, element: object) -> bool:
        op = self._slots.get(element) if isinstance(element, str) else None
        return op is not None and op.action is Action.ADD

    def __len__(self) -> int:
        return sum(1 for _ in self._live())

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(op.key for op in self._live()))

    def elements(self) -> frozenset[str]:
        """The elements now in the set."""
        return frozenset(op.key for op in self._live())


class LWWMap(_LWWReplica):
    """A map from strings to JSON values: one LWW register per key; delete leaves a tombstone.

    ``bias`` decides a set and a delete with the same HLC time, as for `LWWElementSet`.
    """

    _WRITE = Action.SET
    _REMOVAL = Action.DELETE

    def set(self, key: str, value: JSONValue, now_ms: int) -> Op:
        """Write ``value`` under ``key``; returns the op to broadcast."""
        return self._write(Action.SET, key, value, now_ms)

    def delete(self, key: str, now_ms: int) -> Op:
        """Delete ``key`` (present or not); returns the op to broadcast."""
        return self._write(Action.DELETE, key, None, now_ms)

    def get(self, key: str, default: JSONValue = None) -> JSONValue:
        """The value under ``key``, or ``default`` if it is absent or deleted."""
        op = self._slots.get(key)
        return op.value if op is not None and op.action is Action.SET else default

    def __contains__(self, key: object) -> bool:
        op = self._slots.get(key) if isinstance(key, str) else None
        return op is not None and op.action is Action.SET

    def __len__(self) -> int:
        return sum(1 for _ in self._live())

    def to_dict(self) -> dict[str, JSONValue]:
        """The live keys and their values."""
        return {op.key: op.value for op in self._live()}


class LWWRegister(_LWWReplica):
    """One JSON value; the latest write wins (ties broken by node id)."""

    _WRITE = Action.SET
    _REMOVAL = None

    def __init__(self, clock: HybridClock) -> None:
        super().__init__(clock)

    def set(self, value: JSONValue, now_ms: int) -> Op:
        """Write ``value``; returns the op to broadcast."""
        return self._write(Action.SET, "", value, now_ms)

    @property
    def value(self) -> JSONValue:
        """The current value (None before any write)."""
        op = self._slots.get("")
        return None if op is None else op.value

    @property
    def stamp(self) -> Stamp | None:
        """The stamp of the current value, None before any write."""
        op = self._slots.get("")
        return None if op is None else op.stamp

    def _accepts(self, op: Op) -> bool:
        return op.action is Action.SET and op.key == ""


def _canonical(op: Op) -> bytes:
    """A byte string that orders ops with identical stamps the same way on every replica."""
    return orjson.dumps([op.action.value, op.value], option=orjson.OPT_SORT_KEYS)
