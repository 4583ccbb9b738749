"""``airlane.v1.EventLogs``: the event logs over gRPC (`airlane.eventlog` behind the gateway).

The same logs, groups and tokens as the HTTP API (`airlane.transports.http.logs`): a delivery
fetched over gRPC can be settled over HTTP and the other way round, on any node. Consumer
group handles are kept open per (log, group) between calls, bounded, as the HTTP API does.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, NoReturn

import grpc
from grpc import aio

from airlane.eventlog import (
    CapacityExceeded,
    EventLogError,
    EventLogUnavailable,
    EventTooLarge,
    GroupNotFound,
    InvalidRequest,
    LogExists,
    LogNotFound,
    NewEvent,
    Record,
)
from airlane.eventlog.base import MAX_BATCH_EVENTS
from airlane.eventlog.handles import GroupHandles
from airlane.gateway import Gateway
from airlane.registry import RegistryError, SchemaViolation
from airlane.security import Action, Principal, SecurityError
from airlane.transports.grpc.context import bearer_token
from airlane.transports.grpc.service import status_of
from airlane.v1 import eventlog_pb2 as pb
from airlane.v1 import eventlog_pb2_grpc

__all__ = ["EventLogService"]

MAX_READ = 10_000
"""Records one Read call streams at most."""
_READ_PAGE = 500
_ACTIONS = {
    pb.SettleRequest.ACK: "ack",
    pb.SettleRequest.NAK: "nak",
    pb.SettleRequest.PROGRESS: "progress",
}
_STATUS: tuple[tuple[type[Exception], grpc.StatusCode], ...] = (
    (LogNotFound, grpc.StatusCode.NOT_FOUND),
    (GroupNotFound, grpc.StatusCode.NOT_FOUND),
    (LogExists, grpc.StatusCode.ALREADY_EXISTS),
    (InvalidRequest, grpc.StatusCode.INVALID_ARGUMENT),
    (EventTooLarge, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (CapacityExceeded, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (EventLogUnavailable, grpc.StatusCode.UNAVAILABLE),
    (SchemaViolation, grpc.StatusCode.INVALID_ARGUMENT),
)


def _record(record: Record) -> pb.LogRecord:
    return pb.LogRecord(
        log=record.log,
        seq=record.seq,
        time_ns=record.time_ns,
        type=record.type,
        data=record.data,
        content_type=record.content_type,
        headers=record.headers,
    )


async def _abort(context: aio.ServicerContext, exc: Exception) -> NoReturn:
    code = next((c for cls, c in _STATUS if isinstance(exc, cls)), None) or status_of(exc)
    await context.abort(code, str(exc))
    raise AssertionError("abort returns by raising")  # pragma: no cover


def _optional(message: Any, field: str) -> Any:
    return getattr(message, field) if message.HasField(field) else None


class EventLogService(eventlog_pb2_grpc.EventLogsServicer):
    """The servicer; see the module docstring."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.groups = GroupHandles()

    def _principal(self, context: aio.ServicerContext) -> Principal:
        return self.gateway.security.authenticate(bearer_token(context.invocation_metadata()))

    def _allow(self, context: aio.ServicerContext, action: Action, log: str) -> None:
        self.gateway.security.authorize(self._principal(context), action, f"logs/{log}")

    async def CreateLog(
        self, request: pb.CreateLogRequest, context: aio.ServicerContext
    ) -> pb.LogInfo:
        """See the contract."""
        try:
            self._allow(context, Action.PUBLISH, request.name)
            info = await self.gateway.events.logs.create_log(
                request.name,
                max_events=_optional(request, "max_events"),
                max_bytes=_optional(request, "max_bytes"),
                max_age_s=_optional(request, "max_age_s"),
            )
        except (EventLogError, RegistryError, SecurityError) as exc:
            await _abort(context, exc)
        return _info(info.to_dict())

    async def GetLog(self, request: pb.LogRequest, context: aio.ServicerContext) -> pb.LogInfo:
        """See the contract."""
        try:
            self._allow(context, Action.SUBSCRIBE, request.name)
            info = await self.gateway.events.logs.info(request.name)
        except (EventLogError, SecurityError) as exc:
            await _abort(context, exc)
        return _info(info.to_dict())

    async def ListLogs(
        self, request: pb.ListLogsRequest, context: aio.ServicerContext
    ) -> pb.ListLogsResponse:
        """See the contract."""
        try:
            self._principal(context)
            names = await self.gateway.events.logs.logs()
        except (EventLogError, SecurityError) as exc:
            await _abort(context, exc)
        return pb.ListLogsResponse(names=names)

    async def DeleteLog(
        self, request: pb.LogRequest, context: aio.ServicerContext
    ) -> pb.DeleteResponse:
        """See the contract."""
        try:
            self._allow(context, Action.PUBLISH, request.name)
            await self.gateway.events.logs.delete_log(request.name)
            await self.groups.forget(request.name)
        except (EventLogError, SecurityError) as exc:
            await _abort(context, exc)
        return pb.DeleteResponse()

    async def Append(
        self, request: pb.AppendRequest, context: aio.ServicerContext
    ) -> pb.AppendResponse:
        """See the contract."""
        try:
            self._allow(context, Action.PUBLISH, request.log)
            if not 1 <= len(request.events) <= MAX_BATCH_EVENTS:
                raise InvalidRequest(
                    f"append 1 to {MAX_BATCH_EVENTS} events, not {len(request.events)}"
                )
            events = [
                NewEvent(
                    e.type,
                    e.data,
                    e.content_type or "application/json",
                    dict(e.headers),
                    e.idempotency_key or None,
                )
                for e in request.events
            ]
            records = await self.gateway.events.logs.append_many(request.log, events)
        except (EventLogError, RegistryError, SecurityError) as exc:
            await _abort(context, exc)
        return pb.AppendResponse(records=[_record(r) for r in records])

    async def Read(
        self, request: pb.ReadRequest, context: aio.ServicerContext
    ) -> AsyncIterator[pb.LogRecord]:
        """See the contract."""
        logs = self.gateway.events.logs
        limit = min(request.limit or 100, MAX_READ)
        start = request.WhichOneof("start")
        try:
            self._allow(context, Action.SUBSCRIBE, request.log)
            if start == "from_time_ns":
                page = await logs.read(
                    request.log, from_time_ns=request.from_time_ns, limit=min(limit, _READ_PAGE)
                )
            else:
                first = request.from_seq if start == "from_seq" else None
                page = await logs.read(request.log, from_seq=first, limit=min(limit, _READ_PAGE))
            sent = 0
            while page:
                for record in page:
                    yield _record(record)
                sent += len(page)
                if sent >= limit:
                    return
                page = await logs.read(
                    request.log, from_seq=page[-1].seq + 1, limit=min(limit - sent, _READ_PAGE)
                )
        except (EventLogError, SecurityError) as exc:
            await _abort(context, exc)

    async def Fetch(
        self, request: pb.FetchRequest, context: aio.ServicerContext
    ) -> pb.FetchResponse:
        """See the contract."""
        settings = {
            "ack_wait_s": _optional(request, "ack_wait_s"),
            "max_deliver": _optional(request, "max_deliver"),
            "start_seq": _optional(request, "start_seq"),
            "start_time_ns": _optional(request, "start_time_ns"),
        }
        try:
            self._allow(context, Action.SUBSCRIBE, request.log)
            handle = await self.groups.get(
                self.gateway.events.logs,
                request.log,
                request.group,
                {k: v for k, v in settings.items() if v is not None},
            )
            deliveries = await handle.fetch(request.max_events or 64, request.timeout_s or 1.0)
        except (EventLogError, SecurityError) as exc:
            await _abort(context, exc)
        return pb.FetchResponse(
            deliveries=[
                pb.Delivery(token=d.token, deliveries=d.deliveries, record=_record(d.record))
                for d in deliveries
            ]
        )

    async def Settle(
        self, request: pb.SettleRequest, context: aio.ServicerContext
    ) -> pb.SettleResponse:
        """See the contract."""
        action = _ACTIONS.get(request.action)
        try:
            self._allow(context, Action.SUBSCRIBE, request.log)
            if action is None:
                raise InvalidRequest(f"unknown settle action {request.action}")
            if len(request.tokens) > 1000:
                raise InvalidRequest("at most 1000 tokens per call")
            delay = _optional(request, "delay_s") if action == "nak" else None
            for token in request.tokens:
                await self.gateway.events.logs.settle(token, action, delay)
        except (EventLogError, SecurityError) as exc:
            await _abort(context, exc)
        return pb.SettleResponse(settled=len(request.tokens))

    async def GetGroup(
        self, request: pb.GroupRequest, context: aio.ServicerContext
    ) -> pb.GroupInfo:
        """See the contract."""
        try:
            self._allow(context, Action.SUBSCRIBE, request.log)
            handle = await self.groups.get(self.gateway.events.logs, request.log, request.group, {})
            info = (await handle.info()).to_dict()
        except (EventLogError, SecurityError) as exc:
            await _abort(context, exc)
        return pb.GroupInfo(**{k: v for k, v in info.items() if v is not None})

    async def DeleteGroup(
        self, request: pb.GroupRequest, context: aio.ServicerContext
    ) -> pb.DeleteResponse:
        """See the contract."""
        try:
            self._allow(context, Action.SUBSCRIBE, request.log)
            await self.groups.forget(request.log, request.group)
            await self.gateway.events.logs.delete_group(request.log, request.group)
        except (EventLogError, SecurityError) as exc:
            await _abort(context, exc)
        return pb.DeleteResponse()

    async def aclose(self) -> None:
        """Close the consumer group handles."""
        await self.groups.aclose()


def _info(info: dict[str, Any]) -> pb.LogInfo:
    return pb.LogInfo(**{k: v for k, v in info.items() if v is not None})
