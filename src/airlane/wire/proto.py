"""Between Airlane's native values and the Protobuf contract (``proto/airlane/v1``): shared by
the gRPC transport, the gRPC client and the transcoding tests.

Events leave as ``airlane.v1.Event`` (text deltas and tool-call deltas as typed messages,
everything else as the same fields the native JSON carries); published events and chat
requests arrive as Protobuf and are turned into the native JSON form first, so that they go
through the same validation as on every other wire (`airlane.wire.event_json.event_from_dict`,
`airlane.gateway.chat_request.parse_chat_request`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
from google.protobuf import json_format

from airlane.core import Channel, Event, Kind, Lane, Position, StreamInfo
from airlane.v1 import events_pb2, service_pb2
from airlane.wire.errors import DecodeError

__all__ = [
    "ERROR_CODE_METADATA",
    "StreamEventWriter",
    "chat_body",
    "chat_request_message",
    "event_bytes",
    "event_dict",
    "event_message",
    "event_to_proto",
    "info_dict",
    "info_to_proto",
    "position_from_proto",
    "stream_event",
]

ERROR_CODE_METADATA = "airlane-error-code"
"""Trailing metadata key of a refused gRPC call: the gateway's error code (``overloaded``,
``stream_not_found`` ...), the same as the HTTP API's ``error.code``; one status can stand for
several codes (``UNAVAILABLE`` is both "unreachable" and "overloaded, nothing started")."""

_KIND = {kind: events_pb2.Kind.Value(f"KIND_{kind.name}") for kind in Kind}
_KIND_NAME = {value: kind.value for kind, value in _KIND.items()}
_LANE = {lane: events_pb2.Lane.Value(f"LANE_{lane.name}") for lane in Lane}
_LANE_NAME = {value: lane.name.lower() for lane, value in _LANE.items()}
_CHANNEL = {channel: events_pb2.Channel.Value(f"CHANNEL_{channel.name}") for channel in Channel}
_CHANNEL_NAME = {value: channel.value for channel, value in _CHANNEL.items()}
_CACHE_KEY = "grpc.event"


def event_to_proto(event: Event) -> events_pb2.Event:
    """``event`` as an ``airlane.v1.Event``; its serialized form is cached on the event, so
    that N gRPC subscribers cost one conversion."""
    cached = event.cached(_CACHE_KEY)
    if cached is not None:
        decoded: events_pb2.Event = events_pb2.Event.FromString(cached)
        return decoded
    message = events_pb2.Event(seq=event.seq, kind=_KIND[event.kind], lane=_LANE[event.lane])
    kind = event.kind
    if kind is Kind.DELTA:
        message.delta.channel = _CHANNEL[event.channel]
        message.delta.text = event.text
    elif kind is Kind.TOOL_CALL:
        data = event.data or {}
        call = message.tool_call
        call.index = int(data.get("index", 0))
        call.id = str(data.get("id") or "")
        call.name = str(data.get("name") or "")
        call.arguments = event.text
    elif kind is Kind.MESSAGE:
        if event.raw is not None:
            message.payload_json = event.raw.decode()
        else:
            json_format.ParseDict(_payload(event), message.payload)
    elif event.data:
        message.fields.update(event.data)
    event.cache(_CACHE_KEY, message.SerializeToString())
    return message


def _payload(event: Event) -> Any:
    return (event.data or {}).get("payload")


def event_bytes(event: Event) -> bytes:
    """The serialized ``airlane.v1.Event`` of ``event`` (converted once, then cached)."""
    cached = event.cached(_CACHE_KEY)
    if cached is None:
        event_to_proto(event)
        cached = event.cached(_CACHE_KEY)
        assert cached is not None
    return cached


def _varint(value: int) -> bytes:
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(tag: int, data: bytes) -> bytes:
    """A length-delimited field: its key byte, the length, the bytes."""
    return b"".join((bytes((tag,)), _varint(len(data)), data))


class StreamEventWriter:
    """Serializes the ``airlane.v1.StreamEvent`` of each event of one stream without building
    a message object: the stream id and epoch fields are encoded once, the event's own bytes
    come from its cache (shared by every gRPC reader), and the rest is a few varints. The
    bytes equal ``stream_event(...).SerializeToString()``."""

    __slots__ = ("_epoch", "_head")

    def __init__(self, stream_id: str, epoch: str) -> None:
        self._head = _field(0x0A, stream_id.encode())  # StreamEvent.stream_id = 1
        self._epoch = _field(0x0A, epoch.encode()) if epoch else b""  # Position.epoch = 1

    def __call__(self, event: Event) -> bytes:
        position = self._epoch + b"\x10" + _varint(event.seq)  # Position.seq = 2
        body = event_bytes(event)
        return b"".join((self._head, _field(0x12, position), b"\x1a", _varint(len(body)), body))


def stream_event(stream_id: str, epoch: str, event: Event) -> events_pb2.StreamEvent:
    """What a subscriber receives: the stream, the position to resume after, the event."""
    return events_pb2.StreamEvent(
        stream_id=stream_id,
        position=events_pb2.Position(epoch=epoch, seq=event.seq),
        event=event_to_proto(event),
    )


def event_dict(message: events_pb2.Event) -> dict[str, Any]:
    """A published ``airlane.v1.Event`` in the native JSON form (for ``event_from_dict``)."""
    kind = _KIND_NAME.get(message.kind)
    if kind is None:
        raise DecodeError("an event needs a kind (KIND_UNSPECIFIED is not one)")
    out: dict[str, Any] = {"kind": kind}
    if message.lane in _LANE_NAME:
        out["lane"] = _LANE_NAME[message.lane]
    body = message.WhichOneof("body")
    if body == "delta":
        out["text"] = message.delta.text
        out["channel"] = _CHANNEL_NAME.get(message.delta.channel, "content")
    elif body == "tool_call":
        call = message.tool_call
        out.update(index=call.index, arguments=call.arguments)
        if call.id:
            out["id"] = call.id
        if call.name:
            out["name"] = call.name
    elif body == "payload":
        out["payload"] = _whole_numbers(json_format.MessageToDict(message.payload))
    elif body == "payload_json":
        try:
            out["payload"] = orjson.loads(message.payload_json)
        except orjson.JSONDecodeError as exc:
            raise DecodeError(f"payload_json is not JSON: {exc}") from None
    elif body == "fields":
        out.update(_whole_numbers(json_format.MessageToDict(message.fields)))
    return out


_EXACT = 2**53  # doubles hold every integer up to here exactly


def _whole_numbers(value: Any) -> Any:
    """``google.protobuf.Value`` keeps every number as a double: give integral ones back as
    ints, so that ``{"step": 1}`` published over gRPC reads ``1`` (not ``1.0``) on every wire.
    (Integers beyond 2**53 cannot survive a double; send them as strings.)"""
    if isinstance(value, float):
        return int(value) if value.is_integer() and abs(value) <= _EXACT else value
    if isinstance(value, dict):
        return {key: _whole_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_whole_numbers(item) for item in value]
    return value


def position_from_proto(position: events_pb2.Position) -> Position | None:
    """A resume position, or None (from the start) when none was sent.

    Raises:
        BadResumeToken: the epoch is malformed.
    """
    if not position.epoch:
        return None
    return Position.parse(f"{position.epoch}:{position.seq}")


def info_to_proto(info: StreamInfo) -> service_pb2.StreamInfo:
    """A stream's status as ``airlane.v1.StreamInfo`` (from the same dict the HTTP API sends)."""
    body = info.to_dict()
    message = service_pb2.StreamInfo(
        id=body["id"],
        epoch=body["epoch"],
        last_seq=body["last_seq"],
        first_retained_seq=body["first_retained_seq"],
        resume_token=body["resume_token"],
        ended=body["ended"],
        subscribers=body["subscribers"],
        retained_events=body["retained_events"],
        retained_bytes=body["retained_bytes"],
    )
    if body["finish_reason"] is not None:
        message.finish_reason = body["finish_reason"]
    message.usage.update(body["usage"] or {})
    return message


