"""Refusals and the status codes that say what went wrong (the table in
`airlane.transports.grpc.service`); after each one the gateway goes on serving."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from airlane.v1 import events_pb2, service_pb2, service_pb2_grpc
from airlane.wire.limits import MAX_EVENT_BYTES
from tests.client.conftest import PACED_SYNTHETIC, reference_text
from tests.servers import ServerProcess, run_server

from .conftest import (
    SHORT_REQUEST,
    airlane_stub,
    done_event,
    fresh_stream_id,
    generate_request,
    message_event,
    publish_all,
    publish_request,
    read_all,
    text_of,
)

Stub = service_pb2_grpc.AirlaneStub


async def refusal(call: Awaitable[Any] | Any) -> grpc.aio.AioRpcError:
    """The error a call ends with (unary: awaited; server streaming: read to the end)."""
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        if hasattr(call, "read"):
            await read_all(call)
        else:
            await call
    return refused.value


def error_code(error: grpc.aio.AioRpcError) -> str | None:
    """The gateway's own error code, from the ``airlane-error-code`` trailer."""
    return dict(error.trailing_metadata() or ()).get("airlane-error-code")  # type: ignore[no-any-return]


async def assert_still_serving(stub: Stub, url: str) -> None:
    events = await read_all(stub.Generate(generate_request(SHORT_REQUEST)))
    assert events[-1].event.kind == events_pb2.KIND_DONE
    assert text_of(events) == reference_text(url, SHORT_REQUEST)


async def test_subscribe_to_an_unknown_stream_is_not_found(
    stub: Stub, gateway: ServerProcess
) -> None:
    error = await refusal(stub.Subscribe(service_pb2.SubscribeRequest(stream_id="no-such")))
    assert error.code() == grpc.StatusCode.NOT_FOUND
    assert "no-such" in (error.details() or "")
    await assert_still_serving(stub, gateway.url)


async def test_a_chat_request_without_messages_is_invalid_argument(
    stub: Stub, gateway: ServerProcess
) -> None:
    error = await refusal(stub.Generate(generate_request({"model": "m", "messages": []})))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    # The details name the parameter, as the HTTP API's `param` does.
    assert (error.details() or "").startswith("messages: ")
    await assert_still_serving(stub, gateway.url)


async def test_publishing_to_an_invalid_stream_id_is_invalid_argument(
    stub: Stub, gateway: ServerProcess
) -> None:
    error = await refusal(stub.Publish(publish_request("bad id", message_event({}))))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    await assert_still_serving(stub, gateway.url)


