"""``airlane.v1.EventLogs``: the event logs over gRPC (`airlane.eventlog` behind the gateway).

The same logs, groups and tokens as the HTTP API: a delivery fetched over gRPC can be settled
over HTTP and the other way round, on any node (the gateway keeps the consumer group handles,
`airlane.gateway.EventLogs`).
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from typing import Any

from grpc import aio

from airlane.core.errors import AirlaneError, BadRequest
from airlane.gateway import ForwardedIdentity, Gateway, NewEvent, Principal, Record, ServerTls
from airlane.transports.grpc.context import bearer_token, checked_call, request_facts
from airlane.transports.grpc.errors import abort
from airlane.transports.grpc.tls import caller_identity, peer_address
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


def _optional(message: Any, field: str) -> Any:
    return getattr(message, field) if message.HasField(field) else None


class EventLogService(eventlog_pb2_grpc.EventLogsServicer):
    """The servicer; see the module docstring."""

    def __init__(
        self,
        gateway: Gateway,
        tls: ServerTls | None = None,
        forwarded: ForwardedIdentity | None = None,
    ) -> None:
        self.gateway = gateway
        self.tls = tls
        self.forwarded = forwarded

    def _principal(self, context: aio.ServicerContext) -> Principal:
        metadata = context.invocation_metadata() or ()
        principal = self.gateway.authenticate(
            bearer_token(metadata),
            caller_identity(context, self.tls, self.forwarded),
            origin=peer_address(context.peer()),
            request=functools.partial(request_facts, metadata),
        )
        checked_call()
        return principal

    async def CreateLog(
        self, request: pb.CreateLogRequest, context: aio.ServicerContext
    ) -> pb.LogInfo:
        """See the contract."""
        try:
            info, _ = await self.gateway.logs.create(
                self._principal(context),
                request.name,
                max_events=_optional(request, "max_events"),
                max_bytes=_optional(request, "max_bytes"),
                max_age_s=_optional(request, "max_age_s"),
            )
        except AirlaneError as exc:
            await abort(context, exc)
        return _info(info.to_dict())

    async def GetLog(self, request: pb.LogRequest, context: aio.ServicerContext) -> pb.LogInfo:
        """See the contract."""
        try:
            info = await self.gateway.logs.info(self._principal(context), request.name)
        except AirlaneError as exc:
            await abort(context, exc)
        return _info(info.to_dict())

    async def ListLogs(
        self, request: pb.ListLogsRequest, context: aio.ServicerContext
    ) -> pb.ListLogsResponse:
        """See the contract."""
        try:
            names = await self.gateway.logs.names(self._principal(context))
        except AirlaneError as exc:
            await abort(context, exc)
        return pb.ListLogsResponse(names=names)

    async def DeleteLog(
        self, request: pb.LogRequest, context: aio.ServicerContext
    ) -> pb.DeleteResponse:
        """See the contract."""
        try:
            await self.gateway.logs.delete(self._principal(context), request.name)
        except AirlaneError as exc:
            await abort(context, exc)
        return pb.DeleteResponse()

    async def Append(
        self, request: pb.AppendRequest, context: aio.ServicerContext
    ) -> pb.AppendResponse:
        """See the contract."""
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
        try:
            records = await self.gateway.logs.append(self._principal(context), request.log, events)
        except AirlaneError as exc:
            await abort(context, exc)
        return pb.AppendResponse(records=[_record(r) for r in records])

    async def Read(
        self, request: pb.ReadRequest, context: aio.ServicerContext
    ) -> AsyncIterator[pb.LogRecord]:
        """See the contract."""
        logs = self.gateway.logs
        limit = min(request.limit or 100, MAX_READ)
        start = request.WhichOneof("start")
        try:
            principal = self._principal(context)
            if start == "from_time_ns":
                page = await logs.read(
                    principal,
                    request.log,
                    from_time_ns=request.from_time_ns,
                    limit=min(limit, _READ_PAGE),
                )
            else:
                first = request.from_seq if start == "from_seq" else None
                page = await logs.read(
                    principal, request.log, from_seq=first, limit=min(limit, _READ_PAGE)
                )
            sent = 0
            while page:
                for record in page:
                    yield _record(record)
                sent += len(page)
                if sent >= limit:
                    return
                page = await logs.read(
                    principal,
                    request.log,
                    from_seq=page[-1].seq + 1,
                    limit=min(limit - sent, _READ_PAGE),
                )
        except AirlaneError as exc:
            await abort(context, exc)

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
            deliveries = await self.gateway.logs.fetch(
                self._principal(context),
                request.log,
                request.group,
                max_events=request.max_events or 64,
                timeout_s=request.timeout_s or 1.0,
                settings={k: v for k, v in settings.items() if v is not None},
            )
        except AirlaneError as exc:
            await abort(context, exc)
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
            principal = self._principal(context)
            if action is None:
                raise BadRequest(f"unknown settle action {request.action}", param="action")
            delay = _optional(request, "delay_s") if action == "nak" else None
            settled = await self.gateway.logs.settle(
                principal, request.log, list(request.tokens), action, delay
            )
        except AirlaneError as exc:
            await abort(context, exc)
        return pb.SettleResponse(settled=settled)

    async def GetGroup(
        self, request: pb.GroupRequest, context: aio.ServicerContext
    ) -> pb.GroupInfo:
        """See the contract."""
        try:
            group = await self.gateway.logs.group_info(
                self._principal(context), request.log, request.group
            )
        except AirlaneError as exc:
            await abort(context, exc)
        info = group.to_dict()
        return pb.GroupInfo(**{k: v for k, v in info.items() if v is not None})

    async def DeleteGroup(
        self, request: pb.GroupRequest, context: aio.ServicerContext
    ) -> pb.DeleteResponse:
        """See the contract."""
        try:
            await self.gateway.logs.delete_group(
                self._principal(context), request.log, request.group
            )
        except AirlaneError as exc:
            await abort(context, exc)
        return pb.DeleteResponse()


def _info(info: dict[str, Any]) -> pb.LogInfo:
    return pb.LogInfo(**{k: v for k, v in info.items() if v is not None})
