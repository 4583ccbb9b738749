"""Fixtures and helpers for the gRPC integration tests: one gateway process, the official
grpcio asyncio client, and the Protobuf messages a user of ``airlane.v1`` builds."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Iterable, Iterator
from typing import Any

import grpc
import httpx
import pytest
from google.protobuf import json_format

from airlane.v1 import events_pb2, service_pb2, service_pb2_grpc
from tests.client.conftest import PACED_SYNTHETIC
from tests.servers import ServerProcess, run_server

SHORT_REQUEST: dict[str, Any] = {
    "model": "airlane-synthetic",
    "messages": [{"role": "user", "content": "Say something short."}],
    "max_tokens": 16,
}
"""A request whose answer is a handful of events (fewer than a Session's default credit)."""


@pytest.fixture(scope="package")
def gateway() -> Iterator[ServerProcess]:
    """One gateway for the gRPC tests (about 2 ms per token)."""
    with run_server(config=PACED_SYNTHETIC) as running:
        assert running.grpc is not None, "the gateway did not announce its gRPC listener"
        yield running


@pytest.fixture
async def channel(gateway: ServerProcess) -> AsyncIterator[grpc.aio.Channel]:
    """A channel to the gateway, on this test's event loop."""
    assert gateway.grpc is not None
    async with grpc.aio.insecure_channel(gateway.grpc) as opened:
        yield opened


def airlane_stub(channel: grpc.aio.Channel) -> service_pb2_grpc.AirlaneStub:
    """The generated client stub (untyped, hence the one ignore)."""
    return service_pb2_grpc.AirlaneStub(channel)  # type: ignore[no-untyped-call]


@pytest.fixture
def stub(channel: grpc.aio.Channel) -> service_pb2_grpc.AirlaneStub:
    """The generated client stub on this test's channel."""
    return airlane_stub(channel)


_names = itertools.count(1)


def fresh_stream_id(prefix: str = "agents/grpc") -> str:
    """A named stream id no other test of this package uses."""
    return f"{prefix}-{next(_names)}"


# -- building requests and events, as a user of the contract would ---------------------------


def chat_request(body: dict[str, Any]) -> service_pb2.ChatCompletionRequest:
    """An OpenAI JSON body as a ``ChatCompletionRequest`` (the JSON mapping of the message)."""
    request = service_pb2.ChatCompletionRequest()
    json_format.ParseDict(body, request)
    return request


def generate_request(body: dict[str, Any]) -> service_pb2.GenerateRequest:
    return service_pb2.GenerateRequest(request=chat_request(body))


def message_event(payload: Any) -> events_pb2.Event:
    """A ``message`` event carrying ``payload`` (any JSON value)."""
    event = events_pb2.Event(kind=events_pb2.KIND_MESSAGE)
    json_format.ParseDict(payload, event.payload)
    return event


def delta_event(text: str) -> events_pb2.Event:
    return events_pb2.Event(
        kind=events_pb2.KIND_DELTA,
        delta=events_pb2.Delta(channel=events_pb2.CHANNEL_CONTENT, text=text),
    )


def done_event(finish_reason: str = "stop") -> events_pb2.Event:
    event = events_pb2.Event(kind=events_pb2.KIND_DONE)
    event.fields.update({"finish_reason": finish_reason})
    return event


def publish_request(stream_id: str, event: events_pb2.Event) -> service_pb2.PublishRequest:
    return service_pb2.PublishRequest(stream_id=stream_id, event=event)


async def publish_all(
    stub: service_pb2_grpc.AirlaneStub, stream_id: str, events: Iterable[events_pb2.Event]
) -> service_pb2.PublishResponse:
    """Append ``events`` to ``stream_id`` with one PublishStream call."""

    async def requests() -> AsyncIterator[service_pb2.PublishRequest]:
        for event in events:
            yield publish_request(stream_id, event)

    response: service_pb2.PublishResponse = await stub.PublishStream(requests())
    return response


# -- reading what comes back ----------------------------------------------------------------


async def read_all(call: Any) -> list[events_pb2.StreamEvent]:
    """Every (further) message of a server-streaming call, until it ends. (Through `read`,
    which a test may already have used: grpcio refuses to mix it with iteration.)"""
    items = []
    while (item := await call.read()) is not grpc.aio.EOF:
        items.append(item)
    return items


def text_of(events: Iterable[events_pb2.StreamEvent]) -> str:
    """The content text the ``delta`` events carry, in order."""
    return "".join(
        item.event.delta.text
        for item in events
        if item.event.kind == events_pb2.KIND_DELTA
        and item.event.delta.channel == events_pb2.CHANNEL_CONTENT
    )


def fields_of(item: events_pb2.StreamEvent) -> dict[str, Any]:
    """The JSON fields of a ``done``, ``error``, ``usage`` ... event."""
    fields: dict[str, Any] = json_format.MessageToDict(item.event.fields)
    return fields


def payload_of(item: events_pb2.StreamEvent) -> Any:
    return json_format.MessageToDict(item.event.payload)


async def reference_texts(url: str, requests: list[dict[str, Any]]) -> list[str]:
    """`tests.client.conftest.reference_text` for many requests at once."""
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:

        async def one(body: dict[str, Any]) -> str:
            response = await client.post("/v1/chat/completions", json=body)
            response.raise_for_status()
            return str(response.json()["choices"][0]["message"]["content"])

        return list(await asyncio.gather(*(one(body) for body in requests)))


async def nothing_arrives(call: Any, seconds: float) -> asyncio.Future[Any]:
    """Wait ``seconds`` for the next message of ``call`` without cancelling the read (grpcio
    cancels the whole call when a pending read is cancelled); assert none came, and return the
    read still in flight, to be awaited later."""
    pending: asyncio.Future[Any] = asyncio.ensure_future(call.read())
    done, _ = await asyncio.wait({pending}, timeout=seconds)
    assert not done, f"unexpected message: {pending.result()}"
    return pending
