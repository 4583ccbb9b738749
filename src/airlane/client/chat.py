"""Turning native events into `ChatDelta` pieces, for a chat stream that had to resume.

``POST /v1/chat/completions`` speaks OpenAI chunks; the resume path (``GET
/v1/streams/{id}/events``) speaks native events. `deltas_from_event` bridges the two so that a
caller of `AirlaneClient.chat_stream` sees one uninterrupted sequence of pieces. It applies each
event to the stream's `TextAccumulator` first, so a ``snapshot`` becomes exactly the text the
caller has not seen yet (or, if it does not extend what was seen, a replacing piece).
"""

from __future__ import annotations

from airlane.client.accumulator import TextAccumulator
from airlane.client.errors import StreamFailed
from airlane.client.events import ChatDelta, StreamEvent
from airlane.wire.openai import tool_call_delta

__all__ = ["deltas_from_event"]

_CHANNELS = ("reasoning", "content")


def deltas_from_event(event: StreamEvent, state: TextAccumulator) -> list[ChatDelta]:
    """Apply ``event`` to ``state``; return the pieces it adds for a chat caller.

    Raises:
        StreamFailed: if ``event`` is an ``error`` event.
    """
    if event.kind == "snapshot":
        return _snapshot_deltas(event, state)
    if not state.apply(event):
        return []
    data = event.data
    if event.kind == "delta":
        return [ChatDelta(event.text, event.channel, event.id, resumed=True)]
    if event.kind == "tool_call":
        call = tool_call_delta(data.get("index", 0), event.text, data.get("id"), data.get("name"))
        return [ChatDelta(id=event.id, tool_calls=(call,), resumed=True)]
    if event.kind == "done":
        finish = state.finish_reason
        return [ChatDelta(id=event.id, finish_reason=finish, usage=state.usage, resumed=True)]
    if event.kind == "error":
        raise StreamFailed(str(data.get("message", "the stream failed")), code=data.get("code"))
    return []


def _snapshot_deltas(event: StreamEvent, state: TextAccumulator) -> list[ChatDelta]:
    texts = {channel: state.text(channel) for channel in _CHANNELS}
    calls = {call["index"]: call for call in state.tool_calls}
    if not state.apply(event):
        return []
    out = []
    for channel in _CHANNELS:
        before, after = texts[channel], state.text(channel)
        if after.startswith(before):
            if len(after) > len(before):
                out.append(ChatDelta(after[len(before) :], channel, event.id, resumed=True))
        else:
            out.append(ChatDelta(after, channel, event.id, replace=True, resumed=True))
    for call in state.tool_calls:
        seen = calls.get(call["index"], {}).get("arguments", "")
        arguments = call["arguments"]
        extends = arguments.startswith(seen)
        suffix = arguments[len(seen) :] if extends else arguments
        if suffix or call["index"] not in calls:
            piece = tool_call_delta(call["index"], suffix, call.get("id"), call.get("name"))
            replace = not extends
            out.append(ChatDelta(id=event.id, tool_calls=(piece,), replace=replace, resumed=True))
    return out
