"""Events: the unit of every Airlane stream.

A stream is an append-only log of events (docs/streams.md). An event is small and carries
only what its kind needs:

========== ============================================================ =========================
kind       meaning                                                      payload
========== ============================================================ =========================
delta      a piece of generated text on a ``channel``                   ``text``
tool_call  an argument delta of tool call number ``data["index"]``      ``text`` + ``data``
message    any JSON payload (agent events, load-test chunks)            ``data`` or ``raw``
status     progress / lifecycle information                             ``data``
usage      token accounting reported by a backend                       ``data``
error      the stream failed; terminal                                  ``data`` (``message``)
done       the stream finished; terminal                                ``data``
snapshot   everything folded so far; a reader *replaces* its state      ``data``
========== ============================================================ =========================

``seq`` is assigned by the stream log when the event is appended; events built by producers
carry ``seq == 0``. Each event caches its bytes per wire format so that N subscribers on
one format cost one encode ("encode once", docs/streams.md): see `Event.cached` and
`Event.cache`.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "TERMINAL_KINDS",
    "Channel",
    "Event",
    "Kind",
    "Lane",
]


class Kind(enum.StrEnum):
    """What an event means; see the module docstring for the payload of each kind."""

    DELTA = "delta"
    TOOL_CALL = "tool_call"
    MESSAGE = "message"
    STATUS = "status"
    USAGE = "usage"
    ERROR = "error"
    DONE = "done"
    SNAPSHOT = "snapshot"


TERMINAL_KINDS = frozenset({Kind.DONE, Kind.ERROR})
"""Kinds that end a stream: nothing may be appended after one of them."""


class Lane(enum.IntEnum):
    """Priority lane. A lower value is more urgent: writers send ``CONTROL`` first."""

    CONTROL = 0
    INTERACTIVE = 1
    BULK = 2


class Channel(enum.StrEnum):
    """Which text a ``delta`` extends."""

    CONTENT = "content"
    REASONING = "reasoning"


# Module constants for the constructors, which run once per event: on Python 3.11 reading a
# member off its enum class (`Kind.DELTA`) costs three times a global's lookup.
_MESSAGE = Kind.MESSAGE
_DELTA = Kind.DELTA
_CONTENT = Channel.CONTENT
_INTERACTIVE = Lane.INTERACTIVE

# The per-event overhead counted against byte retention, a rough figure for the object itself.
EVENT_OVERHEAD_BYTES = 96


@dataclass(slots=True, eq=False)
class Event:
    """One entry of a stream log.

    Build events with the class methods (`Event.delta`, `Event.done`, ...) rather than by
    hand: they fill in the lane and the payload shape each kind expects.
    """

    kind: Kind
    """What the event means."""
    text: str = ""
    """Text of a ``delta``, or the argument delta of a ``tool_call``."""
    data: dict[str, Any] | None = None
    """JSON-compatible payload for every kind that is not plain text."""
    channel: Channel = Channel.CONTENT
    """Which text a ``delta`` extends."""
    lane: Lane = Lane.INTERACTIVE
    """Priority lane."""
    tokens: int = 0
    """How many completion tokens this event carries (for the usage ledger)."""
    raw: bytes | None = None
    """A ``message`` payload that is already JSON-encoded (load-test chunks): sent verbatim."""
    seq: int = 0
    """Position in the stream, assigned on append; 0 before."""
    ts_ns: int = 0
    """Monotonic time (ns) at which the log accepted the event; 0 before."""
    held: int = 0
    """Bytes ``data`` holds, as far as byte retention is concerned: the encoded size of a
    payload a client published (`airlane.wire.limits` measures it once); 0 where ``data`` is
    small and fixed (usage, status, terminal events)."""
    _encoded: dict[str, bytes] | None = field(default=None, init=False, repr=False)
    # Created on first use: most events are encoded for one format, many never are, and every
    # container allocated per event is work for the garbage collector.

    # -- constructors -----------------------------------------------------------------------

    @classmethod
    def delta(cls, text: str, *, channel: Channel = Channel.CONTENT, tokens: int = 1) -> Event:
        """A piece of generated text."""
        # Positional: keywords cost the dataclass's __init__ half as much again.
        return cls(_DELTA, text, None, channel, _INTERACTIVE, tokens)

    @classmethod
    def tool_call(
        cls,
        index: int,
        arguments: str = "",
        *,
        call_id: str | None = None,
        name: str | None = None,
        tokens: int = 1,
    ) -> Event:
        """An argument delta for tool call ``index``; the first delta names the call."""
        data: dict[str, Any] = {"index": index}
        if call_id is not None:
            data["id"] = call_id
        if name is not None:
            data["name"] = name
        return cls(Kind.TOOL_CALL, text=arguments, data=data, tokens=tokens)

    @classmethod
    def message(
        cls,
        payload: Any = None,
        *,
        raw: bytes | None = None,
        lane: Lane = Lane.INTERACTIVE,
        tokens: int = 0,
    ) -> Event:
        """An application message: a JSON payload, or pre-encoded JSON bytes in ``raw`` (then
        ``payload`` is ignored). ``tokens`` counts completion tokens it carries, if any."""
        if raw is not None:
            # Positional arguments, in field order: the load-test path builds one per chunk.
            return cls(_MESSAGE, "", None, _CONTENT, lane, tokens, raw)
        return cls(_MESSAGE, data={"payload": payload}, lane=lane, tokens=tokens)

    @classmethod
    def status(cls, **fields: Any) -> Event:
        """Lifecycle or progress information; always on the control lane."""
        return cls(Kind.STATUS, data=fields, lane=Lane.CONTROL)

    @classmethod
    def usage(cls, *, prompt_tokens: int = 0, completion_tokens: int = 0) -> Event:
        """Token counts as reported by a backend."""
        data = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}
        return cls(Kind.USAGE, data=data, lane=Lane.CONTROL)

    @classmethod
    def done(cls, finish_reason: str = "stop", **fields: Any) -> Event:
        """The stream finished normally (or was cancelled: ``finish_reason="cancelled"``)."""
        return cls(Kind.DONE, data={"finish_reason": finish_reason, **fields}, lane=Lane.CONTROL)

    @classmethod
    def error(cls, message: str, *, code: str = "backend_error", **fields: Any) -> Event:
        """The stream failed; ``message`` is meant for humans, ``code`` for programs."""
        data = {"message": message, "code": code, **fields}
        return cls(Kind.ERROR, data=data, lane=Lane.CONTROL)

    # -- queries ----------------------------------------------------------------------------

    @property
    def terminal(self) -> bool:
        """True for ``done`` and ``error``: the stream ends here."""
        return self.kind in TERMINAL_KINDS

    @property
    def size(self) -> int:
        """Approximate memory cost, counted against byte retention."""
        size = EVENT_OVERHEAD_BYTES + len(self.text) + self.held
        if self.raw is not None:
            size += len(self.raw)
        return size

    def cached(self, wire_format: str) -> bytes | None:
        """This event's bytes in ``wire_format`` if a transport already encoded it."""
        return None if self._encoded is None else self._encoded.get(wire_format)

    def cache(self, wire_format: str, frame: bytes) -> bytes:
        """Keep ``frame`` as this event's bytes in ``wire_format``; return it."""
        if self._encoded is None:
            self._encoded = {}
        self._encoded[wire_format] = frame
        return frame

    def replace(self, **changes: Any) -> Event:
        """A copy with ``changes`` applied and an empty encoding cache."""
        # Field by field rather than `dataclasses.replace`, which walks the class's field
        # list in Python (~300 bytecodes): every reader's terminal event is a replaced copy.
        unknown = changes.keys() - _FIELD_NAMES
        if unknown:
            raise TypeError(f"Event has no field {sorted(unknown)[0]!r}")
        get = changes.get
        return Event(
            get("kind", self.kind),
            get("text", self.text),
            get("data", self.data),
            get("channel", self.channel),
            get("lane", self.lane),
            get("tokens", self.tokens),
            get("raw", self.raw),
            get("seq", self.seq),
            get("ts_ns", self.ts_ns),
            get("held", self.held),
        )


_FIELD_NAMES = frozenset(f.name for f in dataclasses.fields(Event) if f.init)
"""The fields `Event.replace` may change (the encoding cache is not one of them)."""
