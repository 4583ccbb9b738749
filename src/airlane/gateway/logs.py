"""`EventLogs`: the event logs and their consumer groups, as every transport reaches them.

Each method authorizes its call on the resource ``logs/<log>`` (``publish`` to create, delete
or append; ``subscribe`` to read, replay, consume and settle) and then asks the node's
`airlane.eventlog.EventLog` for the log of that name in the caller's tenant
(`airlane.gateway.tenancy`): another tenant's log is not found, and is not listed. Consumer
group handles are kept open here, one per (log, group) and bounded
(`airlane.eventlog.handles.GroupHandles`), for every wire at once: a delivery fetched over gRPC
can be settled over HTTP on the same handle.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any

import orjson

from airlane.core.errors import AirlaneError, BadRequest, ErrorCode
from airlane.eventlog import Delivery, EventLog, GroupInfo, LogInfo, NewEvent, Record
from airlane.eventlog.base import MAX_BATCH_EVENTS
from airlane.eventlog.checks import check_name
from airlane.eventlog.errors import GroupNotFound, InvalidRequest
from airlane.eventlog.handles import GroupHandles
from airlane.gateway.eventsourcing import EventSourcing
from airlane.gateway.quotas import Quotas
from airlane.gateway.tenancy import finding, own_names, scoped_name
from airlane.security import Action, Principal, SecurityPolicy
from airlane.security.audit import audit_admin
from airlane.wire.limits import MAX_EVENT_DEPTH, json_depth

__all__ = ["MAX_SETTLE_TOKENS", "EventLogs", "log_resource", "parse_new_event"]

MAX_SETTLE_TOKENS = 1000
"""Delivery tokens one settle call may carry."""


def log_resource(log: str) -> str:
    """The resource the security gate is asked about for ``log``."""
    return f"logs/{log}"


class EventLogs:
    """The event log operations; see the module docstring."""

    def __init__(
        self, events: EventSourcing, security: SecurityPolicy, quotas: Quotas | None = None
    ) -> None:
        self._events = events
        self._security = security
        self._quotas = quotas or Quotas()
        self._groups = GroupHandles()

    @property
    def _logs(self) -> EventLog:
        return self._events.logs

    def _allow(self, principal: Principal, action: Action, log: str) -> str:
        """Authorize ``action`` on ``log``; the key its tenant keeps it under."""
        check_name(log, scoped=False)
        self._security.authorize(principal, action, log_resource(log))
        return scoped_name(principal, log)

    def _finding(
        self, principal: Principal, action: Action, key: str, log: str
    ) -> AbstractContextManager[None]:
        """`finding` for ``log``: its errors name it as the client does, and a not-found is
        an audit record."""
        return finding(self._security, principal, action, key, log, log_resource(log))

    # -- logs -------------------------------------------------------------------------------

    async def names(self, principal: Principal) -> list[str]:
        """The names of the caller's tenant's logs (any authenticated principal may list
        them)."""
        return own_names(principal, await self._logs.logs())

    async def create(
        self,
        principal: Principal,
        log: str,
        *,
        max_age_s: float | None = None,
        max_bytes: int | None = None,
        max_events: int | None = None,
    ) -> tuple[LogInfo, bool]:
        """Create ``log`` with these limits (an existing log keeps its own); the info and
        whether it was created now."""
        key = self._allow(principal, Action.LOGS_APPEND, log)
        with self._finding(principal, Action.LOGS_APPEND, key, log):
            existed = key in await self._logs.logs()
            info = await self._logs.create_log(
                key, max_age_s=max_age_s, max_bytes=max_bytes, max_events=max_events
            )
        return replace(info, name=log), not existed

    async def info(self, principal: Principal, log: str) -> LogInfo:
        """``log``'s state."""
        key = self._allow(principal, Action.LOGS_READ, log)
        with self._finding(principal, Action.LOGS_READ, key, log):
            return replace(await self._logs.info(key), name=log)

    async def delete(self, principal: Principal, log: str) -> None:
        """Delete ``log``, its records and its groups."""
        key = self._allow(principal, Action.LOGS_ADMIN, log)
        with self._finding(principal, Action.LOGS_ADMIN, key, log):
            await self._logs.delete_log(key)
        await self._groups.forget(key)
        audit_admin(self._security, principal, "delete_log", log_resource(log))

    # -- records ----------------------------------------------------------------------------

    async def append(
        self, principal: Principal, log: str, events: Sequence[NewEvent]
    ) -> list[Record]:
        """Append ``events`` (1 to `MAX_BATCH_EVENTS`) in order, each validated against its
        type's schema first."""
        key = self._allow(principal, Action.LOGS_APPEND, log)
        if not 1 <= len(events) <= MAX_BATCH_EVENTS:
            raise InvalidRequest(f"append 1 to {MAX_BATCH_EVENTS} events, not {len(events)}")
        with self._finding(principal, Action.LOGS_APPEND, key, log):
            return _named(await self._logs.append_many(key, events), log)

    async def read(
        self,
        principal: Principal,
        log: str,
        *,
        from_seq: int | None = None,
        from_time_ns: int | None = None,
        limit: int = 100,
    ) -> list[Record]:
        """Up to ``limit`` records from ``from_seq`` or ``from_time_ns`` (or the oldest)."""
        key = self._allow(principal, Action.LOGS_READ, log)
        self._quotas.check_bytes(principal)
        with self._finding(principal, Action.LOGS_READ, key, log):
            records = await self._logs.read(
                key, from_seq=from_seq, from_time_ns=from_time_ns, limit=limit
            )
        self._charge(principal, records)
        return _named(records, log)

    # -- consumer groups --------------------------------------------------------------------

    async def fetch(
        self,
        principal: Principal,
        log: str,
        group: str,
        *,
        max_events: int = 64,
        timeout_s: float = 1.0,
        settings: dict[str, Any] | None = None,
    ) -> list[Delivery]:
        """Hand out up to ``max_events`` deliveries to a member of ``group``, waiting up to
        ``timeout_s``. ``settings`` (``ack_wait_s``, ``max_deliver``, ``start_seq``,
        ``start_time_ns``) holds only what the caller asked for: they create a new group; an
        existing group keeps its own, and an asked one that differs is refused
        (`airlane.eventlog.GroupSettingsConflict`)."""
        key = self._allow(principal, Action.LOGS_CONSUME, log)
        self._quotas.check_bytes(principal)
        with self._finding(principal, Action.LOGS_CONSUME, key, log):
            handle = await self._groups.get(self._logs, key, group, settings or {})
            try:
                deliveries = await handle.fetch(max_events, timeout_s)
            except GroupNotFound:
                # Deleted through another node since this one opened its handle: a fetch
                # creates a group that does not exist, so join afresh, once.
                await self._groups.drop(key, group, handle)
                handle = await self._groups.get(self._logs, key, group, settings or {})
                deliveries = await handle.fetch(max_events, timeout_s)
        self._charge(principal, [delivery.record for delivery in deliveries])
        if key != log:
            for delivery in deliveries:
                delivery.record = replace(delivery.record, log=log)
        return deliveries

    async def settle(
        self,
        principal: Principal,
        log: str,
        tokens: Sequence[str],
        action: str,
        delay_s: float | None = None,
    ) -> int:
        """Settle deliveries of ``log`` by their tokens (``ack``, ``nak``, ``progress``);
        how many."""
        key = self._allow(principal, Action.LOGS_CONSUME, log)
        if len(tokens) > MAX_SETTLE_TOKENS:
            raise InvalidRequest(f"at most {MAX_SETTLE_TOKENS} tokens per call")
        # Every token first: a call that names another log's delivery settles nothing.
        if any(self._logs.token_log(token) != key for token in tokens):
            raise InvalidRequest(f"not a delivery token of the log {log!r}")
        with self._finding(principal, Action.LOGS_CONSUME, key, log):
            for token in tokens:
                await self._logs.settle(token, action, delay_s if action == "nak" else None)
        return len(tokens)

    async def group_info(self, principal: Principal, log: str, group: str) -> GroupInfo:
        """``group``'s position and pending deliveries. Looking does not join: a group that
        does not exist yet is a `GroupNotFound`, not one created with the default settings
        that its first member's fetch would then conflict with."""
        key = self._allow(principal, Action.LOGS_CONSUME, log)
        with self._finding(principal, Action.LOGS_CONSUME, key, log):
            return replace(await self._logs.group_info(key, group), log=log)

    async def delete_group(self, principal: Principal, log: str, group: str) -> None:
        """Delete ``group`` (its position and pending deliveries)."""
        key = self._allow(principal, Action.LOGS_ADMIN, log)
        await self._groups.forget(key, group)
        with self._finding(principal, Action.LOGS_ADMIN, key, log):
            await self._logs.delete_group(key, group)
        audit_admin(self._security, principal, "delete_group", f"{log_resource(log)}/{group}")

    async def restart_own_group(self, principal: Principal, log: str, group: str) -> None:
        """Delete ``group`` (if it exists) for a service that keeps its own position and starts
        the group again from there (a rule: `airlane.gateway.rules.task`), so that what the
        last process left unacknowledged is not handed out later, out of order. Authorized as
        consuming, not audited as an admin's deletion."""
        key = self._allow(principal, Action.LOGS_CONSUME, log)
        await self._groups.forget(key, group)
        with self._finding(principal, Action.LOGS_CONSUME, key, log):
            try:
                await self._logs.delete_group(key, group)
            except AirlaneError as exc:
                if exc.code is not ErrorCode.GROUP_NOT_FOUND:
                    raise

    def _charge(self, principal: Principal, records: list[Record]) -> None:
        """Charge what ``records`` carry to ``principal``'s bytes delivered."""
        if records and self._quotas.counts_bytes:
            self._quotas.charge_bytes(principal, sum(len(record.data) for record in records))

    async def aclose(self) -> None:
        """Close the consumer group handles."""
        await self._groups.aclose()


