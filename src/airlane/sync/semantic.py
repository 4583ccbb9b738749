"""Semantic merge of concurrent text edits, with a pluggable arbiter (seed chapter 3.1).

Each `Edit` of a field (a key of a `SemanticMap`) carries a *semantic hash* of its text (by
default `normalized_text_hash`: NFKC, case-folded, whitespace-collapsed, SHA-256) and the
stamps of the edits its author was looking at, its *parents*. The edits of a key form a DAG;
its *heads* are the edits no other edit names as a parent.

- One head, or several with the same hash: no conflict. Concurrent edits that say the same
  thing merge as one; the field reads as the latest of them.
- Heads with different hashes: a real conflict. The field reads as the latest head until
  `SemanticMap.resolve` asks an `Arbiter` (default `LWWArbiter`: the latest text, deterministic;
  `ModelArbiter` is the interface a gateway backs with a model) and records the answer as an
  edit like any other: a *decision*, whose parents are the heads and whose stamp is derived
  from them (`decision_stamp`: one past the newest head, on a reserved ``~arbiter.<digest>``
  node id naming exactly that set of heads). The arbiter sees the authored edits behind any
  decision among the heads, so a decision taken on a partial view is re-taken with the full
  picture, not stacked on: with a deterministic arbiter the final text does not depend on the
  order edits arrived in.

Why replicas converge. The state is the set of edits, keyed by stamp; union is commutative,
associative and idempotent (two different edits under one stamp, which only a
non-deterministic arbiter produces, are settled by a fixed order on their content), so replicas
that have received the same edits hold the same set, whatever the delivery order. Everything
read from it, heads, conflicts and the field's text, is a function of that set. A decision is
a function of the heads and the arbiter's answer: replicas that resolve the same conflict
record the same stamp, so a decision made on two replicas is one edit, stored once (with a
deterministic arbiter, byte for byte the same edit; otherwise the content order keeps one
answer everywhere). A decision made on a partial view is just one more edit: once the
replicas have exchanged everything they see the same heads, resolve them to the same
decision, and have nothing left to resolve.
"""

from __future__ import annotations

import hashlib
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

import orjson

from airlane.sync.errors import LocalSyncError, MalformedError
from airlane.sync.hlc import HybridClock, Stamp

__all__ = [
    "ARBITER_NODE",
    "DEFAULT_MAX_ANSWER_CHARS",
    "Arbiter",
    "ArbitrationRequest",
    "Edit",
    "LWWArbiter",
    "ModelArbiter",
    "SemanticHash",
    "SemanticMap",
    "decision_stamp",
    "normalized_text_hash",
]

ARBITER_NODE: Final = "~arbiter"
"""Node id prefix of decision stamps; ``~`` ids are never issued by a `HybridClock`."""
DEFAULT_MAX_ANSWER_CHARS: Final = 100_000
"""Longest answer `ModelArbiter` accepts from a model before it falls back."""

SemanticHash = Callable[[str], str]
"""Maps a text to a digest; equal digests mean "says the same thing"."""


