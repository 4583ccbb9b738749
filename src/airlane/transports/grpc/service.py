"""`AirlaneService`: the ``airlane.v1.Airlane`` gRPC service, bound to the gateway.

Every RPC authenticates from the ``authorization: Bearer <key>`` metadata through the single
security gate, and reports what went wrong with the status code that means it:

    hub / gate / request error          status
    StreamNotFound                      NOT_FOUND
    InvalidStreamId, bad request/event  INVALID_ARGUMENT
    bad resume token, InvalidResume     OUT_OF_RANGE (a position past the end), INVALID_ARGUMENT
    StreamExists                        ALREADY_EXISTS
    StreamEnded                         FAILED_PRECONDITION
    HubFull, too many subscriptions     RESOURCE_EXHAUSTED
    Overloaded (set-up waited too long) UNAVAILABLE (retry later, or on another node)
    Unauthenticated / PermissionDenied  UNAUTHENTICATED / PERMISSION_DENIED

Streaming calls write one ``StreamEvent`` per event and end after the terminal one; a client
that cancels its call only detaches (the stream's orphan policy applies); `Cancel` stops the
generation.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any, NoReturn

import grpc
from grpc import aio

from airlane.backends.base import GenerationRequest, LoadTestSpec
from airlane.core import BadResumeToken, OrphanMode, OrphanPolicy
from airlane.gateway import Gateway, orphan_policy_from
from airlane.gateway.chat_request import InvalidChatRequest, parse_chat_request
from airlane.hub import (
    HubError,
    HubFull,
    InvalidResume,
    InvalidStreamId,
    StreamEnded,
    StreamExists,
    StreamNotFound,
    Subscription,
)
from airlane.runtime.admission import Admission, Overloaded
from airlane.security import PermissionDenied, Principal, SecurityError, Unauthenticated
from airlane.transports.grpc.config import GrpcServerConfig
from airlane.transports.grpc.context import bearer_token
from airlane.v1 import events_pb2, service_pb2, service_pb2_grpc
from airlane.wire.errors import DecodeError
from airlane.wire.event_json import event_from_dict
from airlane.wire.proto import (
    ERROR_CODE_METADATA,
    StreamEventWriter,
    chat_body,
    event_dict,
    info_to_proto,
    position_from_proto,
    stream_event,
)

__all__ = ["AirlaneService", "status_of"]

log = logging.getLogger("airlane.grpc")

_LOADTEST_ORPHAN = OrphanPolicy(OrphanMode.CANCEL)  # a benchmark stream has one reader

_STATUS: tuple[tuple[type[Exception], grpc.StatusCode], ...] = (
    (StreamNotFound, grpc.StatusCode.NOT_FOUND),
    (InvalidStreamId, grpc.StatusCode.INVALID_ARGUMENT),
    (InvalidResume, grpc.StatusCode.OUT_OF_RANGE),
    (StreamExists, grpc.StatusCode.ALREADY_EXISTS),
    (StreamEnded, grpc.StatusCode.FAILED_PRECONDITION),
    (HubFull, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (Overloaded, grpc.StatusCode.UNAVAILABLE),
    (Unauthenticated, grpc.StatusCode.UNAUTHENTICATED),
    (PermissionDenied, grpc.StatusCode.PERMISSION_DENIED),
    (InvalidChatRequest, grpc.StatusCode.INVALID_ARGUMENT),
    (BadResumeToken, grpc.StatusCode.INVALID_ARGUMENT),
    (DecodeError, grpc.StatusCode.INVALID_ARGUMENT),
)


class _Refused(Exception):
    """A Session request refused for a reason of its own (not the hub's)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


_EXPECTED = (
    HubError,
    SecurityError,
    InvalidChatRequest,
    BadResumeToken,
    DecodeError,
    Overloaded,
    _Refused,
)


def status_of(exc: Exception) -> grpc.StatusCode:
    """The status code for a refusal raised by the gateway, the hub or the gate."""
    for cls, code in _STATUS:
        if isinstance(exc, cls):
            return code
    return grpc.StatusCode.INTERNAL


def _message(exc: Exception) -> str:
    if isinstance(exc, InvalidChatRequest):
        return f"{exc.param}: {exc.message}"
    return str(exc)


async def _abort(context: aio.ServicerContext, exc: Exception) -> NoReturn:
    # The gateway's own error code travels beside the status (`ERROR_CODE_METADATA`).
    code = getattr(exc, "code", None)
    trailer = ((ERROR_CODE_METADATA, code),) if isinstance(code, str) else ()
    await context.abort(status_of(exc), _message(exc), trailing_metadata=trailer)
    raise AssertionError("abort returns by raising")  # pragma: no cover


class AirlaneService(service_pb2_grpc.AirlaneServicer):
    """The service's implementation; see the module docstring."""

    def __init__(self, gateway: Gateway, config: GrpcServerConfig) -> None:
        self.gateway = gateway
        self.config = config

    # -- helpers ----------------------------------------------------------------------------

    def _principal(self, context: aio.ServicerContext) -> Principal:
        return self.gateway.security.authenticate(bearer_token(context.invocation_metadata()))

    async def _events(
        self, stream_id: str, epoch: str, subscription: Subscription
    ) -> AsyncIterator[bytes]:
        """Serialized ``StreamEvent``s (see `airlane.transports.grpc.handlers`)."""
        limit = self.config.batch_limit
        write = StreamEventWriter(stream_id, epoch)
        while batch := await subscription.next_batch(limit):
            for event in batch:
                yield write(event)
            subscription.mark_written(batch, time.monotonic_ns())

    # -- the RPCs ---------------------------------------------------------------------------

    async def Generate(
        self, request: service_pb2.GenerateRequest, context: aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        """Start a generation and stream it."""
        # Set-up waits while paced work is due, as on every transport (`airlane.runtime.admission`).
        # A Session's generate does not: its requests are handled in order, and waiting there
        # would hold the session's credits and cancels too.
        gateway = self.gateway
        loadtest = request.HasField("loadtest")
        try:
            await Admission.for_loop().admit()
            principal = self._principal(context)
            if loadtest:
                spec = request.loadtest
                try:
                    checked = LoadTestSpec.checked(spec.chunks, spec.mode, spec.interval_ms)
                except ValueError as exc:
                    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
                generation = GenerationRequest(model="airlane-loadtest", loadtest=checked)
                policy = _LOADTEST_ORPHAN
            else:
                parsed = parse_chat_request(chat_body(request.request))
                generation = parsed.generation
                policy = orphan_policy_from(parsed.orphan, gateway.config.orphan)
            info = await gateway.generate(principal, generation, orphan=policy)
            subscription = await gateway.subscribe(
                principal, info.stream_id, subscriber=principal.name
            )
        except _EXPECTED as exc:
            await _abort(context, exc)
        try:
            async with subscription:
                async for item in self._events(info.stream_id, info.epoch, subscription):
                    yield item
        finally:
            if loadtest:  # nobody else wants a benchmark stream's chunks: free them now
                with contextlib.suppress(HubError, SecurityError):
                    await gateway.delete(principal, info.stream_id)

    async def Subscribe(
        self, request: service_pb2.SubscribeRequest, context: aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        """Read a stream from its start or after a position."""
        try:
            principal = self._principal(context)
            resume = position_from_proto(request.after) if request.HasField("after") else None
            subscription = await self.gateway.subscribe(
                principal, request.stream_id, resume=resume, subscriber=principal.name
            )
        except _EXPECTED as exc:
            await _abort(context, exc)
        async with subscription:
            epoch = subscription.position.epoch
            async for item in self._events(request.stream_id, epoch, subscription):
                yield item

    async def Publish(
        self, request: service_pb2.PublishRequest, context: aio.ServicerContext
    ) -> service_pb2.PublishResponse:
        """Append one event to a named stream."""
        try:
            principal = self._principal(context)
            return await self._publish(principal, request, 1)
        except _EXPECTED as exc:
            await _abort(context, exc)

    async def PublishStream(
        self,
        requests: AsyncIterator[service_pb2.PublishRequest],
        context: aio.ServicerContext,
    ) -> service_pb2.PublishResponse:
        """Append every event sent; answer after the last."""
        count = 0
        try:
            principal = self._principal(context)
            reply = service_pb2.PublishResponse()
            async for request in requests:
                reply = await self._publish(principal, request, count + 1)
                count += 1
            return reply
        except _EXPECTED as exc:
            # The events before the refused one stay appended: say how many.
            await context.abort(
                status_of(exc), f"event {count + 1}: {_message(exc)} ({count} appended before it)"
            )
            raise AssertionError("abort returns by raising") from None  # pragma: no cover

    async def _publish(
        self, principal: Principal, request: service_pb2.PublishRequest, count: int
    ) -> service_pb2.PublishResponse:
        event = event_from_dict(event_dict(request.event))
        published = await self.gateway.publish(principal, request.stream_id, event)
        return service_pb2.PublishResponse(
            stream_id=request.stream_id, seq=published.seq, published=count
        )

    async def Cancel(
        self, request: service_pb2.CancelRequest, context: aio.ServicerContext
    ) -> service_pb2.CancelResponse:
        """Stop a stream's producer."""
        try:
            principal = self._principal(context)
            cancelled = await self.gateway.cancel(principal, request.stream_id)
        except _EXPECTED as exc:
            await _abort(context, exc)
        return service_pb2.CancelResponse(cancelled=cancelled)

    async def Info(
        self, request: service_pb2.InfoRequest, context: aio.ServicerContext
    ) -> service_pb2.StreamInfo:
        """A stream's status."""
        try:
            principal = self._principal(context)
            info = await self.gateway.info(principal, request.stream_id)
        except _EXPECTED as exc:
            await _abort(context, exc)
        return info_to_proto(info)

    async def Session(
        self,
        requests: AsyncIterator[service_pb2.SessionRequest],
        context: aio.ServicerContext,
    ) -> AsyncIterator[service_pb2.SessionResponse]:
        """Many streams on one call, with credit-based flow control."""
        try:
            principal = self._principal(context)
        except _EXPECTED as exc:
            await _abort(context, exc)
        session = _Session(self, principal)
        reader = asyncio.create_task(session.read(requests), name="grpc-session-reader")
        try:
            while (response := await session.outbox.get()) is not None:
                yield response
                if session.finished and session.outbox.empty():
                    break  # the end marker found the outbox full: this was the last answer
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
            await session.aclose()


class _Subscription:
    """One stream read within a `Session` call, with its credit."""

    def __init__(self, subscription: Subscription, credit: int) -> None:
        self.subscription = subscription
        self.credit = credit
        self.granted = asyncio.Event()
        self.task: asyncio.Task[None] | None = None


class _Session:
    """The state of one `AirlaneService.Session` call: its subscriptions and its outbox."""

    def __init__(self, service: AirlaneService, principal: Principal) -> None:
        self.service = service
        self.gateway = service.gateway
        self.principal = principal
        config = service.config
        self.outbox: asyncio.Queue[service_pb2.SessionResponse | None] = asyncio.Queue(
            config.session_outbox
        )
        self.subs: dict[str, _Subscription] = {}
        self.reading = True
        self.finished = False

    async def read(self, requests: AsyncIterator[service_pb2.SessionRequest]) -> None:
        """Handle requests in order until the client half-closes; then end the call once
        every subscription has ended."""
        try:
            async for request in requests:
                response = await self._handle(request)
                if response is not None:
                    response.ref = request.ref
                    await self.outbox.put(response)
        finally:
            self.reading = False
            self._maybe_end()

    def _maybe_end(self) -> None:
        """End the call once the client half-closed and every subscription has ended. The
        end marker never waits for room: if the outbox is full, the call's loop sees
        `finished` after the last answer instead."""
        if not self.reading and not self.subs and not self.finished:
            self.finished = True
            if not self.outbox.full():
                self.outbox.put_nowait(None)

    async def _handle(
        self, request: service_pb2.SessionRequest
    ) -> service_pb2.SessionResponse | None:
        op = request.WhichOneof("op")
        try:
            if op == "generate":
                return await self._generate(request.generate)
            if op == "subscribe":
                return await self._subscribe(request.subscribe)
            if op == "unsubscribe":
                return await self._unsubscribe(request.unsubscribe)
            if op == "publish":
                published = await self.service._publish(self.principal, request.publish, 1)
                return service_pb2.SessionResponse(published=published)
            if op == "cancel":
                cancelled = await self.gateway.cancel(self.principal, request.cancel.stream_id)
                return service_pb2.SessionResponse(
                    cancelled=service_pb2.CancelResponse(cancelled=cancelled)
                )
            if op == "credit":
                sub = self.subs.get(request.credit.stream_id)
                if sub is not None:
                    sub.credit += request.credit.events
                    sub.granted.set()
                return None
            return _error("invalid_request", "a SessionRequest needs an op")
        except _EXPECTED as exc:
            code = getattr(exc, "code", "invalid_request")
            return _error(str(code), _message(exc), _stream_of(request))

    async def _generate(self, request: service_pb2.GenerateRequest) -> service_pb2.SessionResponse:
        parsed = parse_chat_request(chat_body(request.request))
        policy = orphan_policy_from(parsed.orphan, self.gateway.config.orphan)
        info = await self.gateway.generate(self.principal, parsed.generation, orphan=policy)
        handle = events_pb2.StreamHandle(stream_id=info.stream_id, epoch=info.epoch)
        await self._start(info.stream_id, None, 0)
        return service_pb2.SessionResponse(generated=handle)

    async def _subscribe(
        self, request: service_pb2.SubscribeRequest
    ) -> service_pb2.SessionResponse:
        resume = position_from_proto(request.after) if request.HasField("after") else None
        handle = await self._start(request.stream_id, resume, request.credit)
        return service_pb2.SessionResponse(subscribed=handle)

    async def _start(self, stream_id: str, resume: Any, credit: int) -> events_pb2.StreamHandle:
        if stream_id in self.subs:
            raise _Refused("already_subscribed", f"already subscribed to {stream_id!r}")
        limit = self.service.config.max_session_streams
        if len(self.subs) >= limit:
            raise _Refused("too_many_subscriptions", f"at most {limit} streams per session")
        subscription = await self.gateway.subscribe(
            self.principal, stream_id, resume=resume, subscriber=self.principal.name
        )
        position = subscription.position
        handle = events_pb2.StreamHandle(
            stream_id=stream_id, epoch=position.epoch, last_seq=position.seq
        )
        if subscription.exhausted:
            handle.ended = True
            await subscription.aclose()
            return handle
        sub = _Subscription(subscription, credit or self.service.config.default_credit)
        self.subs[stream_id] = sub
        sub.task = asyncio.create_task(self._pump(stream_id, sub), name=f"grpc-pump {stream_id}")
        return handle

    async def _unsubscribe(self, stream_id: str) -> service_pb2.SessionResponse:
        sub = self.subs.pop(stream_id, None)
        if sub is None:
            raise _Refused("not_subscribed", f"not subscribed to {stream_id!r}")
        await self._stop(sub)
        position = sub.subscription.position
        handle = events_pb2.StreamHandle(
            stream_id=stream_id, epoch=position.epoch, last_seq=position.seq
        )
        return service_pb2.SessionResponse(unsubscribed=handle)

    async def _pump(self, stream_id: str, sub: _Subscription) -> None:
        subscription = sub.subscription
        epoch = subscription.position.epoch
        limit = self.service.config.batch_limit
        try:
            while True:
                while sub.credit <= 0:
                    sub.granted.clear()
                    await sub.granted.wait()
                batch = await subscription.next_batch(min(sub.credit, limit))
                if not batch:
                    break
                sub.credit -= len(batch)
                for event in batch:
                    response = service_pb2.SessionResponse(
                        event=stream_event(stream_id, epoch, event)
                    )
                    await self.outbox.put(response)
                subscription.mark_written(batch, time.monotonic_ns())
        finally:
            if self.subs.get(stream_id) is sub:
                del self.subs[stream_id]
                await subscription.aclose()
                self._maybe_end()

    async def _stop(self, sub: _Subscription) -> None:
        if sub.task is not None:
            sub.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sub.task
        await sub.subscription.aclose()

    async def aclose(self) -> None:
        """Stop every pump and release every cursor."""
        subs, self.subs = self.subs, {}
        for sub in subs.values():
            await self._stop(sub)


def _error(code: str, message: str, stream_id: str = "") -> service_pb2.SessionResponse:
    error = service_pb2.SessionError(code=code, message=message, stream_id=stream_id)
    return service_pb2.SessionResponse(error=error)


def _stream_of(request: service_pb2.SessionRequest) -> str:
    """The stream a Session request is about ("" for a generate)."""
    op = request.WhichOneof("op")
    if op == "unsubscribe":
        return request.unsubscribe
    if op in ("subscribe", "publish", "cancel", "credit"):
        return str(getattr(request, op).stream_id)
    return ""
