"""What an event a client publishes may hold, so that every event accepted can be delivered on
every wire and is counted at the bytes it holds.

- **Depth**: JSON nested at most `MAX_EVENT_DEPTH` levels (objects and arrays). Deeper ones
  cannot cross every wire: protobuf stops at 100 message levels, and a ``Struct`` takes two
  per JSON level (a ``Value`` holding a ``Struct`` or ``ListValue``); orjson stops at 255, and
  a reader's JSON parser may stop sooner. Refused at publish with ``invalid_event`` (400).
- **Size**: at most ``max_bytes`` (`MAX_EVENT_BYTES` by default) of encoded JSON (a delta's
  or tool call's text in UTF-8); refused with ``event_too_large`` (413).

A payload's encoded size is measured here, once, and kept with the event (`Event.held`), so
that a stream's byte retention counts what its events hold, not only their text.
"""

from __future__ import annotations

from typing import Any

import orjson

from airlane.core import Event, Kind
from airlane.core.errors import AirlaneError, BadRequest, ErrorCode

__all__ = [
    "MAX_BODY_DEPTH",
    "MAX_EVENT_BYTES",
    "MAX_EVENT_DEPTH",
    "MAX_SCHEMA_DEPTH",
    "json_depth",
    "publishable",
]

MAX_EVENT_DEPTH = 32
"""The deepest nesting of objects and arrays a published event may hold."""

MAX_EVENT_BYTES = 1024 * 1024
"""The most bytes a published event may hold, encoded."""

MAX_BODY_DEPTH = 100
"""The deepest nesting a request body or WebSocket message may hold (deeper than an event,
whose envelope adds a few levels): what passes it is refused before anything looks inside."""

MAX_SCHEMA_DEPTH = 48
"""The deepest nesting a JSON Schema may hold (validation recurses per level)."""


def publishable(event: Event, max_bytes: int = MAX_EVENT_BYTES) -> Event:
    """``event``, its payload's size recorded (`Event.held`), or the refusal that says which
    limit it passes."""
    kind = event.kind
    if kind is Kind.DELTA or kind is Kind.TOOL_CALL:
        _check_size(len(event.text.encode()), max_bytes)
        if event.data:
            _check_json(event.data, max_bytes)
        return event
    if kind is Kind.MESSAGE:
        if event.raw is not None:
            _check_size(len(event.raw), max_bytes)
            return event
        data = event.data or {}
        # A bridged message carries more than its payload (topic, payload_base64, ...): all
        # of it is held, and all of it counts against the limit and byte retention.
        payload = data.get("payload") if data.keys() <= {"payload"} else data
        event.held = len(_check_json(payload, max_bytes))
        return event
    if event.data:
        event.held = len(_check_json(event.data, max_bytes))
    return event


def json_depth(value: Any, limit: int = MAX_EVENT_DEPTH) -> int:
    """How deep ``value`` nests objects and arrays (a scalar: 0), counted without recursion
    and only as far as ``limit + 1`` (what passes the limit is not walked further)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        depth += 1
        if depth > deepest:
            deepest = depth
            if deepest > limit:
                return deepest
        stack.extend((child, depth) for child in children)
    return deepest


def _check_json(value: Any, max_bytes: int) -> bytes:
    """``value`` encoded, after the depth check; the size checked too."""
    if json_depth(value) > MAX_EVENT_DEPTH:
        raise BadRequest(
            f"the event nests deeper than {MAX_EVENT_DEPTH} levels of objects and arrays",
            code=ErrorCode.INVALID_EVENT,
        )
    try:
        encoded = orjson.dumps(value)
    except TypeError as exc:  # not JSON (a key that is not a string, a NaN from gRPC...)
        raise BadRequest(f"the event is not JSON: {exc}", code=ErrorCode.INVALID_EVENT) from None
    _check_size(len(encoded), max_bytes)
    return encoded


def _check_size(size: int, max_bytes: int) -> None:
    if size > max_bytes:
        raise AirlaneError(
            f"the event holds {size:,} bytes; at most {max_bytes:,} may be published",
            code=ErrorCode.EVENT_TOO_LARGE,
        )
