"""What the clients hand to callers: native stream events and chat deltas.

`StreamEvent` is one event of Airlane's native JSON form (`airlane.wire.event_json`), as read
from ``GET /v1/streams/{id}/events`` or a WebSocket ``event`` message, with its resume token.
`ChatDelta` is one piece of a chat completion, whichever wire it came over: the OpenAI chunks of
``POST /v1/chat/completions`` or, after a resume, native events.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from airlane.client.errors import ProtocolViolation

__all__ = ["TERMINAL_KINDS", "ChatDelta", "StreamEvent", "chat_deltas_from_chunk"]

TERMINAL_KINDS = frozenset({"done", "error"})
"""Event kinds after which a stream has nothing more to say."""


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """One native event. ``kind`` stays a string so that a newer gateway's kinds pass through."""

    seq: int
    """Position in the stream (a coalesced delta carries the last seq it covers)."""
    kind: str
    """``delta``, ``tool_call``, ``message``, ``status``, ``usage``, ``error``, ``done`` or
    ``snapshot``."""
    data: dict[str, Any]
    """The whole event object as sent."""
    id: str | None = None
    """The resume token ``<epoch>:<seq>``: pass it back to continue after this event."""

    @property
    def terminal(self) -> bool:
        """True for ``done`` and ``error``: nothing follows."""
        return self.kind in TERMINAL_KINDS

    @property
    def text(self) -> str:
        """The text of a ``delta`` (or argument delta of a ``tool_call``); ``""`` otherwise."""
        if self.kind == "delta":
            return str(self.data.get("text", ""))
        if self.kind == "tool_call":
            return str(self.data.get("arguments", ""))
        return ""

    @property
    def channel(self) -> str:
        """Which text a ``delta`` extends: ``content`` or ``reasoning``."""
        return str(self.data.get("channel", "content"))

    @classmethod
    def from_json(cls, raw: str | bytes, id: str | None = None) -> StreamEvent:
        """Parse one native event object.

        Raises:
            ProtocolViolation: if ``raw`` is not a JSON object with an integer ``seq`` and a
                string ``kind``.
        """
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise ProtocolViolation(f"event is not valid JSON: {exc}") from None
        return cls.from_dict(obj, id)

    @classmethod
    def from_dict(cls, obj: Any, id: str | None = None) -> StreamEvent:
        """Build from an already decoded object; see `from_json`."""
        if not isinstance(obj, dict):
            raise ProtocolViolation("an event must be a JSON object")
        seq, kind = obj.get("seq"), obj.get("kind")
        if not isinstance(seq, int) or not isinstance(kind, str):
            raise ProtocolViolation("an event needs an integer 'seq' and a string 'kind'")
        return cls(seq, kind, obj, id)


@dataclass(frozen=True, slots=True)
class ChatDelta:
    """One piece of a streamed chat completion.

    Appending every ``text`` of one ``channel`` gives that channel's exact text, except where
    ``replace`` is set: then ``text`` (or the tool call's ``arguments``) is the whole text so
    far, because a resume landed on a snapshot that does not extend what was already received.
    """

    text: str = ""
    """New text (empty for a chunk that only carries a role, tool call or finish reason)."""
    channel: str = "content"
    """``content`` or ``reasoning``."""
    id: str | None = None
    """Resume token of the event this piece came from, when the wire sent one."""
    replace: bool = False
    """``text`` (or the arguments of ``tool_calls``) replaces what came before."""
    tool_calls: tuple[dict[str, Any], ...] = field(default=())
    """OpenAI-style tool call deltas: ``{"index", "id"?, "function": {"name"?, "arguments"}}``."""
    finish_reason: str | None = None
    """Set on the last piece: ``stop``, ``length``, ``tool_calls``, ``cancelled`` ..."""
    usage: dict[str, Any] | None = None
    """Token usage, when the gateway reported it."""
    resumed: bool = False
    """True if this piece arrived through a resume rather than the original response."""


def chat_deltas_from_chunk(chunk: Any, id: str | None = None) -> list[ChatDelta]:
    """The pieces in one OpenAI ``chat.completion.chunk`` object.

    Raises:
        ProtocolViolation: if ``chunk`` is not shaped like a chunk.
    """
    if not isinstance(chunk, dict) or not isinstance(chunk.get("choices", []), list):
        raise ProtocolViolation("a chat chunk must be an object with a 'choices' array")
    out: list[ChatDelta] = []
    for choice in chunk.get("choices") or ():
        if isinstance(choice, dict):
            out += _choice_deltas(choice, id)
    usage = chunk.get("usage")
    if isinstance(usage, dict):
        out.append(ChatDelta(id=id, usage=usage))
    return out


def _choice_deltas(choice: dict[str, Any], id: str | None) -> list[ChatDelta]:
    # A role-only chunk (the first one) carries nothing a caller needs: no piece for it.
    delta = choice.get("delta") or {}
    finish = choice.get("finish_reason")
    out: list[ChatDelta] = []
    if delta.get("reasoning_content"):
        out.append(ChatDelta(str(delta["reasoning_content"]), "reasoning", id))
    calls = delta.get("tool_calls") or ()
    if delta.get("content") or calls or finish:
        text = str(delta.get("content") or "")
        out.append(ChatDelta(text, "content", id, tool_calls=tuple(calls), finish_reason=finish))
    return out
