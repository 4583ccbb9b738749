"""`TextAccumulator`: a stream's exact text, rebuilt from its events.

The rules are the stream model's (docs/streams.md): a ``snapshot`` *replaces* the reader's
state (text per channel and tool calls so far); ``delta`` and ``tool_call`` events extend it;
``done`` and ``error`` end it. An event at or before the last position already applied, in the
same epoch, is ignored, so a resume that overlaps what was received cannot duplicate text.
"""

from __future__ import annotations

from typing import Any

from airlane.client.events import ChatDelta, StreamEvent
from airlane.core.text import TextBuffer

__all__ = ["TextAccumulator"]


class TextAccumulator:
    """Applies events in order and keeps the text, tool calls and outcome they describe."""

    __slots__ = ("_text", "_tool_calls", "epoch", "error", "finish_reason", "seq", "usage")

    def __init__(self) -> None:
        self._text: dict[str, TextBuffer] = {}
        self._tool_calls: dict[int, dict[str, Any]] = {}
        self.epoch: str | None = None
        """Epoch of the last event applied (from its resume token), if known."""
        self.seq = 0
        """Sequence number of the last event applied."""
        self.finish_reason: str | None = None
        """How the stream finished, once a ``done`` event was applied."""
        self.usage: dict[str, Any] | None = None
        """The usage the terminal event reported."""
        self.error: dict[str, Any] | None = None
        """The ``error`` event's payload, if the stream failed."""

    # -- reading ----------------------------------------------------------------------------

    def text(self, channel: str = "content") -> str:
        """All text of ``channel`` so far."""
        buffer = self._text.get(channel)
        return "" if buffer is None else str(buffer)

    @property
    def content(self) -> str:
        """The answer text."""
        return self.text("content")

    @property
    def reasoning(self) -> str:
        """The reasoning text, for models that stream it."""
        return self.text("reasoning")

    @property
    def tool_calls(self) -> list[dict[str, Any]]:
        """Tool calls so far, by index: ``{"index", "id"?, "name"?, "arguments"}``."""
        return [
            {**call, "arguments": str(call["arguments"])}
            for _, call in sorted(self._tool_calls.items())
        ]

    @property
    def ended(self) -> bool:
        """True once a terminal event was applied."""
        return self.finish_reason is not None or self.error is not None

    # -- applying ---------------------------------------------------------------------------

    def apply(self, event: StreamEvent) -> bool:
        """Apply one native event; False if it was already applied (and was ignored)."""
        epoch = event.id.rpartition(":")[0] if event.id else self.epoch
        same_history = epoch == self.epoch or self.epoch is None or epoch is None
        if same_history and event.seq <= self.seq and self.seq > 0:
            return False
        self.epoch, self.seq = epoch, event.seq
        kind, data = event.kind, event.data
        if kind == "delta":
            self._append(event.channel, event.text)
        elif kind == "tool_call":
            self._extend_call(data.get("index", 0), data.get("id"), data.get("name"), event.text)
        elif kind == "snapshot":
            self._replace(data)
        elif kind == "done":
            self.finish_reason = str(data.get("finish_reason") or "stop")
            self.usage = data.get("usage")
        elif kind == "error":
            self.error = dict(data)
        return True

    def apply_delta(self, delta: ChatDelta) -> None:
        """Apply one piece of an OpenAI-format chat stream."""
        if delta.replace and not delta.tool_calls:
            self._text[delta.channel] = TextBuffer(delta.text)
        elif delta.text:
            self._append(delta.channel, delta.text)
        for call in delta.tool_calls:
            function = call.get("function") or {}
            index = call.get("index", 0)
            if delta.replace:
                self._tool_calls.pop(index, None)
            arguments = str(function.get("arguments") or "")
            self._extend_call(index, call.get("id"), function.get("name"), arguments)
        if delta.finish_reason is not None:
            self.finish_reason = delta.finish_reason
        if delta.usage is not None:
            self.usage = delta.usage
        if delta.id:
            epoch, _, seq = delta.id.rpartition(":")
            self.epoch, self.seq = epoch, int(seq) if seq.isdigit() else self.seq

    def _append(self, channel: str, text: str) -> None:
        buffer = self._text.get(channel)
        if buffer is None:
            buffer = self._text[channel] = TextBuffer()
        buffer.append(text)

    def _extend_call(self, index: Any, call_id: Any, name: Any, arguments: str) -> None:
        key = index if isinstance(index, int) else 0
        call = self._tool_calls.get(key)
        if call is None:
            call = self._tool_calls[key] = {"index": key, "arguments": TextBuffer()}
        if call_id is not None:
            call["id"] = call_id
        if name is not None:
            call["name"] = name
        call["arguments"].append(arguments)

    def _replace(self, data: dict[str, Any]) -> None:
        texts = data.get("text") or {}
        self._text = {str(key): TextBuffer(str(text)) for key, text in texts.items() if text}
        self._tool_calls = {}
        for call in data.get("tool_calls") or ():
            if isinstance(call, dict):
                arguments = str(call.get("arguments") or "")
                self._extend_call(call.get("index", 0), call.get("id"), call.get("name"), arguments)
