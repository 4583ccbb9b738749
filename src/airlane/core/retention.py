"""Retention: how much history a stream keeps, and what happens to what it drops.

When a limit is exceeded the oldest events leave the log, and their content is folded into a
`Folded` accumulator: text so far per channel and tool calls so far. A reader that has fallen
behind the retained window gets that state as one ``snapshot`` event and then the tail, so it
can resume from any point while the stream exists (docs/streams.md, "Retention and compaction").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from airlane.core.events import Channel, Event, Kind, Lane
from airlane.core.text import TextBuffer

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_EVENTS",
    "DEFAULT_MAX_TEXT_CHARS",
    "DEFAULT_TTL_S",
    "Folded",
    "Retention",
]

DEFAULT_MAX_EVENTS = 4096
"""Enough for a long chat completion without folding (one event per token)."""
DEFAULT_MAX_BYTES = 4 << 20
"""Per-stream cap on retained event bytes; 4 MiB keeps 10k streams within a few GB worst case."""
DEFAULT_TTL_S = 3600.0
"""Events older than an hour are folded."""
DEFAULT_MAX_TEXT_CHARS = 4 << 20
"""Per-stream cap on text over the stream's life: about a million tokens of output, and at
most 16 MiB of memory (4 bytes per character at worst) in the folded snapshot."""

# Read per event folded: a global is a third of the cost of `Kind.DELTA` on Python 3.11.
_DELTA, _TOOL_CALL = Kind.DELTA, Kind.TOOL_CALL


@dataclass(frozen=True, slots=True)
class Retention:
    """Limits on a stream's retained events. Exceeding any of them folds the oldest events."""

    max_events: int = DEFAULT_MAX_EVENTS
    """Most events kept (at least 1: the newest event is never folded)."""
    max_bytes: int = DEFAULT_MAX_BYTES
    """Most bytes kept, as counted by `Event.size`."""
    ttl_s: float | None = DEFAULT_TTL_S
    """Events older than this many seconds are folded; None keeps them regardless of age."""
    max_text_chars: int = DEFAULT_MAX_TEXT_CHARS
    """Most characters of text (deltas and tool-call arguments) the stream may hold over its
    whole life: folding keeps all of it in the snapshot, so this, not the retained window,
    bounds a long stream's memory. An append past it is refused (``stream_too_large``)."""

    def __post_init__(self) -> None:
        if self.max_events < 1:
            raise ValueError("Retention.max_events must be at least 1")
        if self.max_bytes < 1:
            raise ValueError("Retention.max_bytes must be at least 1")
        if self.max_text_chars < 1:
            raise ValueError("Retention.max_text_chars must be at least 1")
        if self.ttl_s is not None and self.ttl_s <= 0:
            raise ValueError("Retention.ttl_s must be positive or None")


@dataclass(slots=True)
class Folded:
    """The state carried by events that left the log: what a ``snapshot`` tells a reader."""

    through_seq: int = 0
    """The last sequence number folded in; 0 when nothing was folded."""
    tokens: int = 0
    """Completion tokens carried by the folded events."""
    dropped: int = 0
    """Folded events that carry no text (messages, status): counted, not kept."""
    last_other_seq: int = 0
    """The last folded event that was not a ``delta``: a reader positioned after it can be
    caught up with plain text deltas instead of a snapshot."""
    _text: dict[Channel, TextBuffer] = field(default_factory=dict)
    _tool_calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    """Per index: ``index``, ``id`` and ``name`` when known, ``arguments`` (a `TextBuffer`)."""

    def fold(self, event: Event) -> None:
        """Absorb ``event``, which is leaving the log."""
        self.through_seq = event.seq
        self.tokens += event.tokens
        kind = event.kind
        if kind is _DELTA:
            buffer = self._text.get(event.channel)
            if buffer is None:
                buffer = self._text[event.channel] = TextBuffer()
            buffer.append(event.text)
            return
        self.last_other_seq = event.seq
        if kind is _TOOL_CALL:
            self._fold_tool_call(event)
        else:
            self.dropped += 1

    def _fold_tool_call(self, event: Event) -> None:
        data = event.data or {}
        index = int(data.get("index", 0))
        call = self._tool_calls.get(index)
        if call is None:
            call = self._tool_calls[index] = {"index": index, "arguments": TextBuffer()}
        for key in ("id", "name"):
            if key in data:
                call[key] = data[key]
        call["arguments"].append(event.text)

    @property
    def lengths(self) -> dict[Channel, int]:
        """Characters of folded text per channel."""
        return {channel: len(buffer) for channel, buffer in self._text.items()}

    @property
    def text_chars(self) -> int:
        """Characters of folded text, every channel and tool call's arguments together."""
        arguments = sum(len(call["arguments"]) for call in self._tool_calls.values())
        return sum(len(buffer) for buffer in self._text.values()) + arguments

    def text(self, channel: Channel) -> str:
        """All folded text of ``channel``."""
        buffer = self._text.get(channel)
        return "" if buffer is None else str(buffer)

    def tool_calls(self) -> list[dict[str, Any]]:
        """Folded tool calls, by index."""
        return [_call_dict(self._tool_calls[i]) for i in sorted(self._tool_calls)]

    def extended(self, events: list[Event]) -> Folded:
        """A copy of this state with ``events`` folded in (for full-stream snapshots)."""
        copy = Folded(self.through_seq, self.tokens, self.dropped, self.last_other_seq)
        for channel in self._text:
            copy._text[channel] = TextBuffer(self.text(channel))
        copy._tool_calls = {
            i: {**call, "arguments": TextBuffer(str(call["arguments"]))}
            for i, call in self._tool_calls.items()
        }
        for event in events:
            if not event.terminal:
                copy.fold(event)
        return copy

    @classmethod
    def from_event(cls, event: Event) -> Folded:
        """The state a ``snapshot`` event describes (its ``seq`` is the last seq folded in).

        A replica of a stream whose older history was folded elsewhere starts from it. Which
        of the folded events were not deltas is not in a snapshot, so ``last_other_seq`` is
        the snapshot's own seq: a reader behind it gets a snapshot, never a bare delta.
        """
        data = event.data or {}
        folded = cls(
            through_seq=event.seq,
            tokens=event.tokens,
            dropped=int(data.get("dropped", 0)),
            last_other_seq=event.seq,
        )
        for name, text in (data.get("text") or {}).items():
            if text:
                channel = Channel(name)
                folded._text[channel] = TextBuffer(text)
        for call in data.get("tool_calls") or ():
            arguments = TextBuffer(str(call.get("arguments", "")))
            folded._tool_calls[int(call["index"])] = {**call, "arguments": arguments}
        return folded

    def to_event(self, *, reset: bool = False) -> Event:
        """The ``snapshot`` event a reader receives; it replaces the reader's state."""
        data: dict[str, Any] = {
            "text": {channel.value: self.text(channel) for channel in Channel},
            "tool_calls": self.tool_calls(),
            "dropped": self.dropped,
            "reset": reset,
        }
        return Event(
            Kind.SNAPSHOT,
            data=data,
            lane=Lane.CONTROL,
            tokens=self.tokens,
            seq=self.through_seq,
        )


def _call_dict(call: dict[str, Any]) -> dict[str, Any]:
    """A folded tool call as a snapshot carries it: its arguments as one string."""
    return {**call, "arguments": str(call["arguments"])}
