"""The bidirectional Session: several streams on one call, answers matched by ``ref``,
credit-based flow control, unsubscribe, errors as `SessionError` (the call goes on), and the
end of the call after the client half-closes."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from typing import Any

import grpc

from airlane.v1 import events_pb2, service_pb2, service_pb2_grpc
from tests.client.conftest import LONG_REQUEST, reference_text
from tests.servers import ServerProcess

from .conftest import (
    SHORT_REQUEST,
    chat_request,
    done_event,
    fields_of,
    fresh_stream_id,
    message_event,
    nothing_arrives,
    payload_of,
    publish_all,
    publish_request,
    text_of,
)

Stub = service_pb2_grpc.AirlaneStub
Response = service_pb2.SessionResponse


def generate(ref: int, body: dict[str, Any]) -> service_pb2.SessionRequest:
    return service_pb2.SessionRequest(
        ref=ref, generate=service_pb2.GenerateRequest(request=chat_request(body))
    )


def subscribe(ref: int, stream_id: str, **options: Any) -> service_pb2.SessionRequest:
    request = service_pb2.SubscribeRequest(stream_id=stream_id, **options)
    return service_pb2.SessionRequest(ref=ref, subscribe=request)


def credit(stream_id: str, events: int) -> service_pb2.SessionRequest:
    return service_pb2.SessionRequest(credit=service_pb2.Credit(stream_id=stream_id, events=events))


async def next_response(call: Any) -> Response:
    async with asyncio.timeout(10):
        response = await call.read()
    assert response is not grpc.aio.EOF, "the call ended early"
    return response  # type: ignore[no-any-return]


async def read_until(call: Any, enough: Callable[[list[Response]], bool]) -> list[Response]:
    """Read responses until ``enough`` of them have arrived."""
    responses: list[Response] = []
    while not enough(responses):
        responses.append(await next_response(call))
    return responses


async def assert_ends(call: Any) -> None:
    """The call ends, cleanly, with nothing more to read."""
    async with asyncio.timeout(10):
        assert await call.read() is grpc.aio.EOF
    assert await call.code() == grpc.StatusCode.OK


def events_of(responses: list[Response], stream_id: str) -> list[events_pb2.StreamEvent]:
    return [r.event for r in responses if r.HasField("event") and r.event.stream_id == stream_id]


def answers(responses: list[Response]) -> dict[int, Response]:
    """The answers to requests, by ``ref`` (events are not answers)."""
    return {r.ref: r for r in responses if not r.HasField("event")}


def ended(stream_id: str) -> Callable[[list[Response]], bool]:
    def check(responses: list[Response]) -> bool:
        events = events_of(responses, stream_id)
        return bool(events) and events[-1].event.kind in (
            events_pb2.KIND_DONE,
            events_pb2.KIND_ERROR,
        )

    return check


async def test_generate_subscribe_and_publish_multiplexed_on_one_call(
    stub: Stub, gateway: ServerProcess
) -> None:
    named = fresh_stream_id()
    await publish_all(stub, named, [message_event({"n": n}) for n in range(5)])
    call = stub.Session()
    await call.write(generate(1, SHORT_REQUEST))
    await call.write(subscribe(2, named))
    await call.write(
        service_pb2.SessionRequest(ref=3, publish=publish_request(named, message_event({"n": 5})))
    )

    def generated_done_and_six_messages(responses: list[Response]) -> bool:
        generated = answers(responses).get(1)
        return (
            generated is not None
            and ended(generated.generated.stream_id)(responses)
            and len(events_of(responses, named)) == 6
        )

    responses = await read_until(call, generated_done_and_six_messages)
    by_ref = answers(responses)
    assert set(by_ref) == {1, 2, 3}
    handle = by_ref[1].generated
    assert handle.stream_id.startswith("chatcmpl-") and handle.epoch
    assert by_ref[2].subscribed.stream_id == named
    assert by_ref[3].published.stream_id == named and by_ref[3].published.seq == 6
    generated = events_of(responses, handle.stream_id)
    assert all(e.position.epoch == handle.epoch for e in generated)
    assert text_of(generated) == reference_text(gateway.url, SHORT_REQUEST)
    assert generated[-1].event.kind == events_pb2.KIND_DONE
    messages = events_of(responses, named)
    assert [payload_of(e) for e in messages] == [{"n": float(n)} for n in range(6)]
    assert [e.event.seq for e in messages] == list(range(1, 7))
    # The named stream is still open: the call stays open after the client half-closes, until
    # that subscription ends too.
    await call.done_writing()
    pending = await nothing_arrives(call, 0.2)
    await stub.Publish(publish_request(named, done_event("stop")))
    async with asyncio.timeout(10):
        last = await pending
    assert last.event.stream_id == named and last.event.event.kind == events_pb2.KIND_DONE
    await assert_ends(call)


async def test_credit_limits_what_a_subscription_receives(stub: Stub) -> None:
    named = fresh_stream_id()
    await publish_all(stub, named, [message_event({"n": n}) for n in range(20)] + [done_event()])
    call = stub.Session()
    await call.write(subscribe(1, named, credit=4))
    first = await read_until(call, lambda r: len(r) == 5)
    assert first[0].subscribed.stream_id == named
    assert [e.event.seq for e in events_of(first, named)] == [1, 2, 3, 4]
    # No more until the client grants more.
    pending = await nothing_arrives(call, 0.3)
    await call.write(credit(named, 3))
    async with asyncio.timeout(10):
        granted = [await pending, *await read_until(call, lambda r: len(r) == 2)]
    assert [e.event.seq for e in events_of(granted, named)] == [5, 6, 7]
    pending = await nothing_arrives(call, 0.3)
    await call.write(credit(named, 100))
    async with asyncio.timeout(10):
        rest = [await pending, *await read_until(call, ended(named))]
    assert [e.event.seq for e in events_of(rest, named)] == list(range(8, 22))
    assert [payload_of(e) for e in events_of(first + granted + rest, named)[:-1]] == [
        {"n": float(n)} for n in range(20)
    ]
    await call.done_writing()
    await assert_ends(call)


async def test_a_generation_in_a_session_waits_for_credit_beyond_the_default(
    stub: Stub, gateway: ServerProcess
) -> None:
    call = stub.Session()
    await call.write(generate(1, LONG_REQUEST))
    handle = (await next_response(call)).generated
    # The default credit is 64 events (SubscribeRequest.credit 0).
    first = await read_until(call, lambda r: len(r) == 64)
    assert len(events_of(first, handle.stream_id)) == 64
    pending = await nothing_arrives(call, 0.5)
    await call.write(credit(handle.stream_id, 1000))
    async with asyncio.timeout(10):
        rest = [await pending, *await read_until(call, ended(handle.stream_id))]
    events = events_of(first + rest, handle.stream_id)
    assert all(a.event.seq < b.event.seq for a, b in itertools.pairwise(events))
    assert text_of(events) == reference_text(gateway.url, LONG_REQUEST)
    await call.done_writing()
    await assert_ends(call)


async def test_cancel_within_a_session(stub: Stub) -> None:
    call = stub.Session()
    await call.write(generate(1, LONG_REQUEST))
    handle = (await next_response(call)).generated
    await call.write(
        service_pb2.SessionRequest(
            ref=2, cancel=service_pb2.CancelRequest(stream_id=handle.stream_id)
        )
    )
    await call.write(credit(handle.stream_id, 1000))
    responses = await read_until(call, ended(handle.stream_id))
    assert answers(responses)[2].cancelled.cancelled is True
    last = events_of(responses, handle.stream_id)[-1]
    assert last.event.kind == events_pb2.KIND_DONE
    assert fields_of(last)["finish_reason"] == "cancelled"
    await call.done_writing()
    await assert_ends(call)


async def test_unsubscribe_returns_the_handle_and_stops_the_events(stub: Stub) -> None:
    named = fresh_stream_id()
    await publish_all(stub, named, [message_event({"n": n}) for n in range(3)])
    call = stub.Session()
    await call.write(subscribe(1, named))
    await read_until(call, lambda r: len(events_of(r, named)) == 3)
    await call.write(service_pb2.SessionRequest(ref=2, unsubscribe=named))
    answer = await next_response(call)
    assert answer.ref == 2
    assert answer.WhichOneof("body") == "unsubscribed"
    assert answer.unsubscribed.stream_id == named
    assert answer.unsubscribed.last_seq == 3
    assert answer.unsubscribed.epoch
    # Later events of the stream no longer arrive on this call.
    await stub.Publish(publish_request(named, message_event({"n": 3})))
    pending = await nothing_arrives(call, 0.3)
    await call.write(service_pb2.SessionRequest(ref=3, unsubscribe=named))
    async with asyncio.timeout(10):
        again = await pending
    assert again.ref == 3 and again.error.code == "not_subscribed"
    # Resuming from the handle picks up where the subscription stopped.
    resume = events_pb2.Position(epoch=answer.unsubscribed.epoch, seq=answer.unsubscribed.last_seq)
    await call.write(subscribe(4, named, after=resume))
    resumed = await read_until(call, lambda r: len(events_of(r, named)) == 1)
    assert answers(resumed)[4].subscribed.last_seq == 3
    assert payload_of(events_of(resumed, named)[0]) == {"n": 3.0}
    await stub.Publish(publish_request(named, done_event()))
    await read_until(call, ended(named))
    await call.done_writing()
    await assert_ends(call)


async def test_errors_are_answers_and_the_call_stays_usable(
    stub: Stub, gateway: ServerProcess
) -> None:
    named = fresh_stream_id()
    await stub.Publish(publish_request(named, message_event({"n": 0})))
    call = stub.Session()
    await call.write(subscribe(1, "no-such-stream"))
    await call.write(generate(2, {"model": "m", "messages": []}))
    await call.write(subscribe(3, named))
    await call.write(subscribe(4, named))
    beyond = events_pb2.Position(epoch="0123abcd", seq=1)
    await call.write(subscribe(5, "no-such-stream", after=beyond))
    await call.write(service_pb2.SessionRequest(ref=6))
    responses = await read_until(call, lambda r: len(answers(r)) == 6)
    by_ref = answers(responses)
    assert by_ref[1].error.code == "stream_not_found"
    assert by_ref[2].error.code == "invalid_parameter"
    assert "messages" in by_ref[2].error.message
    assert by_ref[3].subscribed.stream_id == named
    assert by_ref[4].error.code == "already_subscribed"
    assert by_ref[5].error.code == "stream_not_found"
    assert by_ref[6].error.code == "invalid_request"
    # Still usable: a generation on the same call.
    await call.write(generate(7, SHORT_REQUEST))
    handle = answers(await read_until(call, lambda r: 7 in answers(r)))[7].generated
    events = events_of(await read_until(call, ended(handle.stream_id)), handle.stream_id)
    assert text_of(events) == reference_text(gateway.url, SHORT_REQUEST)
    await call.write(service_pb2.SessionRequest(ref=8, unsubscribe=named))
    assert (await next_response(call)).unsubscribed.stream_id == named
    await call.done_writing()
    await assert_ends(call)


async def test_a_session_ends_after_half_close_once_its_subscriptions_end(stub: Stub) -> None:
    """A half-closed Session whose subscription has more events queued than the call's
    outbox (256) holds must still end after the terminal event."""
    named = fresh_stream_id()
    await publish_all(stub, named, [message_event({"n": n}) for n in range(600)] + [done_event()])
    call = stub.Session()
    await call.write(subscribe(1, named, credit=1000))
    await call.done_writing()
    responses: list[Response] = []
    async with asyncio.timeout(5):
        while (response := await call.read()) is not grpc.aio.EOF:
            responses.append(response)
    assert len(events_of(responses, named)) == 601
    assert await call.code() == grpc.StatusCode.OK
