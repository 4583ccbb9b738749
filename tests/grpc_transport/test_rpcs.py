"""Generate, Subscribe (resumable), Publish, PublishStream and Cancel against a real gateway
process with the grpcio asyncio client. Every generated text is compared with the same request
answered without streaming over HTTP, so a lost, repeated or reordered event shows as a wrong
text."""

from __future__ import annotations

import asyncio
import itertools

import grpc
import httpx
import pytest
from google.protobuf import json_format, struct_pb2

from airlane.v1 import events_pb2, service_pb2, service_pb2_grpc
from tests.client.conftest import LONG_REQUEST, reference_text
from tests.servers import ServerProcess

from .conftest import (
    SHORT_REQUEST,
    delta_event,
    done_event,
    fields_of,
    fresh_stream_id,
    generate_request,
    message_event,
    payload_of,
    publish_all,
    publish_request,
    read_all,
    reference_texts,
    text_of,
)

Stub = service_pb2_grpc.AirlaneStub


def assert_well_formed(events: list[events_pb2.StreamEvent], stream_id: str) -> None:
    """Every event names its stream and the position to resume after it; seqs increase."""
    assert events, "no events"
    epoch = events[0].position.epoch
    assert epoch
    for item in events:
        assert item.stream_id == stream_id
        assert item.position.epoch == epoch
        assert item.position.seq == item.event.seq
    assert all(a.event.seq < b.event.seq for a, b in itertools.pairwise(events))


# -- Generate --------------------------------------------------------------------------------


async def test_generate_streams_the_whole_answer(stub: Stub, gateway: ServerProcess) -> None:
    # The request as a user writes it: the OpenAI JSON body, through the JSON mapping.
    events = await read_all(stub.Generate(generate_request(LONG_REQUEST)))
    stream_id = events[0].stream_id
    assert stream_id
    assert_well_formed(events, stream_id)
    assert text_of(events) == reference_text(gateway.url, LONG_REQUEST)
    last = events[-1]
    assert last.event.kind == events_pb2.KIND_DONE
    assert last.event.lane == events_pb2.LANE_CONTROL
    assert fields_of(last)["finish_reason"] in ("stop", "length")
    # Nothing but the terminal event is terminal.
    assert all(e.event.kind != events_pb2.KIND_DONE for e in events[:-1])


async def test_generate_with_a_request_built_from_constructors(
    stub: Stub, gateway: ServerProcess
) -> None:
    request = service_pb2.ChatCompletionRequest(
        model="airlane-synthetic",
        messages=[
            service_pb2.ChatMessage(
                role="user", content=struct_pb2.Value(string_value="Built by hand.")
            )
        ],
        max_tokens=40,
        seed=7,
    )
    events = await read_all(stub.Generate(service_pb2.GenerateRequest(request=request)))
    assert_well_formed(events, events[0].stream_id)
    as_json = {
        "model": "airlane-synthetic",
        "messages": [{"role": "user", "content": "Built by hand."}],
        "max_tokens": 40,
        "seed": 7,
    }
    assert text_of(events) == reference_text(gateway.url, as_json)
    assert events[-1].event.kind == events_pb2.KIND_DONE


async def test_many_concurrent_generate_calls_share_one_channel(
    stub: Stub, gateway: ServerProcess
) -> None:
    requests = [
        {**SHORT_REQUEST, "messages": [{"role": "user", "content": f"question {i}"}]}
        for i in range(100)
    ]
    results = await asyncio.gather(
        *(read_all(stub.Generate(generate_request(r))) for r in requests)
    )
    expected = await reference_texts(gateway.url, requests)
    assert len({events[0].stream_id for events in results}) == 100
    for events, text in zip(results, expected, strict=True):
        assert events[-1].event.kind == events_pb2.KIND_DONE
        assert text_of(events) == text


# -- Subscribe and resume ----------------------------------------------------------------------


