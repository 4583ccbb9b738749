"""The data MIME types an RSocket connection may choose in SETUP: JSON, MessagePack and
Protobuf (`airlane.transports.rsocket.codec_proto`).

A codec turns a route's request into the object the routes take (`DataCodec.request`), and
answers, a generation's first payload, an agent session's commands and answers, and events
back into bytes. JSON and MessagePack carry one object per payload, whatever the route; events
go out in Airlane's native event form (`airlane.wire.event_json`), encoded once per event and
codec and shared by every RSocket reader of it.
"""

from __future__ import annotations

from typing import Any

import msgspec
import orjson

from airlane.core import Event, Kind
from airlane.core.errors import BadRequest, ErrorCode
from airlane.wire.event_json import event_to_dict, event_to_json
from airlane.wire.limits import MAX_BODY_DEPTH, json_depth

__all__ = ["JSON", "MSGPACK", "DataCodec", "ObjectCodec", "codec_for"]

_TOO_DEEP = f"the request nests deeper than {MAX_BODY_DEPTH} levels"


class DataCodec:
    """One data encoding. See the module docstring."""

    def __init__(self, name: str, mime: str) -> None:
        self.name = name
        """``json``, ``msgpack`` or ``protobuf``."""
        self.mime = mime
        """The MIME type this codec was chosen by."""
        self._cache_key = f"rsocket.{name}"

    def request(self, route: str, data: bytes) -> dict[str, Any]:
        """The object ``route``'s request carries; `BadRequest` if it cannot be read."""
        raise NotImplementedError

    def answer(self, route: str, obj: Any) -> bytes:
        """``route``'s answer."""
        raise NotImplementedError

    def started(self, stream_id: str, epoch: str) -> bytes:
        """A generation's first payload: the stream it runs in."""
        raise NotImplementedError

    def command(self, data: bytes) -> dict[str, Any]:
        """An agent session's command, as ``{"op": ..., "id"?: ...}``."""
        raise NotImplementedError

    def reply(self, obj: dict[str, Any]) -> bytes:
        """An agent session's answer (``{"op": ..., ...}``)."""
        raise NotImplementedError

    def envelope(self, stream_id: str, epoch: str, event: Event) -> bytes:
        """An agent session's event of a followed stream."""
        raise NotImplementedError

    def event(self, event: Event) -> bytes:
        """``event`` in this encoding, encoded once (cached on the event)."""
        data = event.cached(self._cache_key)
        if data is None:
            data = event.cache(self._cache_key, self._event(event))
        return data

    def _event(self, event: Event) -> bytes:
        raise NotImplementedError


class ObjectCodec(DataCodec):
    """JSON or MessagePack: one object per payload, the same for every route."""

    def request(self, route: str, data: bytes) -> dict[str, Any]:
        body = self._object(data)
        if not isinstance(body, dict):
            raise BadRequest("the request data must be an object")
        return body

    def answer(self, route: str, obj: Any) -> bytes:
        return self.encode(obj)

    def started(self, stream_id: str, epoch: str) -> bytes:
        return self.encode({"kind": "started", "seq": 0, "stream_id": stream_id, "epoch": epoch})

    def command(self, data: bytes) -> dict[str, Any]:
        body = self._object(data)
        if not isinstance(body, dict):
            raise BadRequest("a command must be an object with an 'op'")
        return body

    def reply(self, obj: dict[str, Any]) -> bytes:
        return self.encode(obj)

    def _object(self, data: bytes) -> Any:
        """The object ``data`` holds, bounded in depth."""
        if not data:
            return {}
        try:
            obj = self.decode(data)
        except RecursionError:  # MessagePack nested past the interpreter's stack
            raise BadRequest(_TOO_DEEP, code=ErrorCode.INVALID_MESSAGE) from None
        if json_depth(obj, MAX_BODY_DEPTH) > MAX_BODY_DEPTH:
            raise BadRequest(_TOO_DEEP, code=ErrorCode.INVALID_MESSAGE)
        return obj

    def decode(self, data: bytes) -> Any:
        """``data`` as an object; `BadRequest` if it is not in this encoding."""
        raise NotImplementedError

    def encode(self, obj: Any) -> bytes:
        """``obj`` in this encoding."""
        raise NotImplementedError


class _Json(ObjectCodec):
    def decode(self, data: bytes) -> Any:
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise BadRequest(
                f"the request data is not JSON: {exc}", code=ErrorCode.INVALID_JSON
            ) from None

    def encode(self, obj: Any) -> bytes:
        return orjson.dumps(obj)

    def _event(self, event: Event) -> bytes:
        return event_to_json(event)

    def envelope(self, stream_id: str, epoch: str, event: Event) -> bytes:
        # Spliced: the event's bytes are the ones every reader shares.
        return b"".join(
            (b'{"stream_id":', orjson.dumps(stream_id), b',"event":', self.event(event), b"}")
        )


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder()


class _MessagePack(ObjectCodec):
    def decode(self, data: bytes) -> Any:
        try:
            return _decoder.decode(data)
        except msgspec.DecodeError as exc:
            raise BadRequest(f"the request data is not MessagePack: {exc}") from None

    def encode(self, obj: Any) -> bytes:
        return _encoder.encode(obj)

    def _event(self, event: Event) -> bytes:
        body = event_to_dict(event)
        if event.kind is Kind.MESSAGE and event.raw is not None:
            body["payload"] = orjson.loads(event.raw)  # a JSON fragment: MessagePack needs it
        return _encoder.encode(body)

    def envelope(self, stream_id: str, epoch: str, event: Event) -> bytes:
        return _encoder.encode({"stream_id": stream_id, "event": msgspec.Raw(self.event(event))})


JSON: DataCodec = _Json("json", "application/json")
MSGPACK: DataCodec = _MessagePack("msgpack", "application/x-msgpack")

_BY_MIME = {
    "application/json": JSON,
    "application/x-msgpack": MSGPACK,
    "application/msgpack": MSGPACK,
    "application/vnd.msgpack": MSGPACK,
}
_PROTOBUF_MIMES = frozenset(
    {"application/x-protobuf", "application/protobuf", "application/vnd.google.protobuf"}
)


def codec_for(mime: str) -> DataCodec | None:
    """The codec for a SETUP's data MIME type (parameters such as ``charset`` ignored), or
    None when Airlane does not speak it."""
    name = mime.split(";", 1)[0].strip().lower()
    if name in _PROTOBUF_MIMES:
        from airlane.transports.rsocket.codec_proto import PROTOBUF  # protobuf: only here

        return PROTOBUF
    return _BY_MIME.get(name)
