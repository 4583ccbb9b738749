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
DELETE   /v1/logs/{log}/groups/{group}               delete the group
=======  ==========================================  ============================================

An event is ``{"type": "reward.v1", "data": <any JSON>}``, or ``"data_base64"`` with a
``"content_type"`` for other payloads (Protobuf, say), plus optional ``"headers"`` (strings)
and ``"idempotency_key"``. Events whose type has a schema in the registry are validated
before anything is stored (422 ``schema_violation`` with the errors otherwise).

A fetch answers ``{"deliveries": [{"token": ..., "deliveries": 1, "record": {...}}]}``; the
token settles the delivery on any node. What is not acknowledged within the group's
``ack_wait_s`` is handed out again, with ``deliveries`` counting up.
"""

from __future__ import annotations

import base64
import binascii
import datetime
from typing import Any

import orjson

from airlane.eventlog import JSON, EventLog, NewEvent
from airlane.eventlog.base import MAX_BATCH_EVENTS
from airlane.security import Action, Principal
from airlane.transports.http.asgi import (
    HttpError,
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
        if value.isdigit():
            return int(value)
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
    raise HttpError(400, f"'{name}' must be Unix nanoseconds or an RFC 3339 time", param=name)


def _new_event(body: Any) -> NewEvent:
    if not isinstance(body, dict):
        raise HttpError(400, "an event must be a JSON object")
    event_type = body.get("type")
    if not isinstance(event_type, str):
        raise HttpError(400, "an event needs a 'type' string, e.g. 'reward.v1'", param="type")
    if "data_base64" in body:
        content_type = body.get("content_type", "application/octet-stream")
        try:
            data = base64.b64decode(body["data_base64"], validate=True)
        except (binascii.Error, TypeError, ValueError):
            raise HttpError(400, "'data_base64' is not base64", param="data_base64") from None
    elif "data" in body:
        content_type = body.get("content_type", JSON)
        data = orjson.dumps(body["data"])
    else:
        raise HttpError(400, "an event needs 'data' (JSON) or 'data_base64'", param="data")
    headers = body.get("headers") or {}
    if not isinstance(content_type, str):
        raise HttpError(400, "'content_type' must be a string", param="content_type")
    if not isinstance(headers, dict) or not all(isinstance(v, str) for v in headers.values()):
        raise HttpError(400, "'headers' must map names to strings", param="headers")
    key = body.get("idempotency_key")
    if key is not None and not isinstance(key, str):
        raise HttpError(400, "'idempotency_key' must be a string", param="idempotency_key")
    return NewEvent(event_type, data, content_type, headers, key)


def _optional_number(body: dict[str, Any], name: str) -> Any:
    value = body.get(name)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
        raise HttpError(400, f"'{name}' must be a number", param=name)
    return value


async def handle_logs(
    app: AppContext, principal: Principal, request: Request, receive: Receive, send: Send
) -> None:
    """Route a request under ``/v1/logs``."""
    logs = app.gateway.events.logs
    parts = (
        request.path[len("/v1/logs") :].strip("/").split("/") if request.path != "/v1/logs" else []
    )
    method = request.method
    if not parts or parts == [""]:
        allow_methods(method, "GET")
        await send_json(send, 200, {"logs": await logs.logs()})
        return
    log = parts[0]
    security = app.gateway.security
    resource = f"logs/{log}"
    if len(parts) == 1:
        if method == "PUT":
            security.authorize(principal, Action.PUBLISH, resource)
            body = await read_json(receive, app.config.max_body_bytes) if _has_body(request) else {}
            if not isinstance(body, dict):
                raise HttpError(400, "send a JSON object of limits")
            existed = log in await logs.logs()
            info = await logs.create_log(
                log,
                max_age_s=_optional_number(body, "max_age_s"),
                max_bytes=_optional_number(body, "max_bytes"),
                max_events=_optional_number(body, "max_events"),
            )
            await send_json(send, 200 if existed else 201, info.to_dict())
        elif method == "GET":
            security.authorize(principal, Action.SUBSCRIBE, resource)
            await send_json(send, 200, (await logs.info(log)).to_dict())
        elif method == "DELETE":
            security.authorize(principal, Action.PUBLISH, resource)
            await logs.delete_log(log)
            await app.log_groups.forget(log)
            await send_body(send, 204, b"", b"text/plain")
        else:
            allow_methods(method, "GET, PUT, DELETE")
        return
    if parts[1:] == ["events"]:
        if method == "POST":
            security.authorize(principal, Action.PUBLISH, resource)
            await _append(app, logs, log, receive, send)
        elif method == "GET":
            security.authorize(principal, Action.SUBSCRIBE, resource)
            await _replay(logs, log, request, send)
        else:
            allow_methods(method, "GET, POST")
        return
    if len(parts) in (3, 4) and parts[1] == "groups":
        security.authorize(principal, Action.SUBSCRIBE, resource)
        await _group(app, logs, log, parts[2], parts[3] if len(parts) == 4 else "", request,
                     receive, send)  # fmt: skip
        return
    raise HttpError(404, f"no log resource {request.path[:200]}", code="not_found")


async def _append(app: AppContext, logs: EventLog, log: str, receive: Receive, send: Send) -> None:
    body = await read_json(receive, app.config.max_body_bytes)
    if isinstance(body, dict) and "events" in body:
        items = body["events"]
        if not isinstance(items, list) or not items or len(items) > MAX_BATCH_EVENTS:
            raise HttpError(
                400, f"'events' must be a list of 1 to {MAX_BATCH_EVENTS} events", param="events"
            )
        records = await logs.append_many(log, [_new_event(item) for item in items])
    else:
        event = _new_event(body)
        records = [
            await logs.append(
                log,
                event.type,
                event.data,
                content_type=event.content_type,
                headers=dict(event.headers),
                idempotency_key=event.idempotency_key,
            )
        ]
    await send_json(send, 201, {"records": [record.to_dict() for record in records]})


async def _replay(logs: EventLog, log: str, request: Request, send: Send) -> None:
    limit = request.query_int("limit", 100, 1, 10_000)
    from_time = request.query.get("from_time")
    if from_time is not None and "from_seq" in request.query:
        raise HttpError(400, "give from_seq or from_time, not both")
    if from_time is not None:
        records = await logs.read(
            log, from_time_ns=parse_time_ns(from_time, "from_time"), limit=limit
        )
    else:
        from_seq = request.query_int("from_seq", 0, 0, 2**63 - 1) or None
        records = await logs.read(log, from_seq=from_seq, limit=limit)
    next_seq = records[-1].seq + 1 if records else None
    await send_json(
        send, 200, {"records": [record.to_dict() for record in records], "next_seq": next_seq}
    )


async def _group(
    app: AppContext,
    logs: EventLog,
    log: str,
    group: str,
    action: str,
    request: Request,
    receive: Receive,
    send: Send,
) -> None:
    method = request.method
    if action == "":
        if method == "GET":
            handle = await app.log_groups.get(logs, log, group, {})
            await send_json(send, 200, (await handle.info()).to_dict())
        elif method == "DELETE":
            await app.log_groups.forget(log, group)
            await logs.delete_group(log, group)
            await send_body(send, 204, b"", b"text/plain")
        else:
            allow_methods(method, "GET, DELETE")
        return
    if action not in _GROUP_ACTIONS:
        raise HttpError(404, f"no group action {action[:40]!r}", code="not_found")
    allow_methods(method, "POST")
    body = await read_json(receive, app.config.max_body_bytes) if _has_body(request) else {}
    if not isinstance(body, dict):
        raise HttpError(400, "send a JSON object")
    if action == "fetch":
        settings: dict[str, Any] = {}
        for name in ("ack_wait_s", "max_deliver", "start_seq"):
            if body.get(name) is not None:
                settings[name] = _optional_number(body, name)
        if body.get("start_time") is not None:
            settings["start_time_ns"] = parse_time_ns(body["start_time"], "start_time")
        handle = await app.log_groups.get(logs, log, group, settings)
        deliveries = await handle.fetch(
            int(_optional_number(body, "max_events") or 64),
            float(_optional_number(body, "timeout_s") or 1.0),
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
        raise HttpError(400, "'tokens' must be a list of delivery tokens", param="tokens")
    if len(tokens) > 1000:
        raise HttpError(400, "at most 1000 tokens per request", param="tokens")
    delay = _optional_number(body, "delay_s") if action == "nak" else None
    for token in tokens:
        await logs.settle(token, action, delay)
    await send_json(send, 200, {"settled": len(tokens)})


def _has_body(request: Request) -> bool:
    length = request.header(b"content-length")
    return (length is not None and length != "0") or request.header(
        b"transfer-encoding"
    ) is not None