async def test_subscribe_from_the_start_reads_a_stream_another_call_generates(
    stub: Stub, gateway: ServerProcess
) -> None:
    expected = reference_text(gateway.url, LONG_REQUEST)
    generating = stub.Generate(generate_request(LONG_REQUEST))
    first = await generating.read()
    stream_id = first.stream_id
    reader, rest = await asyncio.gather(
        read_all(stub.Subscribe(service_pb2.SubscribeRequest(stream_id=stream_id))),
        read_all(generating),
    )
    # (A reader from the start that is behind the producer may get the first deltas
    # coalesced, so its first seq need not be 1; its text is whole.)
    assert_well_formed(reader, stream_id)
    assert text_of(reader) == expected
    assert text_of([first, *rest]) == expected
    assert fields_of(reader[-1])["finish_reason"] == fields_of(rest[-1])["finish_reason"]
    assert reader[-1].event.seq == rest[-1].event.seq


async def test_resume_after_a_cancelled_call(stub: Stub, gateway: ServerProcess) -> None:
    expected = reference_text(gateway.url, LONG_REQUEST)
    call = stub.Generate(generate_request(LONG_REQUEST))
    seen: list[events_pb2.StreamEvent] = []
    async for item in call:
        seen.append(item)
        if len(seen) == 40:
            break
    # Leaving the loop does not end a grpcio call; cancelling it does (the client is gone).
    call.cancel()
    assert call.cancelled()
    last = seen[-1]
    resumed = await read_all(
        stub.Subscribe(service_pb2.SubscribeRequest(stream_id=last.stream_id, after=last.position))
    )
    assert resumed, "the resumed reader got nothing"
    events = seen + resumed
    # A reader that resumes behind the producer gets the deltas it missed coalesced (each
    # carries the last seq it covers), so seqs only have to increase.
    assert_well_formed(events, last.stream_id)
    assert resumed[0].event.seq > last.event.seq
    assert text_of(events) == expected
    assert events[-1].event.kind == events_pb2.KIND_DONE


async def test_resume_at_the_end_of_a_finished_stream_yields_nothing(stub: Stub) -> None:
    last = (await read_all(stub.Generate(generate_request(SHORT_REQUEST))))[-1]
    assert last.event.kind == events_pb2.KIND_DONE
    request = service_pb2.SubscribeRequest(stream_id=last.stream_id, after=last.position)
    assert await read_all(stub.Subscribe(request)) == []


async def test_resume_past_the_end_is_out_of_range(stub: Stub) -> None:
    last = (await read_all(stub.Generate(generate_request(SHORT_REQUEST))))[-1]
    beyond = events_pb2.Position(epoch=last.position.epoch, seq=last.position.seq + 5)
    request = service_pb2.SubscribeRequest(stream_id=last.stream_id, after=beyond)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await read_all(stub.Subscribe(request))
    assert refused.value.code() == grpc.StatusCode.OUT_OF_RANGE
    assert str(last.position.seq) in (refused.value.details() or "")


# -- Publish -----------------------------------------------------------------------------------


async def test_publish_then_subscribe_reads_the_events_back(stub: Stub) -> None:
    stream_id = fresh_stream_id()
    payloads = [{"step": 1, "tool": "search"}, {"step": 2, "args": [1, "two", None, True]}]
    answers = [await stub.Publish(publish_request(stream_id, message_event(p))) for p in payloads]
    assert [(a.stream_id, a.seq, a.published) for a in answers] == [
        (stream_id, 1, 1),
        (stream_id, 2, 1),
    ]
    await stub.Publish(publish_request(stream_id, delta_event("Hello, ")))
    await stub.Publish(publish_request(stream_id, delta_event("world")))
    last = await stub.Publish(publish_request(stream_id, done_event("stop")))
    assert last.seq == 5
    events = await read_all(stub.Subscribe(service_pb2.SubscribeRequest(stream_id=stream_id)))
    assert_well_formed(events, stream_id)
    # A reader that catches up gets consecutive deltas coalesced into one.
    kinds = [kind for kind, _ in itertools.groupby(e.event.kind for e in events)]
    assert kinds == [
        events_pb2.KIND_MESSAGE,
        events_pb2.KIND_DELTA,
        events_pb2.KIND_DONE,
    ]
    assert [e.event.kind for e in events[:2]] == [events_pb2.KIND_MESSAGE] * 2
    assert events[-1].event.seq == 5
    # Struct numbers are doubles: compare through the JSON mapping, as a client would read.
    assert [payload_of(e) for e in events[:2]] == [
        {"step": 1.0, "tool": "search"},
        {"step": 2.0, "args": [1.0, "two", None, True]},
    ]
    assert text_of(events) == "Hello, world"
    assert fields_of(events[-1])["finish_reason"] == "stop"


