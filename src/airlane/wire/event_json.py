"""Airlane's native JSON form of an event, shared by SSE, WebSocket and the streams API.

One flat object per event; ``kind`` says which other keys are present::

    {"seq": 7, "kind": "delta", "channel": "content", "text": "Hel"}
    {"seq": 8, "kind": "tool_call", "index": 0, "id": "call_1", "name": "f", "arguments": "{"}
    {"seq": 9, "kind": "message", "payload": {...}}
    {"seq": 10, "kind": "done", "finish_reason": "stop", "usage": {...}}
    {"seq": 6, "kind": "snapshot", "text": {"content": "...", "reasoning": ""}, ...}

A ``snapshot`` replaces the reader's state; everything else extends it.
"""

from __future__ import annotations

from typing import Any

import orjson

from airlane.core.events import Channel, Event, Kind, Lane
from airlane.wire.errors import DecodeError

__all__ = ["event_from_dict", "event_to_dict", "event_to_json"]

_PUBLISHABLE = {Kind.DELTA, Kind.TOOL_CALL, Kind.MESSAGE, Kind.STATUS, Kind.DONE, Kind.ERROR}
# Read per event encoded. On Python 3.11 a global is a third of the cost of `Kind.DELTA`, and
# a dict lookup a third of the cost of a member's `.value` (a descriptor written in Python).
_DELTA, _TOOL_CALL, _MESSAGE = Kind.DELTA, Kind.TOOL_CALL, Kind.MESSAGE
_KIND_VALUES = {kind: kind.value for kind in Kind}
_CHANNEL_VALUES = {channel: channel.value for channel in Channel}


def event_to_dict(event: Event) -> dict[str, Any]:
    """The JSON-compatible form of ``event``."""
    kind = event.kind
    out: dict[str, Any] = {"seq": event.seq, "kind": _KIND_VALUES[kind]}
    if kind is _DELTA:
        out["channel"] = _CHANNEL_VALUES[event.channel]
        out["text"] = event.text
    elif kind is _TOOL_CALL:
        out.update(event.data or {})
        out["arguments"] = event.text
    elif kind is _MESSAGE and event.raw is not None:
        out["payload"] = orjson.Fragment(event.raw)
    elif event.data:
        out.update(event.data)
    return out


def event_to_json(event: Event) -> bytes:
    """``event`` as compact JSON bytes."""
    raw = event.raw
    if raw is not None and event.kind is _MESSAGE:
        # What orjson makes of `event_to_dict`'s three keys, without the dict (a published
        # payload is a stream's every event: the load test's, a service's own JSON).
        return b'{"seq":%d,"kind":"message","payload":%b}' % (event.seq, raw)
    return orjson.dumps(event_to_dict(event))


def event_from_dict(obj: Any) -> Event:
    """Build an event a client publishes; raise `DecodeError` saying what is wrong."""
    if not isinstance(obj, dict):
        raise DecodeError("an event must be a JSON object")
    try:
        kind = Kind(obj.get("kind", "message"))
    except ValueError:
        raise DecodeError(f"unknown event kind {str(obj.get('kind'))[:40]!r}") from None
    if kind not in _PUBLISHABLE:
        raise DecodeError(f"events of kind {kind.value!r} cannot be published")
    lane = _lane(obj.get("lane"))
    if kind is Kind.DELTA:
        text = obj.get("text")
        if not isinstance(text, str):
            raise DecodeError("a delta needs a string 'text'")
        try:
            channel = Channel(obj.get("channel", "content"))
        except ValueError:
            raise DecodeError("'channel' must be 'content' or 'reasoning'") from None
        return Event(Kind.DELTA, text=text, channel=channel, lane=lane, tokens=1)
    if kind is Kind.TOOL_CALL:
        index, arguments = obj.get("index", 0), obj.get("arguments", "")
        if not isinstance(index, int) or not isinstance(arguments, str):
            raise DecodeError("a tool_call needs an integer 'index' and string 'arguments'")
        return Event.tool_call(index, arguments, call_id=obj.get("id"), name=obj.get("name"))
    if kind is Kind.MESSAGE:
        return Event(Kind.MESSAGE, data={"payload": obj.get("payload")}, lane=lane)
    data = {k: v for k, v in obj.items() if k not in ("kind", "seq", "lane")}
    return Event(kind, data=data, lane=Lane.CONTROL)


def _lane(value: Any) -> Lane:
    if value is None:
        return Lane.INTERACTIVE
    names = {lane.name.lower(): lane for lane in Lane}
    if isinstance(value, str) and value in names:
        return names[value]
    raise DecodeError("'lane' must be 'control', 'interactive' or 'bulk'")
