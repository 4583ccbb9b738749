"""The event log API: append typed events, replay, and consume with durable groups.

=======  ==========================================  ============================================
method   path                                        what
=======  ==========================================  ============================================
GET      /v1/logs                                    the logs' names
PUT      /v1/logs/{log}                              create (``max_age_s``, ``max_bytes``,
                                                     ``max_events``); 201, or 200 if it existed
GET      /v1/logs/{log}                              first and last seq, counts, limits
DELETE   /v1/logs/{log}                              delete the log and its groups
POST     /v1/logs/{log}/events                       append one event, or ``{"events": [...]}``
GET      /v1/logs/{log}/events                       replay: ``?from_seq=`` or ``?from_time=``
                                                     (RFC 3339 or Unix ns), ``&limit=``
POST     /v1/logs/{log}/groups/{group}/fetch         hand out events to this member
                                                     (``max_events``, ``timeout_s``; a new group:
                                                     ``ack_wait_s``, ``max_deliver``,
                                                     ``start_seq`` / ``start_time``)
POST     /v1/logs/{log}/groups/{group}/ack           ``{"tokens": [...]}``: settle deliveries
POST     /v1/logs/{log}/groups/{group}/nak           ``{"tokens": [...], "delay_s": 5}``
POST     /v1/logs/{log}/groups/{group}/progress      ``{"tokens": [...]}``: restart ack deadlines
GET      /v1/logs/{log}/groups/{group}               the group's position and pending acks
                                                     (404 until a fetch creates the group)
DELETE   /v1/logs/{log}/groups/{group}               delete the group
=======  ==========================================  ============================================

An event is ``{"type": "reward.v1", "data": <any JSON>}``, or ``"data_base64"`` with a
``"content_type"`` for other payloads (Protobuf, say), plus optional ``"headers"`` (strings)
and ``"idempotency_key"``. Events whose type has a schema in the registry are validated
before anything is stored (422 ``schema_violation`` with the errors otherwise).

A fetch answers ``{"deliveries": [{"token": ..., "deliveries": 1, "record": {...}}]}``; the
token settles the delivery on any node. What is not acknowledged within the group's
``ack_wait_s`` is handed out again, with ``deliveries`` counting up.

The first fetch creates the group, with the settings it gives (defaults for the rest). A fetch
on an existing group leaves them out and gets the group's own; one that gives a setting other
than the group's is refused with 409 ``group_settings_conflict``. Absent and ``null`` both mean
"not given": joining never changes a group's settings.
"""

from __future__ import annotations

import datetime
from typing import Any

from airlane.core.errors import BadRequest, NotFound
from airlane.core.numbers import decimal
from airlane.gateway import EventLogs, Principal, parse_new_event
from airlane.transports.http.asgi import (
    Receive,
    Request,
    Send,
    allow_methods,
    read_json,
    send_body,
    send_json,
)
from airlane.transports.http.context import AppContext

__all__ = ["handle_logs", "parse_time_ns"]

_GROUP_ACTIONS = ("fetch", "ack", "nak", "progress")