def info_dict(message: service_pb2.StreamInfo) -> dict[str, Any]:
    """``airlane.v1.StreamInfo`` in the HTTP API's JSON form."""
    body: dict[str, Any] = json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    for key in ("last_seq", "first_retained_seq", "retained_events", "retained_bytes"):
        body[key] = int(body[key])  # proto3 JSON writes 64-bit integers as strings
    body.setdefault("finish_reason", None)
    body["usage"] = _whole_numbers(body.get("usage") or {})
    return body


def chat_body(request: service_pb2.ChatCompletionRequest) -> dict[str, Any]:
    """The OpenAI JSON body a ``ChatCompletionRequest`` stands for (``extra`` merged in)."""
    body: dict[str, Any] = json_format.MessageToDict(request, preserving_proto_field_name=True)
    extra = body.pop("extra", None) or {}
    if "seed" in body:  # proto3 JSON writes int64 as a string
        body["seed"] = int(body["seed"])
    for key, value in extra.items():
        body.setdefault(key, value)
    return body


_CHAT_FIELDS = {field.name for field in service_pb2.ChatCompletionRequest.DESCRIPTOR.fields}


def chat_request_message(body: Mapping[str, Any]) -> service_pb2.ChatCompletionRequest:
    """An OpenAI chat request body as ``ChatCompletionRequest``: fields the contract does not
    name go into ``extra`` (forwarded upstream unchanged). The reverse of `chat_body`.

    Raises:
        google.protobuf.json_format.ParseError: a field of the wrong type.
    """
    fields = dict(body)
    extra = {key: fields.pop(key) for key in list(fields) if key not in _CHAT_FIELDS}
    if extra:
        fields["extra"] = extra
    message: service_pb2.ChatCompletionRequest = json_format.ParseDict(
        fields, service_pb2.ChatCompletionRequest()
    )
    return message


_KINDS = {name.removeprefix("KIND_").lower(): value for name, value in events_pb2.Kind.items()}
_LANES = {name.removeprefix("LANE_").lower(): value for name, value in events_pb2.Lane.items()}
_CHANNELS = {
    name.removeprefix("CHANNEL_").lower(): value for name, value in events_pb2.Channel.items()
}


def event_message(event: Mapping[str, Any]) -> events_pb2.Event:
    """A native event dict as an ``airlane.v1.Event`` (the reverse of the service's reading)."""
    fields = dict(event)
    kind = str(fields.pop("kind", "message"))
    fields.pop("seq", None)
    message = events_pb2.Event(
        kind=_KINDS.get(kind, 0), lane=_LANES.get(str(fields.pop("lane", "")), 0)
    )
    if kind == "delta":
        message.delta.text = str(fields.get("text", ""))
        message.delta.channel = _CHANNELS.get(str(fields.get("channel", "content")), 0)
    elif kind == "tool_call":
        call = message.tool_call
        call.index = int(fields.get("index", 0))
        call.id, call.name = str(fields.get("id") or ""), str(fields.get("name") or "")
        call.arguments = str(fields.get("arguments", ""))
    elif kind == "message":
        json_format.ParseDict(fields.get("payload"), message.payload)
    elif fields:
        message.fields.update(fields)
    return message
