"""`AirlaneService`: the ``airlane.v1.Airlane`` gRPC service, bound to the gateway.

Every RPC authenticates from the ``authorization: Bearer <key>`` metadata through the gateway,
and a refusal ends the call with the status `airlane.transports.grpc.errors.GRPC_STATUS` gives
its code, the code itself in the ``airlane-error-code`` trailer (``stream_not_found`` is
NOT_FOUND, ``overloaded`` UNAVAILABLE, a bad request INVALID_ARGUMENT...).

Streaming calls write one ``StreamEvent`` per event and end after the terminal one; a client
that cancels its call only detaches (the stream's orphan policy applies); `Cancel` stops the
generation.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from grpc import aio

from airlane.core.errors import AirlaneError, BadRequest, ErrorCode
from airlane.gateway import (
    ForwardedIdentity,
    Gateway,
    PeerIdentity,
    Principal,
    ServerTls,
    Subscription,
)
from airlane.runtime.admission import Admission
from airlane.transports.grpc.config import GrpcServerConfig
from airlane.transports.grpc.context import (
    Malformed,
    bearer_token,
    checked_call,
    request_facts,
)
from airlane.transports.grpc.errors import abort, message_of
from airlane.transports.grpc.tls import caller_identity, peer_address
from airlane.v1 import events_pb2, service_pb2, service_pb2_grpc
from airlane.wire.errors import DecodeError
from airlane.wire.event_json import event_from_dict
from airlane.wire.proto import (
    StreamEventWriter,
    chat_body,
    event_dict,
    info_to_proto,
    position_from_proto,
    stream_event,
)

__all__ = ["AirlaneService"]

log = logging.getLogger("airlane.grpc")


class AirlaneService(service_pb2_grpc.AirlaneServicer):
    """The service's implementation; see the module docstring."""

    def __init__(
        self,
        gateway: Gateway,
        config: GrpcServerConfig,
        tls: ServerTls | None = None,
        forwarded: ForwardedIdentity | None = None,
    ) -> None:
        self.gateway = gateway
        self.config = config
        self.tls = tls
        self.forwarded = forwarded

    # -- helpers ----------------------------------------------------------------------------

    def _identity(self, context: aio.ServicerContext) -> PeerIdentity | None:
        """Who the caller's certificate says it is (a forwarded one from a trusted proxy,
        else the call's own TLS client certificate's)."""
        return caller_identity(context, self.tls, self.forwarded)

    def _principal(self, context: aio.ServicerContext) -> Principal:
        metadata = context.invocation_metadata() or ()
        principal = self.gateway.authenticate(
            bearer_token(metadata),
            self._identity(context),
            origin=peer_address(context.peer()),
            request=functools.partial(request_facts, metadata),
        )
        checked_call()
        return principal

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
                checked = gateway.loadtest_spec(spec.chunks, spec.mode, spec.interval_ms)
                info = await gateway.start_loadtest(principal, checked)
            else:
                info = (await gateway.start_chat(principal, chat_body(request.request))).info
            subscription = await gateway.subscribe(principal, info.stream_id)
        except AirlaneError as exc:
            await abort(context, exc)
        try:
            async with subscription:
                async for item in self._events(info.stream_id, info.epoch, subscription):
                    yield item
        finally:
            if loadtest:  # nobody else wants a benchmark stream's chunks: free them now
                with contextlib.suppress(AirlaneError):
                    await gateway.delete(principal, info.stream_id)

    async def Subscribe(
        self, request: service_pb2.SubscribeRequest, context: aio.ServicerContext
    ) -> AsyncIterator[bytes]:
        """Read a stream from its start or after a position."""
        try:
            principal = self._principal(context)
            resume = position_from_proto(request.after) if request.HasField("after") else None
            subscription = await self.gateway.subscribe(principal, request.stream_id, resume=resume)
        except AirlaneError as exc:
            await abort(context, exc)
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
        except AirlaneError as exc:
            await abort(context, exc)

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
                if isinstance(request, Malformed):
                    raise request.error()
                reply = await self._publish(principal, request, count + 1)
                count += 1
            return reply
        except AirlaneError as exc:
            # The events before the refused one stay appended: say how many.
            where = f"event {count + 1}: {message_of(exc)} ({count} appended before it)"
            await abort(context, exc, where)

    async def _publish(
        self, principal: Principal, request: service_pb2.PublishRequest, count: int
    ) -> service_pb2.PublishResponse:
        try:
            event = event_from_dict(event_dict(request.event))
        except DecodeError as exc:
            raise BadRequest(str(exc), code=ErrorCode.INVALID_EVENT) from None
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
        except AirlaneError as exc:
            await abort(context, exc)
        return service_pb2.CancelResponse(cancelled=cancelled)

    async def Info(
        self, request: service_pb2.InfoRequest, context: aio.ServicerContext
    ) -> service_pb2.StreamInfo:
        """A stream's status."""
        try:
            principal = self._principal(context)
            info = await self.gateway.info(principal, request.stream_id)
        except AirlaneError as exc:
            await abort(context, exc)
        return info_to_proto(info)

    async def Session(
        self,
        requests: AsyncIterator[service_pb2.SessionRequest],
        context: aio.ServicerContext,
    ) -> AsyncIterator[service_pb2.SessionResponse]:
        """Many streams on one call, with credit-based flow control."""
        try:
            principal = self._principal(context)
        except AirlaneError as exc:
            await abort(context, exc)
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
                if isinstance(request, Malformed):  # answered like any refused request
                    await self.outbox.put(_error(request.error()))
                    continue
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
            return _error(BadRequest("a SessionRequest needs an op"))
        except AirlaneError as exc:
            return _error(exc, _stream_of(request))

    async def _generate(self, request: service_pb2.GenerateRequest) -> service_pb2.SessionResponse:
        self._check_room(None)  # before the generation starts: after, it would run unread
        info = (await self.gateway.start_chat(self.principal, chat_body(request.request))).info
        handle = events_pb2.StreamHandle(stream_id=info.stream_id, epoch=info.epoch)
        await self._start(info.stream_id, None, 0)
        return service_pb2.SessionResponse(generated=handle)

    async def _subscribe(
        self, request: service_pb2.SubscribeRequest
    ) -> service_pb2.SessionResponse:
        resume = position_from_proto(request.after) if request.HasField("after") else None
        handle = await self._start(request.stream_id, resume, request.credit)
        return service_pb2.SessionResponse(subscribed=handle)

    def _check_room(self, stream_id: str | None) -> None:
        """Refuse a stream this session cannot follow (``stream_id`` None: a generation's)."""
        if stream_id is not None and stream_id in self.subs:
            raise AirlaneError(
                f"already subscribed to {stream_id!r}", code=ErrorCode.ALREADY_SUBSCRIBED
            )
        limit = self.service.config.max_session_streams
        if len(self.subs) >= limit:
            raise AirlaneError(
                f"at most {limit} streams per session", code=ErrorCode.TOO_MANY_SUBSCRIPTIONS
            )

    async def _start(self, stream_id: str, resume: Any, credit: int) -> events_pb2.StreamHandle:
        self._check_room(stream_id)
        subscription = await self.gateway.subscribe(self.principal, stream_id, resume=resume)
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
            raise AirlaneError(f"not subscribed to {stream_id!r}", code=ErrorCode.NOT_SUBSCRIBED)
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


def _error(exc: AirlaneError, stream_id: str = "") -> service_pb2.SessionResponse:
    error = service_pb2.SessionError(
        code=exc.code.value, message=message_of(exc), stream_id=stream_id
    )
    return service_pb2.SessionResponse(error=error)


def _stream_of(request: service_pb2.SessionRequest) -> str:
    """The stream a Session request is about ("" for a generate)."""
    op = request.WhichOneof("op")
    if op == "unsubscribe":
        return request.unsubscribe
    if op in ("subscribe", "publish", "cancel", "credit"):
        return str(getattr(request, op).stream_id)
    return ""
