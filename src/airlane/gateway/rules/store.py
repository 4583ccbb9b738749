"""Where rules are kept across restarts: one JSON file per rule in a directory.

A rule's file holds its definition, its owner, the window state its runner last saved
(`airlane.rules.RuleRunner.snapshot`), how far it has read its source, how many output rows
it has written and how far its actions have run, the rows held for approval (and approved
rows whose actions are running) and the generations being published to a topic. Each save
writes a new file and renames it over the old one, so a process killed at any moment leaves
either the old state or the new one, never half of each (a machine that loses power may lose
the last saves the kernel had not written yet).

The rule's task saves after each batch it reads and before it acknowledges that batch to its
source: the source sends again what was read after the last save, and the saved input position
makes the runner skip what it has already seen.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

__all__ = ["STATE_FORMAT", "RuleState", "RuleStore"]

log = logging.getLogger("airlane.rules")

STATE_FORMAT = "airlane.rule-state/1"
"""The ``format`` of a rule's file."""


@dataclass(slots=True)
class RuleState:
    """What a rule keeps across restarts."""

    key: str
    """The rule's name in its tenant's scope."""
    definition: dict[str, Any]
    """`RuleDefinition.to_dict`."""
    owner: dict[str, Any]
    """The principal it runs as: name, roles, tenant."""
    snapshot: dict[str, Any] | None = None
    """The runner's window state; None before the first save."""
    input: dict[str, Any] = field(default_factory=dict)
    """How far the source was read: ``{"seq": N}`` for a log, ``{"position": "e:s"}`` for a
    stream."""
    outputs: int = 0
    """Output rows produced so far (the next one's number: its idempotency key)."""
    revision: int = 0
    """Counts the replacements that changed what the rule reads or its SQL: rows it makes
    afterwards get keys of their own (`RuleState.output_key`), so none is taken for a row
    the replaced rule stored under the same number and never counted."""
    actions_done: int = 0
    """The output log's sequence number up to which actions have run."""
    pending: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Rows held for approval, by approval id; an approved one stays (``"approved": true``)
    until the actions after its hold have run."""
    forwards: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Generations whose events are being published to a topic, by stream id: ``topic``,
    ``qos``, ``bridge`` and ``position`` (the last event published, None before the
    first)."""
    counters: dict[str, int] = field(default_factory=dict)
    """What the actions did: published, appended, generated, failed, approved, rejected..."""
    created: float = 0.0
    incarnation: str = ""
    """Made when the rule is added, kept when it is replaced: the keys of what it writes
    (`output_key`, `action_key`, `generation_stream`) hold it, so a rule deleted and added
    again under the same name never has its rows, messages or generations taken for those of
    the one before. Empty in the files of rules added before it existed (their keys keep the
    form they had)."""

    def output_key(self, name: str, n: int) -> str:
        """The idempotency key of output row ``n`` of the rule ``name``."""
        revision = [f"r{self.revision}"] if self.revision else []
        if not self.incarnation:
            return ".".join(["rule", name, *revision, str(n)])
        return "/".join(["rule", name, self.incarnation, *revision, str(n)])

    def action_key(self, name: str, seq: int, index: int) -> str:
        """The idempotency key (and MQTT ``msg-id``) of action ``index`` on the rule's output
        row ``seq``."""
        if not self.incarnation:
            return f"rule.{name}.{seq}.{index}"
        return f"rule/{name}/{self.incarnation}/{seq}/{index}"

    def generation_stream(self, name: str, seq: int, index: int) -> str:
        """The stream id of the generation that action ``index`` starts on output row
        ``seq``."""
        if not self.incarnation:
            return f"rules/{name}/{seq}.{index}"
        return f"rules/{name}/{self.incarnation}/{seq}.{index}"

    def to_dict(self) -> dict[str, Any]:
        """The file's content."""
        return {
            "format": STATE_FORMAT,
            "key": self.key,
            "definition": self.definition,
            "owner": self.owner,
            "snapshot": self.snapshot,
            "input": self.input,
            "outputs": self.outputs,
            "revision": self.revision,
            "actions_done": self.actions_done,
            "pending": self.pending,
            "forwards": self.forwards,
            "counters": self.counters,
            "created": self.created,
            "incarnation": self.incarnation,
        }

    @classmethod
    def from_dict(cls, data: Any) -> RuleState:
        """Read a file's content back; ValueError if it is not a rule's state."""
        if not isinstance(data, dict) or data.get("format") != STATE_FORMAT:
            raise ValueError(f"not a rule state of format {STATE_FORMAT!r}")
        try:
            return cls(
                key=str(data["key"]),
                definition=dict(data["definition"]),
                owner=dict(data["owner"]),
                snapshot=data.get("snapshot"),
                input=dict(data.get("input") or {}),
                outputs=int(data.get("outputs", 0)),
                revision=int(data.get("revision", 0)),
                actions_done=int(data.get("actions_done", 0)),
                pending={str(k): dict(v) for k, v in (data.get("pending") or {}).items()},
                forwards={str(k): dict(v) for k, v in (data.get("forwards") or {}).items()},
                counters={str(k): int(v) for k, v in (data.get("counters") or {}).items()},
                created=float(data.get("created", 0.0)),
                incarnation=str(data.get("incarnation", "")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"a malformed rule state: {exc}") from None


class RuleStore:
    """A directory of rule files; see the module docstring."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        """None: rules are kept in memory only (gone with the process)."""

    def _path(self, key: str) -> Path:
        assert self.directory is not None
        return self.directory / f"{quote(key, safe='')}.json"

    def load_all(self) -> list[RuleState]:
        """Every rule kept; a file that cannot be read is logged and left alone (renamed
        ``.bad``, so a fixed one can be put back)."""
        if self.directory is None or not self.directory.is_dir():
            return []
        states = []
        for path in sorted(self.directory.glob("*.json")):
            try:
                state = RuleState.from_dict(json.loads(path.read_text("utf-8")))
                if state.key != unquote(path.stem):
                    raise ValueError("the file's name and the rule's key differ")
            except (OSError, ValueError) as exc:
                log.error("rules: cannot read %s (%s); moved aside as .bad", path, exc)
                os.replace(path, path.with_suffix(".bad"))
                continue
            states.append(state)
        return states

    def save(self, state: RuleState) -> None:
        """Write ``state`` atomically."""
        if self.directory is None:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self._path(state.key)
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(json.dumps(state.to_dict(), separators=(",", ":")).encode())
        os.replace(tmp, path)

    def delete(self, key: str) -> None:
        """Forget a rule (nothing happens if it was never saved)."""
        if self.directory is None:
            return
        with contextlib.suppress(FileNotFoundError):
            self._path(key).unlink()