async def test_subscribing_to_or_cancelling_an_invalid_stream_id_is_invalid_argument(
    stub: Stub, gateway: ServerProcess
) -> None:
    """An id that can never name a stream is the caller's mistake, as over HTTP (400
    invalid_stream_id on every /v1/streams/{id} route), not a stream that is missing now."""
    subscribing = await refusal(stub.Subscribe(service_pb2.SubscribeRequest(stream_id="bad id")))
    cancelling = await refusal(stub.Cancel(service_pb2.CancelRequest(stream_id="bad id")))
    assert (subscribing.code(), cancelling.code()) == (
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    await assert_still_serving(stub, gateway.url)


@pytest.mark.parametrize(
    ("event", "reason"),
    [
        (events_pb2.Event(kind=events_pb2.KIND_DELTA), "a delta needs a string 'text'"),
        (
            events_pb2.Event(kind=events_pb2.KIND_DELTA, payload=message_event("x").payload),
            "a delta needs a string 'text'",
        ),
        (events_pb2.Event(kind=events_pb2.KIND_USAGE), "cannot be published"),
        (events_pb2.Event(kind=events_pb2.KIND_SNAPSHOT), "cannot be published"),
        (events_pb2.Event(), "an event needs a kind"),
    ],
    ids=["delta-without-text", "delta-with-a-payload", "usage", "snapshot", "no-kind"],
)
async def test_a_published_event_that_fails_validation_is_invalid_argument(
    stub: Stub, gateway: ServerProcess, event: events_pb2.Event, reason: str
) -> None:
    error = await refusal(stub.Publish(publish_request(fresh_stream_id(), event)))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert reason in (error.details() or "")
    await assert_still_serving(stub, gateway.url)


async def test_publish_stream_stops_at_the_first_invalid_event(stub: Stub) -> None:
    stream_id = fresh_stream_id()
    events = [message_event({"n": 1}), message_event({"n": 2})]
    events += [events_pb2.Event(kind=events_pb2.KIND_USAGE), message_event({"n": 3})]
    error = await refusal(publish_all(stub, stream_id, events))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "event 3:" in (error.details() or "")
    assert "(2 appended before it)" in (error.details() or "")
    assert error_code(error) == "invalid_event"  # as the unary Publish says it
    # What came before the invalid event was appended; nothing after it.
    reader = stub.Subscribe(service_pb2.SubscribeRequest(stream_id=stream_id))
    assert [(await reader.read()).event.seq for _ in range(2)] == [1, 2]
    await stub.Publish(publish_request(stream_id, done_event()))
    assert (await reader.read()).event.seq == 3


async def test_publishing_to_an_ended_stream_is_failed_precondition(
    stub: Stub, gateway: ServerProcess
) -> None:
    stream_id = fresh_stream_id()
    await publish_all(stub, stream_id, [message_event({"n": 1}), done_event()])
    error = await refusal(stub.Publish(publish_request(stream_id, message_event({"n": 2}))))
    assert error.code() == grpc.StatusCode.FAILED_PRECONDITION
    await assert_still_serving(stub, gateway.url)


async def test_a_malformed_resume_position_is_invalid_argument(
    stub: Stub, gateway: ServerProcess
) -> None:
    last = (await read_all(stub.Generate(generate_request(SHORT_REQUEST))))[-1]
    after = events_pb2.Position(epoch="not an epoch!", seq=1)
    request = service_pb2.SubscribeRequest(stream_id=last.stream_id, after=after)
    error = await refusal(stub.Subscribe(request))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    await assert_still_serving(stub, gateway.url)


async def test_a_repeated_metadata_header_is_invalid_argument(
    stub: Stub, gateway: ServerProcess
) -> None:
    metadata = (("x-model-id", "model-a"), ("x-model-id", "model-b"))
    error = await refusal(stub.Generate(generate_request(SHORT_REQUEST), metadata=metadata))
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "x-model-id" in (error.details() or "")
    assert error_code(error) == "invalid_metadata"  # as every refusal, with its code
    unary = await refusal(
        stub.Publish(publish_request(fresh_stream_id(), message_event(1)), metadata=metadata)
    )
    assert unary.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_code(unary) == "invalid_metadata"
    too_long = (("x-request-id", "r" * 257),)
    streaming = stub.PublishStream(
        iter([publish_request(fresh_stream_id(), message_event(1))]), metadata=too_long
    )
    refused = await refusal(streaming)
    assert refused.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_code(refused) == "invalid_metadata"
    # Each header once is fine.
    once = (("x-model-id", "model-a"), ("x-model-version", "3"), ("x-request-id", "req-1"))
    events = await read_all(stub.Generate(generate_request(SHORT_REQUEST), metadata=once))
    assert text_of(events) == reference_text(gateway.url, SHORT_REQUEST)


async def test_a_message_over_4_mib_is_resource_exhausted(
    stub: Stub, gateway: ServerProcess
) -> None:
    huge = message_event({"blob": "x" * (5 << 20)})
    error = await refusal(stub.Publish(publish_request(fresh_stream_id(), huge)))
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    # Under 4 MiB, the event's own limit (1 MiB, as on every wire) answers; just under it
    # is accepted.
    over = message_event({"blob": "y" * ((4 << 20) - 1024)})
    error = await refusal(stub.Publish(publish_request(fresh_stream_id(), over)))
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert dict(error.trailing_metadata() or ())["airlane-error-code"] == "event_too_large"
    stream_id = fresh_stream_id()
    big = message_event({"blob": "y" * (MAX_EVENT_BYTES - 64)})
    assert (await stub.Publish(publish_request(stream_id, big))).seq == 1
    await assert_still_serving(stub, gateway.url)


async def test_api_keys() -> None:
    with run_server("--api-key", "alice=secret", config=PACED_SYNTHETIC) as gateway:
        assert gateway.grpc is not None
        async with grpc.aio.insecure_channel(gateway.grpc) as channel:
            stub = airlane_stub(channel)
            named = fresh_stream_id()
            for metadata in [
                None,
                (("authorization", "Bearer wrong"),),
                (("authorization", "secret"),),
            ]:
                calls = [
                    stub.Generate(generate_request(SHORT_REQUEST), metadata=metadata),
                    stub.Subscribe(
                        service_pb2.SubscribeRequest(stream_id=named), metadata=metadata
                    ),
                    stub.Publish(publish_request(named, message_event(1)), metadata=metadata),
                    stub.Cancel(service_pb2.CancelRequest(stream_id=named), metadata=metadata),
                ]
                for call in calls:
                    error = await refusal(call)
                    assert error.code() == grpc.StatusCode.UNAUTHENTICATED, metadata
                session = stub.Session(metadata=metadata)
                with pytest.raises(grpc.aio.AioRpcError) as refused:
                    await session.read()
                assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
            # Health checks need no key (load balancers and orchestrators probe without one).
            health = health_pb2_grpc.HealthStub(channel)
            answer = await health.Check(health_pb2.HealthCheckRequest(service=""))
            assert answer.status == health_pb2.HealthCheckResponse.SERVING
            keyed = (("authorization", "Bearer secret"),)
            events = await read_all(stub.Generate(generate_request(SHORT_REQUEST), metadata=keyed))
            reference = httpx.post(
                f"{gateway.url}/v1/chat/completions",
                json=SHORT_REQUEST,
                headers={"authorization": "Bearer secret"},
                timeout=30,
            ).json()["choices"][0]["message"]["content"]
            assert text_of(events) == reference
            assert (
                await stub.Publish(publish_request(named, message_event(1)), metadata=keyed)
            ).seq == 1
            # The scheme is case-insensitive, as in HTTP.
            lower = (("authorization", "bearer secret"),)
            assert (
                await stub.Publish(publish_request(named, done_event()), metadata=lower)
            ).seq == 2
            read = await read_all(
                stub.Subscribe(service_pb2.SubscribeRequest(stream_id=named), metadata=keyed)
            )
            assert [e.event.seq for e in read] == [1, 2]
