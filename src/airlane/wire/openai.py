"""The OpenAI chat completions wire format, built from Airlane events.

Pure functions from events to ``chat.completion.chunk`` and ``chat.completion`` JSON. The
gateway speaks this format on ``POST /v1/chat/completions`` so that the official SDKs and any
tool built for OpenAI-compatible servers work unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from airlane.core.events import Channel, Event, Kind
from airlane.core.text import TextBuffer

__all__ = ["DONE_SENTINEL", "ChatStreamState", "ChunkFactory", "error_body", "tool_call_delta"]

DONE_SENTINEL = b"[DONE]"
"""The last ``data:`` of an OpenAI stream."""


def error_body(
    message: str,
    *,
    type: str = "invalid_request_error",
    code: str | None = None,
    param: str | None = None,
) -> bytes:
    """An OpenAI-style error object: ``{"error": {"message", "type", "param", "code"}}``."""
    return orjson.dumps({"error": {"message": message, "type": type, "param": param, "code": code}})


def tool_call_delta(
    index: int, arguments: str, call_id: str | None = None, name: str | None = None
) -> dict[str, Any]:
    """One entry of a chunk's ``delta.tool_calls``: id, type and name only when known."""
    call: dict[str, Any] = {"index": index, "function": {"arguments": arguments}}
    if call_id is not None:
        call["id"] = call_id
        call["type"] = "function"
    if name is not None:
        call["function"]["name"] = name
    return call


_TEXT_KEYS = {Channel.CONTENT: b"content", Channel.REASONING: b"reasoning_content"}
# Read per event: a global is a third of the cost of `Kind.DELTA` on Python 3.11.
_DELTA, _TOOL_CALL = Kind.DELTA, Kind.TOOL_CALL
_TEXT_TAIL = b'},"finish_reason":null}]}'


@dataclass(frozen=True, slots=True)
class ChunkFactory:
    """Builds the chunks of one completion (the fields every chunk of it repeats)."""

    completion_id: str
    """The stream id, used as the completion id."""
    model: str
    """The model name echoed back."""
    created: int
    """Unix seconds when the completion was created."""
    _text_heads: dict[Channel, bytes] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # A text chunk is built for every delta a client reads: its bytes up to the text
        # are the same each time, so they are encoded once and the text spliced in (the
        # result is what `_chunk` makes of the same fields; a test holds them equal).
        common = self._chunk([])[: -len(b',"choices":[]}')]
        heads = {
            channel: common + b',"choices":[{"index":0,"delta":{"%b":' % key
            for channel, key in _TEXT_KEYS.items()
        }
        object.__setattr__(self, "_text_heads", heads)

    def _chunk(self, choices: list[dict[str, Any]], **extra: Any) -> bytes:
        return orjson.dumps(
            {
                "id": self.completion_id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "choices": choices,
                **extra,
            }
        )

    def role(self) -> bytes:
        """The opening chunk that announces the assistant role."""
        return self._chunk(
            [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]
        )

    def text(self, text: str, channel: Channel) -> bytes:
        """A content or reasoning delta."""
        return self._text_heads[channel] + orjson.dumps(text) + _TEXT_TAIL

    def tool_call(self, index: int, arguments: str, call_id: str | None, name: str | None) -> bytes:
        """A tool-call delta; the first one of a call carries its id and name."""
        call = tool_call_delta(index, arguments, call_id, name)
        return self._chunk([{"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": None}])

    def finish(self, finish_reason: str) -> bytes:
        """The chunk that carries ``finish_reason``."""
        return self._chunk([{"index": 0, "delta": {}, "finish_reason": finish_reason}])

    def usage(self, usage: dict[str, Any]) -> bytes:
        """The ``include_usage`` chunk: no choices, just usage (with Airlane's extras)."""
        return self._chunk([], usage=usage)

    def event_chunk(self, event: Event) -> bytes | None:
        """The chunk for a delta or tool-call event; None for kinds without one."""
        kind = event.kind
        if kind is _DELTA:
            return self.text(event.text, event.channel)
        if kind is _TOOL_CALL:
            data = event.data or {}
            return self.tool_call(
                int(data.get("index", 0)), event.text, data.get("id"), data.get("name")
            )
        return None


