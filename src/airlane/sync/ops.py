"""Operations as data: what LWW replicas send each other over the hub.

An `Op` is one write (add, remove, set or delete) with the HLC stamp that orders it; a `Delta`
is the batch of ops one replica sends another, with the version vectors that let the receiver
advance its own. Both convert to and from JSON-compatible dicts (``to_dict`` / ``from_dict``),
and decoding a peer's dict raises `MalformedError`, never anything else.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass

from airlane.sync._json import MAX_JSON_DEPTH, JSONValue, check_json
from airlane.sync.errors import LocalSyncError, MalformedError
from airlane.sync.hlc import Stamp
from airlane.sync.vclock import VersionVector

__all__ = ["MAX_JSON_DEPTH", "Action", "Bias", "Delta", "JSONValue", "Op"]


class Action(enum.StrEnum):
    """What an op does. Sets take add/remove, registers set, maps set/delete."""

    ADD = "add"
    REMOVE = "remove"
    SET = "set"
    DELETE = "delete"

    @property
    def is_removal(self) -> bool:
        """True for remove and delete: the op leaves a tombstone."""
        return self in (Action.REMOVE, Action.DELETE)


class Bias(enum.StrEnum):
    """Which side wins when a write and a removal carry the same HLC time."""

    ADD_WINS = "add-wins"
    REMOVE_WINS = "remove-wins"


@dataclass(frozen=True, slots=True)
class Op:
    """One CRDT operation: ``action`` on ``key`` at ``stamp`` (``value`` only for set)."""

    action: Action
    """What the op does."""
    stamp: Stamp
    """When, in HLC time; orders the op against every other op on the same key."""
    key: str = ""
    """The set element or map key ("" for a register)."""
    value: JSONValue = None
    """The value written (set only; None otherwise)."""

    def __post_init__(self) -> None:
        if not isinstance(self.action, Action) or not isinstance(self.stamp, Stamp):
            raise LocalSyncError("an Op needs an Action and a Stamp")
        if self.stamp.logical == 0:
            raise LocalSyncError("stamp logical time 0 is reserved for 'nothing seen'")
        if not isinstance(self.key, str):
            raise LocalSyncError(f"op key must be a str, got {type(self.key).__name__}")
        if self.action is not Action.SET and self.value is not None:
            raise LocalSyncError(f"a {self.action} op carries no value")
        check_json(self.value)

    def to_dict(self) -> dict[str, JSONValue]:
        """A JSON-compatible form: ``{"action", "stamp", "key"[, "value"]}``."""
        data: dict[str, JSONValue] = {
            "action": self.action.value,
            "stamp": self.stamp.encode(),
            "key": self.key,
        }
        if self.action is Action.SET:
            data["value"] = self.value
        return data

    @classmethod
    def from_dict(cls, data: object) -> Op:
        """Parse `to_dict`'s form; raises `MalformedError` if it is not one."""
        if not isinstance(data, Mapping):
            raise MalformedError("an op is a JSON object")
        try:
            action = Action(data.get("action"))  # type: ignore[arg-type]  # checked here
        except (ValueError, TypeError):
            raise MalformedError(f"unknown op action {data.get('action')!r:.80}") from None
        stamp = Stamp.decode(data.get("stamp"))  # type: ignore[arg-type]  # decode checks
        try:
            return cls(action, stamp, data.get("key"), data.get("value"))  # type: ignore[arg-type]
        except LocalSyncError as exc:
            raise MalformedError(str(exc)) from None


@dataclass(frozen=True, slots=True)
class Delta:
    """The ops one replica sends another so that the receiver catches up.

    ``since`` is what the sender assumed the receiver had; ``version`` what the sender held.
    A receiver whose own version dominates ``since`` holds everything ``version`` covers once
    it has applied ``ops``, and may advance its version vector to include it.
    """

    ops: tuple[Op, ...]
    """The winning op of every key changed since ``since``, in stamp order."""
    since: VersionVector
    """The version the delta was computed against."""
    version: VersionVector
    """The sender's version when it computed the delta."""

    def to_dict(self) -> dict[str, object]:
        """A JSON-compatible form: ``{"ops": [...], "since": {...}, "version": {...}}``."""
        return {
            "ops": [op.to_dict() for op in self.ops],
            "since": self.since.to_dict(),
            "version": self.version.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: object) -> Delta:
        """Parse `to_dict`'s form; raises `MalformedError` if it is not one."""
        if not isinstance(data, Mapping) or not isinstance(data.get("ops"), list):
            raise MalformedError("a delta is {'ops': [...], 'since': {...}, 'version': {...}}")
        ops = tuple(Op.from_dict(item) for item in data["ops"])
        since = VersionVector.from_dict(data.get("since"))
        return cls(ops, since, VersionVector.from_dict(data.get("version")))
