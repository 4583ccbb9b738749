"""Protobuf data (``application/x-protobuf``) on the gRPC service's messages, from the
``rsocket`` package's client: a generation, a subscription from a position, unary calls, a
publish, an agent session, and the routes without a message of their own as Struct."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf import json_format, struct_pb2
from google.protobuf.message import Message
from rsocket.exceptions import RSocketProtocolError
from rsocket.payload import Payload
from rsocket.streams.stream_from_generator import StreamFromGenerator

from airlane.v1 import events_pb2, service_pb2
from tests.rsocket.conftest import open_client, payload
from tests.servers import ServerProcess

PROTOBUF = b"application/x-protobuf"


def request(route: str, message: object) -> Payload:
    return Payload(message.SerializeToString(), payload(route).metadata)  # type: ignore[attr-defined]


def chat(max_tokens: int = 20) -> service_pb2.ChatCompletionRequest:
    return service_pb2.ChatCompletionRequest(
        model="airlane-synthetic", max_tokens=max_tokens,
        messages=[service_pb2.ChatMessage(role="user", content=struct_pb2.Value(
            string_value="protobuf"))],
    )  # fmt: skip


def text(events: list[events_pb2.Event]) -> str:
    return "".join(e.delta.text for e in events if e.kind == events_pb2.KIND_DELTA)


async def unary(client: Any, route: str, message: Any, answer: type[Message]) -> Any:
    """A request-response; its answer parsed as ``answer``."""
    reply = await client.request_response(request(route, message))
    return answer.FromString(reply.data)


async def test_generate_subscribe_and_unary_calls(gateway: ServerProcess, transport: str) -> None:
    async with open_client(gateway, transport, data_encoding=PROTOBUF) as client:
        generate = service_pb2.GenerateRequest(request=chat())
        got = await client.request_stream(request("chat.completions", generate))
        handle = events_pb2.StreamHandle.FromString(got[0].data)
        events = [events_pb2.Event.FromString(p.data) for p in got[1:]]
        assert handle.stream_id and handle.epoch
        assert events[-1].kind == events_pb2.KIND_DONE and text(events)
        stream_id = handle.stream_id
        middle = events[len(events) // 2].seq
        after = events_pb2.Position(epoch=handle.epoch, seq=middle)
        subscribe = service_pb2.SubscribeRequest(stream_id=stream_id, after=after)
        again = await client.request_stream(request("streams.subscribe", subscribe))
        rest = [events_pb2.Event.FromString(p.data) for p in again]
        assert text(rest) == text([e for e in events if e.seq > middle])
        by_id = service_pb2.InfoRequest(stream_id=stream_id)
        info = await unary(client, "streams.info", by_id, service_pb2.StreamInfo)
        assert info.id == stream_id and info.ended and info.last_seq == events[-1].seq
        snapshot = await unary(client, "streams.snapshot", by_id, events_pb2.Event)
        assert snapshot.kind == events_pb2.KIND_SNAPSHOT
        note = events_pb2.Event(
            kind=events_pb2.KIND_MESSAGE, payload=struct_pb2.Value(string_value="hi")
        )
        publish = service_pb2.PublishRequest(stream_id=f"pb-{transport}", event=note)
        published = await unary(client, "streams.publish", publish, service_pb2.PublishResponse)
        assert published.seq == 1 and published.stream_id == f"pb-{transport}"
        cancel = service_pb2.CancelRequest(stream_id=stream_id)
        cancelled = await unary(client, "streams.cancel", cancel, service_pb2.CancelResponse)
        assert cancelled.cancelled is False
        # A route with no message of its own: Struct both ways.
        body = struct_pb2.Struct()
        body.update({"room": f"pb-room-{transport}"})
        state = await unary(client, "rooms.state", body, struct_pb2.Struct)
        assert "entries" in json_format.MessageToDict(state)


async def test_an_agent_session_in_protobuf(gateway: ServerProcess, transport: str) -> None:
    first = service_pb2.SessionRequest(ref=1, generate=service_pb2.GenerateRequest(request=chat()))
    publish = service_pb2.SessionRequest(
        ref=2,
        publish=service_pb2.PublishRequest(
            stream_id=f"pb-notes-{transport}",
            event=events_pb2.Event(
                kind=events_pb2.KIND_MESSAGE, payload=struct_pb2.Value(string_value="note")
            ),
        ),
    )

    def source():
        yield Payload(publish.SerializeToString()), True

    async with open_client(gateway, transport, data_encoding=PROTOBUF) as client:
        got = await client.request_channel(request("agent.session", first),
                                           StreamFromGenerator(source))  # fmt: skip
    responses = [service_pb2.SessionResponse.FromString(p.data) for p in got]
    by_ref = {r.ref: r for r in responses if r.WhichOneof("body") != "event"}
    generated = by_ref[1].generated
    assert generated.stream_id and by_ref[2].published.seq == 1
    events = [r.event.event for r in responses if r.WhichOneof("body") == "event"]
    assert all(r.event.stream_id == generated.stream_id for r in responses if r.HasField("event"))
    assert events[-1].kind == events_pb2.KIND_DONE and text(events)
    ended = [r.unsubscribed for r in responses if r.WhichOneof("body") == "unsubscribed"]
    assert ended and ended[0].ended and ended[0].last_seq == events[-1].seq


async def test_garbage_protobuf_is_refused_and_the_connection_goes_on(
    gateway: ServerProcess,
) -> None:
    async with open_client(gateway, "tcp", data_encoding=PROTOBUF) as client:
        garbage = Payload(b"\xff\xff\xff", payload("streams.info").metadata)
        with pytest.raises(RSocketProtocolError) as refused:
            await client.request_response(garbage)
        assert refused.value.data.startswith("invalid_message")
        note = events_pb2.Event(kind=events_pb2.KIND_MESSAGE, payload=struct_pb2.Value())
        publish = service_pb2.PublishRequest(stream_id="pb-after-garbage", event=note)
        published = await unary(client, "streams.publish", publish, service_pb2.PublishResponse)
        assert published.seq == 1