def normalized_text_hash(text: str) -> str:
    """SHA-256 (hex) of ``text`` after NFKC normalization, case folding and collapsing runs of
    whitespace: edits differing only in those merge as one."""
    normalized = " ".join(unicodedata.normalize("NFKC", text).casefold().split())
    return hashlib.sha256(normalized.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class Edit:
    """One version of a field's text."""

    key: str
    """The field edited."""
    text: str
    """Its new text."""
    stamp: Stamp
    """Identifies the edit; a decision's is derived from its parents (`decision_stamp`)."""
    parents: tuple[Stamp, ...]
    """The heads the author saw (a decision: the heads it resolves), sorted."""
    digest: str
    """The semantic hash of ``text``."""

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not isinstance(self.text, str):
            raise LocalSyncError("an edit's key and text are strings")
        if not isinstance(self.stamp, Stamp) or not all(isinstance(p, Stamp) for p in self.parents):
            raise LocalSyncError("an edit's stamp and parents are Stamps")
        if list(self.parents) != sorted(set(self.parents)):
            raise LocalSyncError("an edit's parents are sorted and distinct")

    @property
    def is_decision(self) -> bool:
        """True if an arbiter wrote this edit."""
        return self.stamp.node.startswith(ARBITER_NODE)

    def to_dict(self) -> dict[str, object]:
        """A JSON-compatible form."""
        return {
            "key": self.key,
            "text": self.text,
            "stamp": self.stamp.encode(),
            "parents": [parent.encode() for parent in self.parents],
            "digest": self.digest,
        }

    @classmethod
    def from_dict(cls, data: object) -> Edit:
        """Parse `to_dict`'s form; raises `MalformedError` if it is not one."""
        if not isinstance(data, Mapping) or not isinstance(data.get("parents"), list):
            raise MalformedError("an edit is {'key', 'text', 'stamp', 'parents', 'digest'}")
        key, text, digest = data.get("key"), data.get("text"), data.get("digest")
        if not (isinstance(key, str) and isinstance(text, str) and isinstance(digest, str)):
            raise MalformedError("edit key, text and digest must be strings")
        parents = tuple(sorted({Stamp.decode(item) for item in data["parents"]}))
        edit = cls(key, text, Stamp.decode(data.get("stamp")), parents, digest)  # type: ignore[arg-type]
        if edit.is_decision and edit.stamp != decision_stamp(parents):
            raise MalformedError("a decision's stamp must be derived from its parents")
        return edit


class Arbiter(Protocol):
    """Settles a real conflict: given the distinct candidates (one per semantic hash, oldest
    first), returns the field's text. Replicas converge whatever it returns, but only a
    deterministic arbiter makes every replica's decision the same edit byte for byte."""

    def __call__(self, key: str, candidates: Sequence[Edit]) -> str: ...


class LWWArbiter:
    """The default arbiter: the latest candidate's text (deterministic)."""

    def __call__(self, key: str, candidates: Sequence[Edit]) -> str:
        """The text of the candidate with the greatest stamp."""
        return max(candidates, key=lambda edit: edit.stamp).text


@dataclass(frozen=True, slots=True)
class ArbitrationRequest:
    """What `ModelArbiter` asks its model: merge these versions of ``key``."""

    key: str
    """The field in conflict."""
    candidates: tuple[str, ...]
    """The conflicting texts, oldest first."""


class ModelArbiter:
    """An arbiter that asks a model (interface only: the gateway supplies ``ask``).

    ``ask`` takes an `ArbitrationRequest` and returns the merged text, or None if it has no
    answer; a None, empty or overlong answer falls back to ``fallback``. Run `resolve` with it
    on one replica (a model is not deterministic); the others receive its decision as an edit.
    """

    def __init__(
        self,
        ask: Callable[[ArbitrationRequest], str | None],
        *,
        fallback: Arbiter | None = None,
        max_chars: int = DEFAULT_MAX_ANSWER_CHARS,
    ) -> None:
        self._ask = ask
        self._fallback = fallback if fallback is not None else LWWArbiter()
        self._max_chars = max_chars

    def __call__(self, key: str, candidates: Sequence[Edit]) -> str:
        """The model's merged text, or the fallback's if the model gave no usable answer."""
        answer = self._ask(ArbitrationRequest(key, tuple(edit.text for edit in candidates)))
        if isinstance(answer, str) and 0 < len(answer) <= self._max_chars:
            return answer
        return self._fallback(key, candidates)


def decision_stamp(heads: Iterable[Stamp]) -> Stamp:
    """The stamp of the decision resolving ``heads``: one logical tick past the newest, on
    ``~arbiter.<12 hex of SHA-256 of the sorted heads>``. The same heads always give the same
    stamp; different sets of heads (practically) never do."""
    ordered = sorted(set(heads))
    if not ordered:
        raise LocalSyncError("a decision needs at least one head")
    digest = hashlib.sha256("\n".join(s.encode() for s in ordered).encode("utf-8"))
    return Stamp.from_logical(ordered[-1].logical + 1, f"{ARBITER_NODE}.{digest.hexdigest()[:12]}")


class SemanticMap:
    """Text fields edited concurrently on many replicas, merged semantically (module doc)."""

    def __init__(
        self, clock: HybridClock, *, semantic_hash: SemanticHash = normalized_text_hash
    ) -> None:
        self._clock = clock
        self._hash = semantic_hash
        self._edits: dict[str, dict[Stamp, Edit]] = {}
        self._referenced: dict[str, set[Stamp]] = {}  # per key, every stamp named as a parent
        self._floor = 0

    def edit(self, key: str, text: str, now_ms: int) -> Edit:
        """Replace ``key``'s text, on top of what this replica sees; returns the edit to send."""
        parents = tuple(sorted(head.stamp for head in self.heads(key)))
        edit = Edit(key, text, self._clock.now(now_ms), parents, self._hash(text))
        self._add(edit)
        return edit

    def apply(self, edit: Edit, now_ms: int) -> bool:
        """Apply a received edit; True if it was new. Raises `ClockDriftError` (nothing
        changes) if its stamp is too far ahead of ``now_ms``."""
        self._clock.receive(edit.stamp, now_ms)
        return self._add(edit)

    def merge(self, other: SemanticMap, now_ms: int) -> None:
        """Take every edit ``other`` holds (state-based sync)."""
        edits = other.edits()
        if edits:
            self._clock.receive(max(edit.stamp for edit in edits), now_ms)
        for edit in edits:
            self._add(edit)

    def edits(self) -> tuple[Edit, ...]:
        """The state: every edit held, by key then stamp."""
        return tuple(
            edit for key in sorted(self._edits) for _, edit in sorted(self._edits[key].items())
        )

    def heads(self, key: str) -> tuple[Edit, ...]:
        """The edits of ``key`` that no other edit builds on, oldest first."""
        referenced = self._referenced.get(key, set())
        edits = self._edits.get(key, {})
        return tuple(edits[s] for s in sorted(edits) if s not in referenced)

    def value(self, key: str) -> str | None:
        """``key``'s text: the latest head's (None if never edited)."""
        heads = self.heads(key)
        return heads[-1].text if heads else None

    def items(self) -> dict[str, str]:
        """Every field and its text."""
        return {key: text for key in sorted(self._edits) if (text := self.value(key)) is not None}

    def conflicts(self) -> list[str]:
        """The keys whose heads disagree semantically (more than one hash)."""
        return [key for key in sorted(self._edits) if len(_by_digest(self.heads(key))) > 1]

    def resolve(self, now_ms: int, arbiter: Arbiter | None = None) -> list[Edit]:
        """Settle every conflict with ``arbiter`` (default `LWWArbiter`); returns the decision
        edits, already applied here, to broadcast."""
        arbiter = arbiter if arbiter is not None else LWWArbiter()
        decisions = []
        for key in self.conflicts():
            heads = self.heads(key)
            originals = _by_digest(self._originals(key, heads))
            text = arbiter(key, sorted(originals.values(), key=lambda edit: edit.stamp))
            parents = tuple(head.stamp for head in heads)
            decision = Edit(key, text, decision_stamp(parents), parents, self._hash(text))
            self._clock.receive(decision.stamp, now_ms)  # later local edits order after it
            self._add(decision)
            decisions.append(decision)
        return decisions

    def _originals(self, key: str, heads: Sequence[Edit]) -> list[Edit]:
        """The authored edits behind ``heads``: a decision among them stands for the edits it
        resolved (while they are still held), so a decision taken on a partial view is re-taken
        with the full picture instead of being stacked on."""
        edits = self._edits[key]
        found: dict[Stamp, Edit] = {}
        pending = list(heads)
        while pending:
            edit = pending.pop()
            resolved = [edits.get(parent) for parent in edit.parents] if edit.is_decision else []
            if resolved and all(parent is not None for parent in resolved):
                pending += [parent for parent in resolved if parent is not None]
            else:
                found[edit.stamp] = edit
        return sorted(found.values(), key=lambda edit: edit.stamp)

    def gc(self, stable: Stamp | int) -> int:
        """Forget superseded edits (not heads) at or below the causally stable point
        ``stable`` (see `airlane.sync.lww`); returns how many were dropped."""
        floor = stable.logical if isinstance(stable, Stamp) else stable
        dropped = 0
        for key, edits in self._edits.items():
            heads = {head.stamp for head in self.heads(key)}
            dead = [s for s in edits if s not in heads and s.logical <= floor]
            for stamp in dead:
                del edits[stamp]
            dropped += len(dead)
            self._reindex(key)
        self._floor = max(self._floor, floor)
        return dropped

    def _add(self, edit: Edit) -> bool:
        if edit.stamp.logical <= self._floor:  # stable: already here or collected
            return False
        edits = self._edits.setdefault(edit.key, {})
        held = edits.get(edit.stamp)
        if held is not None and _canonical(held) >= _canonical(edit):
            return False
        edits[edit.stamp] = edit
        if held is None:
            self._referenced.setdefault(edit.key, set()).update(edit.parents)
        else:  # the same stamp with other content: only a non-deterministic arbiter does it
            self._reindex(edit.key)
        return True

    def _reindex(self, key: str) -> None:
        self._referenced[key] = {p for edit in self._edits[key].values() for p in edit.parents}


def _by_digest(heads: Sequence[Edit]) -> dict[str, Edit]:
    """One edit per semantic hash: the latest (heads come oldest first)."""
    return {head.digest: head for head in heads}


def _canonical(edit: Edit) -> bytes:
    return orjson.dumps([edit.text, edit.digest, [p.encode() for p in edit.parents]])
