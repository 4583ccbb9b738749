"""Protobuf data for RSocket (SETUP data MIME ``application/x-protobuf``), on the gRPC service's
contract (``proto/airlane/v1``): the same messages, so a client that speaks gRPC to Airlane
reuses its generated code.

==================  ============================  ==========================================
route               request                       answer
==================  ============================  ==========================================
chat.completions    ``GenerateRequest``           ``StreamHandle``, then ``Event`` messages
loadtest.stream     ``GenerateRequest.loadtest``  the benchmark chunks' JSON, as on every codec
streams.subscribe   ``SubscribeRequest``          ``Event`` messages
streams.info        ``InfoRequest``               ``StreamInfo``
streams.snapshot    ``InfoRequest``               ``Event`` (a snapshot)
streams.cancel      ``CancelRequest``             ``CancelResponse``
streams.publish     ``PublishRequest``            ``PublishResponse``
agent.session       ``SessionRequest``            ``SessionResponse``
the others          ``google.protobuf.Struct``    ``google.protobuf.Struct``
==================  ============================  ==========================================

Requests are turned into the native objects the routes take, so they go through the same
checks as JSON ones.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from google.protobuf import json_format, struct_pb2
from google.protobuf.message import DecodeError, Message

from airlane.core import Event
from airlane.core.errors import BadRequest, ErrorCode
from airlane.transports.rsocket.codec import DataCodec
from airlane.v1 import events_pb2, service_pb2
from airlane.wire.proto import chat_body, event_bytes, event_dict, event_message, stream_event

__all__ = ["PROTOBUF"]


def _parse(message: Message, data: bytes) -> Any:
    try:
        message.ParseFromString(data)
    except DecodeError as exc:
        raise BadRequest(
            f"the request is not a {message.DESCRIPTOR.full_name}: {exc}",
            code=ErrorCode.INVALID_MESSAGE,
        ) from None
    return message


def _position(after: events_pb2.Position) -> str:
    return f"{after.epoch}:{after.seq}"


def _generate(data: bytes) -> dict[str, Any]:
    return chat_body(_parse(service_pb2.GenerateRequest(), data).request)


def _loadtest(data: bytes) -> dict[str, Any]:
    test = _parse(service_pb2.GenerateRequest(), data).loadtest
    return {"chunks": test.chunks or 200, "mode": test.mode or "burst",
            "interval_ms": test.interval_ms or 20.0}  # fmt: skip


def _subscribe(data: bytes) -> dict[str, Any]:
    request = _parse(service_pb2.SubscribeRequest(), data)
    body: dict[str, Any] = {"stream_id": request.stream_id}
    if request.HasField("after"):
        body["resume"] = _position(request.after)
    return body


def _stream_id(data: bytes) -> dict[str, Any]:
    return {"stream_id": _parse(service_pb2.InfoRequest(), data).stream_id}


def _cancel(data: bytes) -> dict[str, Any]:
    return {"stream_id": _parse(service_pb2.CancelRequest(), data).stream_id}


def _publish(data: bytes) -> dict[str, Any]:
    request = _parse(service_pb2.PublishRequest(), data)
    return {"stream_id": request.stream_id, "event": event_dict(request.event)}


def _struct(data: bytes) -> dict[str, Any]:
    return dict(json_format.MessageToDict(_parse(struct_pb2.Struct(), data)))


_REQUESTS: dict[str, Callable[[bytes], dict[str, Any]]] = {
    "chat.completions": _generate,
    "loadtest.stream": _loadtest,
    "streams.subscribe": _subscribe,
    "streams.info": _stream_id,
    "streams.snapshot": _stream_id,
    "streams.cancel": _cancel,
    "streams.publish": _publish,
}


def _info_answer(obj: Any) -> Message:
    return json_format.ParseDict(obj, service_pb2.StreamInfo(), ignore_unknown_fields=True)


def _snapshot_answer(obj: Any) -> Message:
    return event_message({k: v for k, v in obj.items() if k != "resume"})


_ANSWERS: dict[str, Callable[[Any], Message]] = {
    "streams.info": _info_answer,
    "streams.snapshot": _snapshot_answer,
    "streams.cancel": lambda obj: service_pb2.CancelResponse(cancelled=obj["cancelled"]),
    "streams.publish": lambda obj: service_pb2.PublishResponse(
        stream_id=obj["stream_id"], seq=obj["seq"], published=1
    ),
}


class _Protobuf(DataCodec):
    def request(self, route: str, data: bytes) -> dict[str, Any]:
        read = _REQUESTS.get(route, _struct)
        try:
            return read(data)
        except (ValueError, json_format.ParseError) as exc:  # a Value that is no JSON value
            raise BadRequest(str(exc)[:300], code=ErrorCode.INVALID_MESSAGE) from None

    def answer(self, route: str, obj: Any) -> bytes:
        make = _ANSWERS.get(route)
        message = make(obj) if make is not None else json_format.ParseDict(obj, struct_pb2.Struct())
        return bytes(message.SerializeToString())

    def started(self, stream_id: str, epoch: str) -> bytes:
        return bytes(events_pb2.StreamHandle(stream_id=stream_id, epoch=epoch).SerializeToString())

    def command(self, data: bytes) -> dict[str, Any]:
        request = _parse(service_pb2.SessionRequest(), data)
        op = request.WhichOneof("op")
        body: dict[str, Any] = {"op": op or "", "id": request.ref}
        if op == "generate":
            body["request"] = chat_body(request.generate.request)
        elif op == "subscribe":
            body["stream_id"] = request.subscribe.stream_id
            if request.subscribe.HasField("after"):
                body["resume"] = _position(request.subscribe.after)
        elif op == "unsubscribe":
            body["stream_id"] = request.unsubscribe
        elif op == "publish":
            body["stream_id"] = request.publish.stream_id
            body["event"] = event_dict(request.publish.event)
        elif op == "cancel":
            body["stream_id"] = request.cancel.stream_id
        return body

    def reply(self, obj: dict[str, Any]) -> bytes:
        response = service_pb2.SessionResponse(ref=int(obj.get("id") or 0))
        op, stream_id = obj.get("op"), str(obj.get("stream_id", ""))
        if op == "started":
            response.generated.CopyFrom(
                events_pb2.StreamHandle(stream_id=stream_id, epoch=obj["epoch"])
            )
        elif op == "subscribed":
            response.subscribed.CopyFrom(events_pb2.StreamHandle(
                stream_id=stream_id, epoch=obj["epoch"], last_seq=obj["from_seq"]
            ))  # fmt: skip
        elif op == "unsubscribed":
            response.unsubscribed.CopyFrom(events_pb2.StreamHandle(stream_id=stream_id))
        elif op == "ended":
            response.unsubscribed.CopyFrom(
                events_pb2.StreamHandle(stream_id=stream_id, last_seq=obj["seq"], ended=True)
            )
        elif op == "published":
            response.published.CopyFrom(
                service_pb2.PublishResponse(stream_id=stream_id, seq=obj["seq"], published=1)
            )
        elif op == "cancelled":
            response.cancelled.CopyFrom(service_pb2.CancelResponse(cancelled=obj["cancelled"]))
        else:  # error
            response.error.CopyFrom(service_pb2.SessionError(
                code=str(obj.get("code", "")), message=str(obj.get("message", "")),
                stream_id=stream_id,
            ))  # fmt: skip
        return bytes(response.SerializeToString())

    def envelope(self, stream_id: str, epoch: str, event: Event) -> bytes:
        response = service_pb2.SessionResponse(event=stream_event(stream_id, epoch, event))
        return bytes(response.SerializeToString())

    def _event(self, event: Event) -> bytes:
        return event_bytes(event)


PROTOBUF: DataCodec = _Protobuf("protobuf", "application/x-protobuf")
"""The Protobuf codec."""