def parse_time_ns(value: Any, name: str) -> int:
    """A time as Unix nanoseconds (an integer) or an RFC 3339 string; a 400 otherwise."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str):
        number = decimal(value)
        if number is not None:
            return number
        try:
            moment = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            pass
        else:
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=datetime.UTC)
            # Whole seconds and microseconds separately: a float would round the nanoseconds.
            epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
            delta = moment - epoch
            return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + (
                delta.microseconds * 1000
            )
    raise BadRequest(f"'{name}' must be Unix nanoseconds or an RFC 3339 time", param=name)


def _optional_number(body: dict[str, Any], name: str) -> Any:
    value = body.get(name)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise BadRequest(f"'{name}' must be a number", param=name)
    return value


async def handle_logs(
    app: AppContext, principal: Principal, request: Request, receive: Receive, send: Send
) -> None:
    """Route a request under ``/v1/logs``."""
    logs = app.gateway.logs
    parts = (
        request.path[len("/v1/logs") :].strip("/").split("/") if request.path != "/v1/logs" else []
    )
    method = request.method
    if not parts or parts == [""]:
        allow_methods(method, "GET")
        await send_json(send, 200, {"logs": await logs.names(principal)})
        return
    log = parts[0]
    if len(parts) == 1:
        if method == "PUT":
            body = await read_json(receive, app.config.max_body_bytes) if _has_body(request) else {}
            if not isinstance(body, dict):
                raise BadRequest("send a JSON object of limits")
            info, created = await logs.create(
                principal,
                log,
                max_age_s=_optional_number(body, "max_age_s"),
                max_bytes=_optional_number(body, "max_bytes"),
                max_events=_optional_number(body, "max_events"),
            )
            await send_json(send, 201 if created else 200, info.to_dict())
        elif method == "GET":
            await send_json(send, 200, (await logs.info(principal, log)).to_dict())
        elif method == "DELETE":
            await logs.delete(principal, log)
            await send_body(send, 204, b"", b"text/plain")
        else:
            allow_methods(method, "GET, PUT, DELETE")
        return
    if parts[1:] == ["events"]:
        if method == "POST":
            await _append(app, principal, log, receive, send)
        elif method == "GET":
            await _replay(logs, principal, log, request, send)
        else:
            allow_methods(method, "GET, POST")
        return
    if len(parts) in (3, 4) and parts[1] == "groups":
        group, action = parts[2], parts[3] if len(parts) == 4 else ""
        await _group(app, principal, log, group, action, request, receive, send)
        return
    raise NotFound(f"no log resource {request.path[:200]}")


async def _append(
    app: AppContext, principal: Principal, log: str, receive: Receive, send: Send
) -> None:
    body = await read_json(receive, app.config.max_body_bytes)
    if isinstance(body, dict) and "events" in body:
        items = body["events"]
        if not isinstance(items, list):
            raise BadRequest("'events' must be a list of events", param="events")
        events = [parse_new_event(item) for item in items]
    else:
        events = [parse_new_event(body)]
    records = await app.gateway.logs.append(principal, log, events)
    await send_json(send, 201, {"records": [record.to_dict() for record in records]})


async def _replay(
    logs: EventLogs, principal: Principal, log: str, request: Request, send: Send
) -> None:
    limit = request.query_int("limit", 100, 1, 10_000)
    from_time = request.query.get("from_time")
    if from_time is not None and "from_seq" in request.query:
        raise BadRequest("give from_seq or from_time, not both")
    if from_time is not None:
        from_time_ns = parse_time_ns(from_time, "from_time")
        records = await logs.read(principal, log, from_time_ns=from_time_ns, limit=limit)
    else:
        from_seq = request.query_int("from_seq", 0, 0, 2**63 - 1) or None
        records = await logs.read(principal, log, from_seq=from_seq, limit=limit)
    next_seq = records[-1].seq + 1 if records else None
    await send_json(
        send, 200, {"records": [record.to_dict() for record in records], "next_seq": next_seq}
    )


async def _group(
    app: AppContext,
    principal: Principal,
    log: str,
    group: str,
    action: str,
    request: Request,
    receive: Receive,
    send: Send,
) -> None:
    logs, method = app.gateway.logs, request.method
    if action == "":
        if method == "GET":
            info = await logs.group_info(principal, log, group)
            await send_json(send, 200, info.to_dict())
        elif method == "DELETE":
            await logs.delete_group(principal, log, group)
            await send_body(send, 204, b"", b"text/plain")
        else:
            allow_methods(method, "GET, DELETE")
        return
    if action not in _GROUP_ACTIONS:
        raise NotFound(f"no group action {action[:40]!r}")
    allow_methods(method, "POST")
    body = await read_json(receive, app.config.max_body_bytes) if _has_body(request) else {}
    if not isinstance(body, dict):
        raise BadRequest("send a JSON object")
    if action == "fetch":
        # Only what the body gives: an absent setting must reach the log as "not asked", so
        # that an existing group's own applies rather than a default.
        settings: dict[str, Any] = {}
        for name in ("ack_wait_s", "max_deliver", "start_seq"):
            if body.get(name) is not None:
                settings[name] = _optional_number(body, name)
        if body.get("start_time") is not None:
            settings["start_time_ns"] = parse_time_ns(body["start_time"], "start_time")
        deliveries = await logs.fetch(
            principal,
            log,
            group,
            max_events=int(_optional_number(body, "max_events") or 64),
            timeout_s=float(_optional_number(body, "timeout_s") or 1.0),
            settings=settings,
        )
        await send_json(
            send,
            200,
            {
                "deliveries": [
                    {"token": d.token, "deliveries": d.deliveries, "record": d.record.to_dict()}
                    for d in deliveries
                ]
            },
        )
        return
    tokens = body.get("tokens")
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        raise BadRequest("'tokens' must be a list of delivery tokens", param="tokens")
    delay = _optional_number(body, "delay_s") if action == "nak" else None
    settled = await logs.settle(principal, log, tokens, action, delay)
    await send_json(send, 200, {"settled": settled})


def _has_body(request: Request) -> bool:
    length = request.header(b"content-length")
    return (length is not None and length != "0") or request.header(
        b"transfer-encoding"
    ) is not None
