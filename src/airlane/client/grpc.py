"""`GrpcClient`: Airlane streams over the native gRPC service (``airlane.v1.Airlane``).

A thin layer over the generated stub (`airlane.v1.service_pb2_grpc.AirlaneStub`) that speaks
in the same values as the other clients: requests are OpenAI-style dicts, events arrive as
`StreamEvent` with a resume token (``<epoch>:<seq>``) in ``id``. Errors keep the client
error tree: a gRPC status becomes `RequestRejected` (``code`` is the status name, e.g.
``NOT_FOUND``), `StreamNotFound` for NOT_FOUND, `ConnectFailed` when the gateway cannot be
reached.

    async with GrpcClient("127.0.0.1:8422") as client:
        async for event in client.generate({"model": "m", "messages": [...]}):
            print(event.text, end="")
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import grpc
from grpc import aio

from airlane.client.errors import ClientError, ConnectFailed, rejected
from airlane.client.events import StreamEvent
from airlane.v1 import events_pb2, service_pb2, service_pb2_grpc
from airlane.wire.proto import (
    ERROR_CODE_METADATA,
    chat_request_message,
    event_dict,
    event_message,
)

__all__ = ["KEEPALIVE_OPTIONS", "GrpcClient"]

KEEPALIVE_OPTIONS = (
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
)
"""Ping every 10 s, idle or not: the gateway accepts it (grpcio's default server answers such
a client with GOAWAY ``too_many_pings``), and a dead connection is noticed in 20 s."""

_UNREACHABLE = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}


class GrpcClient:
    """A gRPC client for one gateway (``host:port`` of its gRPC listener)."""

    def __init__(
        self,
        target: str,
        api_key: str | None = None,
        *,
        options: tuple[tuple[str, Any], ...] = KEEPALIVE_OPTIONS,
        model_id: str | None = None,
    ) -> None:
        self.target = target
        """The gateway's gRPC address."""
        self._channel = aio.insecure_channel(target, options=options)
        self._stub = service_pb2_grpc.AirlaneStub(self._channel)  # type: ignore[no-untyped-call]
        metadata = []
        if api_key:
            metadata.append(("authorization", f"Bearer {api_key}"))
        if model_id:
            metadata.append(("x-model-id", model_id))
        self._metadata = tuple(metadata)
        self.last_stream_id: str | None = None
        """The stream id of the latest `generate` (known from its first event)."""

    async def __aenter__(self) -> GrpcClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the channel (cancelling calls in flight)."""
        await self._channel.close()

    # -- operations -------------------------------------------------------------------------

    async def generate(self, request: Mapping[str, Any]) -> AsyncIterator[StreamEvent]:
        """Start a generation (an OpenAI chat request body) and yield its events."""
        chat = chat_request_message(request)
        call = self._stub.Generate(
            service_pb2.GenerateRequest(request=chat), metadata=self._metadata
        )
        async for stream_id, event in _events(call):
            self.last_stream_id = stream_id
            yield event

    async def subscribe(
        self, stream_id: str, resume: str | None = None
    ) -> AsyncIterator[StreamEvent]:
        """Yield ``stream_id``'s events from the start, or after ``resume`` (``epoch:seq``)."""
        request = service_pb2.SubscribeRequest(stream_id=stream_id)
        if resume:
            epoch, _, seq = resume.rpartition(":")
            if not epoch or not seq.isdigit():
                raise ValueError(f"not a resume token: {resume!r}")
            request.after.CopyFrom(events_pb2.Position(epoch=epoch, seq=int(seq)))
        async for _, event in _events(self._stub.Subscribe(request, metadata=self._metadata)):
            yield event

    async def cancel(self, stream_id: str) -> bool:
        """Stop a stream's producer; True if it was still running."""
        try:
            reply = await self._stub.Cancel(
                service_pb2.CancelRequest(stream_id=stream_id), metadata=self._metadata
            )
        except aio.AioRpcError as exc:
            raise _translate(exc) from exc
        return bool(reply.cancelled)

    async def publish(self, stream_id: str, event: Mapping[str, Any]) -> int:
        """Append one event (in the native JSON form) to a named stream; return its seq."""
        message = event_message(event)
        try:
            reply = await self._stub.Publish(
                service_pb2.PublishRequest(stream_id=stream_id, event=message),
                metadata=self._metadata,
            )
        except aio.AioRpcError as exc:
            raise _translate(exc) from exc
        return int(reply.seq)


async def _events(call: Any) -> AsyncIterator[tuple[str, StreamEvent]]:
    try:
        async for item in call:
            event = item.event
            data = event_dict(event)
            data["seq"] = event.seq
            token = f"{item.position.epoch}:{item.position.seq}"
            yield item.stream_id, StreamEvent(event.seq, str(data["kind"]), data, token)
    except aio.AioRpcError as exc:
        raise _translate(exc) from exc
    finally:
        call.cancel()  # a caller that stops early detaches; a finished call ignores this


def _translate(exc: aio.AioRpcError) -> ClientError:
    code, details = exc.code(), exc.details() or ""
    # The gateway's error code, where it sent one, says more than the status: UNAVAILABLE
    # with "overloaded" is a refusal to start (safe to resend), not an unreachable gateway.
    gateway_code = next(
        (str(value) for key, value in exc.trailing_metadata() or () if key == ERROR_CODE_METADATA),
        None,
    )
    if gateway_code is not None:
        return rejected(details, code=gateway_code)
    if code in _UNREACHABLE:
        return ConnectFailed(f"gRPC {code.name}: {details}")
    if code == grpc.StatusCode.NOT_FOUND:
        return rejected(details, status=404, code=code.name)
    return rejected(details, code=code.name)