def _named(records: list[Record], log: str) -> list[Record]:
    """``records`` as the client that calls their log ``log`` sees them."""
    if not records or records[0].log == log:
        return records
    return [replace(record, log=log) for record in records]


def parse_new_event(body: Any) -> NewEvent:
    """The event a client's JSON object describes: ``type``, then ``data`` (JSON) or
    ``data_base64`` with ``content_type``, optional ``headers`` and ``idempotency_key``; a
    `BadRequest` naming what is wrong."""
    if not isinstance(body, dict):
        raise BadRequest("an event must be a JSON object")
    event_type = body.get("type")
    if not isinstance(event_type, str):
        raise BadRequest("an event needs a 'type' string, e.g. 'reward.v1'", param="type")
    if "data_base64" in body:
        content_type = body.get("content_type", "application/octet-stream")
        try:
            data = base64.b64decode(body["data_base64"], validate=True)
        except (binascii.Error, TypeError, ValueError):
            raise BadRequest("'data_base64' is not base64", param="data_base64") from None
    elif "data" in body:
        content_type = body.get("content_type", "application/json")
        if json_depth(body["data"]) > MAX_EVENT_DEPTH:
            raise BadRequest(
                f"'data' nests deeper than {MAX_EVENT_DEPTH} levels",
                code=ErrorCode.INVALID_EVENT,
                param="data",
            )
        data = orjson.dumps(body["data"])
    else:
        raise BadRequest("an event needs 'data' (JSON) or 'data_base64'", param="data")
    headers = body.get("headers") or {}
    if not isinstance(content_type, str):
        raise BadRequest("'content_type' must be a string", param="content_type")
    if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
        raise BadRequest("'headers' must map names to strings", param="headers")
    key = body.get("idempotency_key")
    if key is not None and not isinstance(key, str):
        raise BadRequest("'idempotency_key' must be a string", param="idempotency_key")
    return NewEvent(event_type, data, content_type, headers, key)