@dataclass(slots=True)
class _ToolCall:
    """A tool call as received so far."""

    id: str | None = None
    name: str | None = None
    arguments: TextBuffer = field(default_factory=TextBuffer)


@dataclass(slots=True)
class ChatStreamState:
    """What one client of a completion has received, so that a ``snapshot`` (sent when the
    client fell behind retention) can be turned into the append-only deltas OpenAI clients
    expect, and so that a non-streaming response can be assembled.

    Text and tool-call arguments are `TextBuffer` objects: a streaming client applies every
    delta, and appending to a plain string would copy the whole answer each time."""

    text: dict[Channel, TextBuffer] = field(
        default_factory=lambda: {channel: TextBuffer() for channel in Channel}
    )
    tool_calls: dict[int, _ToolCall] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None
    error: dict[str, Any] | None = None

    def apply(self, event: Event) -> list[Event]:
        """Absorb ``event``; return the append-only events that carry what was new."""
        kind = event.kind
        if kind is _DELTA:
            self.text[event.channel].append(event.text)
            return [event]
        if kind is _TOOL_CALL:
            self._add_tool_call(event.data or {}, event.text)
            return [event]
        if kind is Kind.SNAPSHOT:
            return self._catch_up(event.data or {})
        if kind is Kind.DONE:
            data = event.data or {}
            self.finish_reason = str(data.get("finish_reason", "stop"))
            self.usage = data.get("usage")
        elif kind is Kind.ERROR:
            self.error = dict(event.data or {})
            self.usage = self.error.pop("usage", None)
        return []

    def _add_tool_call(self, data: dict[str, Any], arguments: str) -> None:
        index = int(data.get("index", 0))
        call = self.tool_calls.get(index)
        if call is None:
            call = self.tool_calls[index] = _ToolCall()
        if data.get("id") is not None:
            call.id = data["id"]
        if data.get("name") is not None:
            call.name = data["name"]
        call.arguments.append(arguments)

    def _catch_up(self, snapshot: dict[str, Any]) -> list[Event]:
        out: list[Event] = []
        for channel in Channel:
            full = str(snapshot.get("text", {}).get(channel.value, ""))
            received = self.text[channel]
            missing = full[len(received) :]
            if missing:
                received.append(missing)
                out.append(Event.delta(missing, channel=channel, tokens=0))
        for call in snapshot.get("tool_calls", []):
            index = int(call["index"])
            known = self.tool_calls.get(index)
            start = len(known.arguments) if known is not None else 0
            missing = str(call.get("arguments", ""))[start:]
            if missing or known is None:
                self._add_tool_call(call, missing)
                out.append(
                    Event.tool_call(
                        index,
                        missing,
                        call_id=call.get("id") if known is None else None,
                        name=call.get("name") if known is None else None,
                    )
                )
        return out

    def completion(self, factory: ChunkFactory) -> dict[str, Any]:
        """The non-streaming ``chat.completion`` object."""
        message: dict[str, Any] = {"role": "assistant", "content": str(self.text[Channel.CONTENT])}
        if self.text[Channel.REASONING]:
            message["reasoning_content"] = str(self.text[Channel.REASONING])
        if self.tool_calls:
            message["content"] = message["content"] or None
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": str(call.arguments)},
                }
                for _, call in sorted(self.tool_calls.items())
            ]
        return {
            "id": factory.completion_id,
            "object": "chat.completion",
            "created": factory.created,
            "model": factory.model,
            "choices": [
                {"index": 0, "message": message, "finish_reason": self.finish_reason or "stop"}
            ],
            "usage": self.usage or {},
        }
