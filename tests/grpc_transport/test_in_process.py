"""The gRPC server in this process, where a test can see what a wire cannot: the call context
the metadata interceptor hands to backends, a security policy the CLI cannot configure, and
errors the server's event loop reports. Real grpcio client and server, over a real socket."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest

from airlane.backends.base import GenerationRequest
from airlane.backends.synthetic import SyntheticBackend, SyntheticConfig
from airlane.core import Event
from airlane.core.errors import AirlaneError, ErrorCode
from airlane.gateway import Gateway
from airlane.hub import MemoryHub
from airlane.runtime.callcontext import CALL, CallContext
from airlane.security import (
    ANONYMOUS,
    Action,
    AllowAll,
    PermissionDenied,
    Principal,
    SecurityPolicy,
)
from airlane.transports.grpc import GrpcServer, GrpcServerConfig
from airlane.transports.grpc.context import call_context
from airlane.v1 import events_pb2, service_pb2, service_pb2_grpc
from tests.waiting import settle

from .conftest import (
    SHORT_REQUEST,
    airlane_stub,
    generate_request,
    message_event,
    publish_request,
    read_all,
)

Stub = service_pb2_grpc.AirlaneStub


class RecordingBackend:
    """The synthetic backend, noting the call context each generation starts under."""

    name = "recording"

    def __init__(self) -> None:
        self.inner = SyntheticBackend(SyntheticConfig(speed=0))
        self.contexts: list[CallContext | None] = []

    def stream(self, request: GenerationRequest) -> AsyncGenerator[list[Event], None]:
        self.contexts.append(CALL.get())
        return self.inner.stream(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


class NoPublishing(AllowAll):
    """Everyone may do everything but publish."""

    def authorize(self, principal: Principal, action: Action, stream_id: str) -> None:
        if action is Action.PUBLISH:
            raise PermissionDenied(f"{principal.name} may not publish to {stream_id!r}")


@dataclass
class Local:
    """A gateway and its gRPC server in this process, and a client of it."""

    gateway: Gateway
    backend: RecordingBackend
    stub: Stub
    loop_errors: list[str]
    """What the event loop's exception handler was told (as text: holding the exception would
    keep its frames, and what they hold, alive)."""


@contextlib.asynccontextmanager
async def local_server(
    security: SecurityPolicy | None = None, config: GrpcServerConfig | None = None
) -> AsyncIterator[Local]:
    """A gateway with a `RecordingBackend` and its gRPC server in this process, and a client."""
    backend = RecordingBackend()
    gateway = Gateway(MemoryHub(), backend, security=security)
    await gateway.start()
    server = GrpcServer(gateway, config)
    port = await server.start("127.0.0.1", 0)
    loop = asyncio.get_running_loop()
    errors: list[str] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _, context: errors.append(describe(context)))
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield Local(gateway, backend, airlane_stub(channel), errors)
    finally:
        await server.aclose(0.5)
        await gateway.aclose()
        loop.set_exception_handler(previous)


def describe(context: dict[str, Any]) -> str:
    exception = context.get("exception")
    return f"{context['message']}: {exception!r}" if exception else str(context["message"])


@pytest.fixture
async def local() -> AsyncIterator[Local]:
    async with local_server() as started:
        yield started


async def test_metadata_reaches_the_backend_as_the_call_context(local: Local) -> None:
    metadata = (("x-model-id", "llama-3"), ("x-model-version", "7"), ("x-request-id", "req-42"))
    events = await read_all(local.stub.Generate(generate_request(SHORT_REQUEST), metadata=metadata))
    assert events[-1].event.kind == events_pb2.KIND_DONE
    await read_all(local.stub.Generate(generate_request(SHORT_REQUEST)))
    with_headers, without = local.backend.contexts
    assert with_headers == CallContext(model_id="llama-3", model_version="7", request_id="req-42")
    assert without is not None
    assert (without.model_id, without.model_version) == (None, None)
    assert without.request_id and without.request_id.startswith("req-")


def test_call_context_reads_each_header_at_most_once() -> None:
    first, second = call_context(()), call_context(())
    assert isinstance(first, CallContext) and isinstance(second, CallContext)
    assert first.model_id is None and first.model_version is None
    assert first.request_id != second.request_id  # made up per call
    seen = call_context((("x-model-id", b"m"), ("other", "x"), ("x-request-id", "r")))
    assert seen == CallContext(model_id="m", model_version=None, request_id="r")
    repeated = call_context((("x-model-version", "1"), ("x-model-version", "2")))
    assert isinstance(repeated, AirlaneError)
    assert str(repeated) == "metadata 'x-model-version' appears more than once"
    assert repeated.code is ErrorCode.INVALID_METADATA and repeated.param == "x-model-version"
    too_long = call_context((("x-model-id", "m" * 257),))
    assert isinstance(too_long, AirlaneError) and "longer than 256" in str(too_long)


async def test_permission_denied() -> None:
    """PERMISSION_DENIED cannot be provoked through ``airlane serve``: its only policies are
    AllowAll and ApiKeyPolicy, whose ``authorize`` refuses only the ANONYMOUS principal, which
    ApiKeyPolicy.authenticate never returns. A policy of our own shows the mapping."""
    async with local_server(NoPublishing()) as local:
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await local.stub.Publish(publish_request("agents/denied", message_event({})))
        assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "anonymous may not publish" in (refused.value.details() or "")
        events = await read_all(local.stub.Generate(generate_request(SHORT_REQUEST)))
        assert events[-1].event.kind == events_pb2.KIND_DONE


async def test_a_generation_a_full_session_cannot_follow_is_refused_before_it_starts() -> None:
    # It used to start first and be refused after: it ran unread (and billed) until its
    # orphan policy ended it, and the error named no stream the client could cancel.
    async with local_server(config=GrpcServerConfig(max_session_streams=1)) as local:
        await local.stub.Publish(publish_request("agents/full", message_event({})))
        call = local.stub.Session()
        subscribe = service_pb2.SubscribeRequest(stream_id="agents/full")
        await call.write(service_pb2.SessionRequest(ref=1, subscribe=subscribe))
        chat = service_pb2.GenerateRequest(request=generate_request(SHORT_REQUEST).request)
        await call.write(service_pb2.SessionRequest(ref=2, generate=chat))
        refused = None
        async with asyncio.timeout(10):
            while refused is None:
                response = await call.read()
                if response.ref == 2:
                    refused = response
        assert refused.error.code == "too_many_subscriptions", refused
        call.cancel()
        assert local.backend.contexts == []  # no generation was started


async def test_a_client_cancelling_a_busy_session_leaves_no_error_behind(local: Local) -> None:
    """A client may cancel a Session while events are flowing to it; the server must clean up
    without errors. (grpcio leaves the response generator of such a call unclosed; the loop's
    async-generator finalizer closes it in a task of its own, where the interceptor's
    ``CALL.reset(token)`` raises ValueError: "Task exception was never retrieved".)"""
    for n in range(600):
        await local.gateway.publish(ANONYMOUS, "agents/busy", Event.message({"n": n}))
    call = local.stub.Session()
    subscribe = service_pb2.SubscribeRequest(stream_id="agents/busy", credit=4)
    await call.write(service_pb2.SessionRequest(ref=1, subscribe=subscribe))
    for _ in range(5):
        await call.read()
    more = service_pb2.Credit(stream_id="agents/busy", events=1000)
    await call.write(service_pb2.SessionRequest(credit=more))
    await call.read()
    call.cancel()

    def released() -> bool:
        # The server lets go of the call: the session's response generator is closed, by
        # grpcio or, where grpcio leaves it, by the loop's finalizer once the collector frees
        # it; its end releases the session's cursor.
        gc.collect()
        return local.gateway.hub.stats().subscribers == 0

    # Polled with real pauses, not `eventually`'s loop turns: grpcio's own threads finish the
    # cancelled call, and a loop spinning on full collections (slow in a process that has
    # run the whole suite) left them too little time (failed once in the suite at 5 s).
    deadline = time.monotonic() + 15.0
    while not released():
        assert time.monotonic() < deadline, "the session's cursor was not released in 15 s"
        await asyncio.sleep(0.05)
    for _ in range(3):  # what the collector finds is closed in tasks: let them run and go
        gc.collect()
        await settle()
    assert local.loop_errors == []
    # The session's cursor was released.
    assert local.gateway.hub.stats().subscribers == 0