async def test_publish_stream_appends_every_event_and_answers_after_the_last(
    stub: Stub,
) -> None:
    stream_id = fresh_stream_id()
    events = [message_event({"n": n}) for n in range(10)] + [done_event("stop")]
    answer = await publish_all(stub, stream_id, events)
    assert (answer.stream_id, answer.seq, answer.published) == (stream_id, 11, 11)
    read = await read_all(stub.Subscribe(service_pb2.SubscribeRequest(stream_id=stream_id)))
    assert [payload_of(e) for e in read[:-1]] == [{"n": float(n)} for n in range(10)]
    assert read[-1].event.kind == events_pb2.KIND_DONE
    assert fields_of(read[-1])["finish_reason"] == "stop"


async def test_a_subscriber_of_a_named_stream_sees_events_as_they_are_published(
    stub: Stub,
) -> None:
    stream_id = fresh_stream_id()
    await stub.Publish(publish_request(stream_id, message_event({"step": 0})))
    reader = stub.Subscribe(service_pb2.SubscribeRequest(stream_id=stream_id))
    assert payload_of(await reader.read()) == {"step": 0.0}
    for step in (1, 2):
        await stub.Publish(publish_request(stream_id, message_event({"step": step})))
        assert payload_of(await reader.read()) == {"step": float(step)}
    await stub.Publish(publish_request(stream_id, done_event("stop")))
    assert (await reader.read()).event.kind == events_pb2.KIND_DONE
    assert await reader.read() is grpc.aio.EOF
    assert await reader.code() == grpc.StatusCode.OK


# -- Cancel ------------------------------------------------------------------------------------


async def test_cancel_ends_the_stream_with_done_cancelled(stub: Stub) -> None:
    call = stub.Generate(generate_request(LONG_REQUEST))
    first = await call.read()
    reader = stub.Subscribe(service_pb2.SubscribeRequest(stream_id=first.stream_id))
    answer = await stub.Cancel(service_pb2.CancelRequest(stream_id=first.stream_id))
    assert answer.cancelled is True
    for events in await asyncio.gather(read_all(call), read_all(reader)):
        assert events[-1].event.kind == events_pb2.KIND_DONE
        assert fields_of(events[-1])["finish_reason"] == "cancelled"
    # Already ended: nothing to cancel.
    again = await stub.Cancel(service_pb2.CancelRequest(stream_id=first.stream_id))
    assert again.cancelled is False


async def test_cancel_of_an_unknown_stream_is_not_found(stub: Stub) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await stub.Cancel(service_pb2.CancelRequest(stream_id="no-such-stream"))
    assert refused.value.code() == grpc.StatusCode.NOT_FOUND


async def test_cancelling_the_call_only_detaches(stub: Stub, gateway: ServerProcess) -> None:
    call = stub.Generate(generate_request(LONG_REQUEST))
    first = await call.read()
    call.cancel()
    url = f"{gateway.url}/v1/streams/{first.stream_id}"
    async with httpx.AsyncClient(timeout=10) as http:
        info = (await http.get(url)).json()
        assert info["finish_reason"] != "cancelled"
        # The stream goes on without readers (its orphan policy allows a grace period) and
        # ends by itself. Polled: a reader waiting for the end would be a reader, and the
        # point is that there is none; each check is a request to the gateway, paced.
        async with asyncio.timeout(10):
            while not info["ended"]:
                await asyncio.sleep(0.05)
                info = (await http.get(url)).json()
    assert info["finish_reason"] in ("stop", "length")
    rest = await read_all(stub.Subscribe(service_pb2.SubscribeRequest(stream_id=first.stream_id)))
    assert text_of(rest) == reference_text(gateway.url, LONG_REQUEST)


def test_requests_round_trip_through_the_json_mapping() -> None:
    """The JSON mapping a user relies on: an OpenAI body parses into the message and back."""
    request = json_format.ParseDict(
        {**LONG_REQUEST, "temperature": 0.5, "airlane": {"orphan": "keep"}},
        service_pb2.ChatCompletionRequest(),
    )
    assert request.max_tokens == 300
    assert request.messages[0].content.string_value == LONG_REQUEST["messages"][0]["content"]  # type: ignore[index]
    assert request.airlane.orphan == "keep"
