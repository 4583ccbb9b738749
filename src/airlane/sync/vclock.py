"""Version vectors and vector clocks, with bounded growth by actor retirement.

A `VersionVector` maps actors to integers. Two uses, one type:

- a *vector clock* counts events per actor (`increment`); ``a.compare(b)`` answers whether
  the event stamped ``a`` happened before, after, or concurrently with the one stamped ``b``;
- a *version vector* summarises what a replica holds: ``v[n] = t`` says "every operation of
  node ``n`` up to HLC time ``t`` is included" (`advance`, with `Stamp.logical` values).

**Floor.** Besides its entries a vector has a ``floor``: every actor, named or not, reads at
least the floor (``v[a] == max(entries.get(a, 0), floor)``), and entries at or below it are
dropped. The floor is a causal stability point: "every actor's events up to ``floor`` are
included, here and at every live replica".

**Retirement (the rule).** Vectors grow by one entry per actor that ever wrote. An actor is
*retired* once (1) it has left for good (it will issue no more events) and (2) every live
replica's vector covers its last event. From then on it is left out of `stable_point`, the
minimum over the live replicas' vectors of their live actors' entries, so it no longer holds
the stability point back. ``v.fold(stable_point(...))`` raises the floor to that point and
drops every entry at or below it: the retired actor's entry is folded into the floor as soon
as the floor passes its last event, and a vector's size stays bounded by the live actors.

*Precondition.* Raising a floor to ``f`` claims that no actor will ever issue an event at or
below ``f`` that this vector has not seen. For live actors ``stable_point`` guarantees it (each
one's entry is already ``>= f`` everywhere); retired actors issue nothing more; a *joining*
actor must start above the floor. With HLC values a joiner does so by receiving the current
state (its clock then passes every stamp in it) before writing; with counters, `increment` on a
vector merged from the current one starts a new actor at ``floor + 1``. Folding with a floor
that is not stable makes comparisons wrong; nothing here can detect it.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Mapping
from types import MappingProxyType

from airlane.sync.errors import LocalSyncError, MalformedError

__all__ = ["Causality", "VersionVector", "stable_point"]


class Causality(enum.Enum):
    """How two vector clocks relate: ``a.compare(b)`` is `BEFORE` if ``a`` happened before
    ``b``."""

    BEFORE = "before"
    AFTER = "after"
    EQUAL = "equal"
    CONCURRENT = "concurrent"


class VersionVector:
    """An immutable map from actor ids to non-negative integers, with a floor.

    Every operation returns a new vector; equal vectors compare and hash equal.
    """

    __slots__ = ("_entries", "_floor")

    def __init__(self, entries: Mapping[str, int] | None = None, floor: int = 0) -> None:
        if not _is_count(floor):
            raise LocalSyncError(f"floor must be an int >= 0, got {floor!r}")
        normalized: dict[str, int] = {}
        for actor, value in (entries or {}).items():
            if not isinstance(actor, str) or not actor or not _is_count(value):
                raise LocalSyncError(f"bad version vector entry {actor!r}: {value!r}")
            if value > floor:  # entries at or below the floor say nothing the floor doesn't
                normalized[actor] = value
        self._entries = normalized
        self._floor = floor

    @property
    def floor(self) -> int:
        """The value every actor reads at least."""
        return self._floor

    @property
    def entries(self) -> Mapping[str, int]:
        """The named entries, each above the floor (read-only)."""
        return MappingProxyType(self._entries)

    def __getitem__(self, actor: str) -> int:
        return self._entries.get(actor, self._floor)

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, VersionVector):
            return NotImplemented
        return self._floor == other._floor and self._entries == other._entries

    def __hash__(self) -> int:
        return hash((self._floor, frozenset(self._entries.items())))

    def __repr__(self) -> str:
        return f"VersionVector({self._entries!r}, floor={self._floor})"

    def increment(self, actor: str) -> VersionVector:
        """This vector with one more event of ``actor`` (a vector clock's local tick)."""
        return self.advance(actor, self[actor] + 1)

    def advance(self, actor: str, value: int) -> VersionVector:
        """This vector with ``actor`` raised to at least ``value``."""
        if value <= self[actor]:
            return self
        return VersionVector({**self._entries, actor: value}, self._floor)

    def merge(self, other: VersionVector) -> VersionVector:
        """The pointwise maximum: what either vector has seen."""
        merged = dict(self._entries)
        for actor, value in other._entries.items():
            if value > merged.get(actor, 0):
                merged[actor] = value
        return VersionVector(merged, max(self._floor, other._floor))

    def dominates(self, other: VersionVector) -> bool:
        """True if this vector has seen everything ``other`` has (``>=`` pointwise)."""
        return self.compare(other) in (Causality.AFTER, Causality.EQUAL)

    def compare(self, other: VersionVector) -> Causality:
        """How the event stamped with this vector relates to the one stamped ``other``."""
        less = greater = False
        # The floors stand for every actor neither vector names.
        pairs = [(self[a], other[a]) for a in self._entries.keys() | other._entries.keys()]
        pairs.append((self._floor, other._floor))
        for mine, theirs in pairs:
            less = less or mine < theirs
            greater = greater or mine > theirs
        if less and greater:
            return Causality.CONCURRENT
        if less:
            return Causality.BEFORE
        return Causality.AFTER if greater else Causality.EQUAL

    def fold(self, floor: int) -> VersionVector:
        """This vector with its floor raised to ``floor`` and the entries it covers dropped.

        ``floor`` must be causally stable (see the module docstring); `stable_point` gives it.
        """
        if floor <= self._floor:
            return self
        return VersionVector(self._entries, floor)

    def to_dict(self) -> dict[str, object]:
        """A JSON-compatible form: ``{"floor": int, "entries": {actor: int}}``."""
        return {"floor": self._floor, "entries": dict(self._entries)}

    @classmethod
    def from_dict(cls, data: object) -> VersionVector:
        """Parse `to_dict`'s form; raises `MalformedError` if it is not one."""
        if not isinstance(data, Mapping) or not isinstance(data.get("entries"), Mapping):
            raise MalformedError("a version vector is {'floor': int, 'entries': {...}}")
        try:
            return cls(data["entries"], data.get("floor", 0))
        except LocalSyncError as exc:
            raise MalformedError(str(exc)) from None


def stable_point(vectors: Iterable[VersionVector], live: Iterable[str]) -> int:
    """The causal stability point: the minimum of ``v[a]`` over the live replicas' acknowledged
    vectors ``v`` and the live actors ``a``.

    Every operation of a live actor at or below it is held by every live replica, so it may be
    passed to `VersionVector.fold` and to the CRDTs' ``gc``. Retired actors are left out of
    ``live`` once every live replica covers their last event (module docstring).
    """
    actors = list(live)
    values = [vector[actor] for vector in vectors for actor in actors]
    if not values:
        raise LocalSyncError("stable_point needs at least one vector and one live actor")
    return min(values)


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
