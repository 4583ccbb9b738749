"""The data MIME types an RSocket connection may choose in SETUP: JSON and MessagePack.

Requests carry one object in the chosen encoding; events go out in Airlane's native event form
(`airlane.wire.event_json`), encoded once per event and encoding and shared by every RSocket
reader of it.
"""

from __future__ import annotations

from typing import Any

import msgspec
import orjson

from airlane.core import Event, Kind
from airlane.core.errors import BadRequest, ErrorCode
from airlane.wire.event_json import event_to_dict, event_to_json
from airlane.wire.limits import MAX_BODY_DEPTH, json_depth

__all__ = ["JSON", "MSGPACK", "DataCodec", "codec_for"]

_TOO_DEEP = f"the request nests deeper than {MAX_BODY_DEPTH} levels"


class DataCodec:
    """One data encoding: requests in, answers and events out."""

    def __init__(self, name: str, mime: str) -> None:
        self.name = name
        """``json`` or ``msgpack``."""
        self.mime = mime
        """The MIME type this codec was chosen by."""
        self._cache_key = f"rsocket.{name}"

    def decode(self, data: bytes) -> Any:
        """The object a request carries; `BadRequest` if it is not in this encoding or nests
        deeper than `MAX_BODY_DEPTH`."""
        if not data:
            return {}
        try:
            obj = self._decode(data)
        except RecursionError:  # MessagePack nested past the interpreter's stack
            raise BadRequest(_TOO_DEEP, code=ErrorCode.INVALID_MESSAGE) from None
        if json_depth(obj, MAX_BODY_DEPTH) > MAX_BODY_DEPTH:
            raise BadRequest(_TOO_DEEP, code=ErrorCode.INVALID_MESSAGE)
        return obj

    def _decode(self, data: bytes) -> Any:
        raise NotImplementedError

    def encode(self, obj: Any) -> bytes:
        """An answer."""
        raise NotImplementedError

    def event(self, event: Event) -> bytes:
        """``event``'s native form, encoded once (cached on the event)."""
        data = event.cached(self._cache_key)
        if data is None:
            data = event.cache(self._cache_key, self._event(event))
        return data

    def _event(self, event: Event) -> bytes:
        raise NotImplementedError


class _Json(DataCodec):
    def _decode(self, data: bytes) -> Any:
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


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder()


class _MessagePack(DataCodec):
    def _decode(self, data: bytes) -> Any:
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


JSON: DataCodec = _Json("json", "application/json")
MSGPACK: DataCodec = _MessagePack("msgpack", "application/x-msgpack")

_BY_MIME = {
    "application/json": JSON,
    "application/x-msgpack": MSGPACK,
    "application/msgpack": MSGPACK,
    "application/vnd.msgpack": MSGPACK,
}


def codec_for(mime: str) -> DataCodec | None:
    """The codec for a SETUP's data MIME type (parameters such as ``charset`` ignored), or
    None when Airlane does not speak it."""
    return _BY_MIME.get(mime.split(";", 1)[0].strip().lower())
