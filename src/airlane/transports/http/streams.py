"""The streams API: create, inspect, read (SSE with resume), publish to and cancel streams.

=======  ===============================  ================================================
method   path                             what
=======  ===============================  ================================================
GET      /v1/streams                      the streams this node holds that the caller may
                                          read, newest first (``?prefix=``, ``?limit=``
                                          1-1000, default 100)
POST     /v1/streams                      create a generation (chat request body), a
                                          named stream (``{"name": "agents/42/events"}``)
                                          or a load-test generation (``{"loadtest": {}}``)
GET      /v1/streams/{id}                 status, usage and the current resume token
GET      /v1/streams/{id}/snapshot        everything so far as one snapshot event
GET      /v1/streams/{id}/events          SSE; resumes from ``Last-Event-ID`` or ``?from=``;
                                          ``?max_events=N`` ends each response after N
                                          events (the client resumes: connection recycling)
POST     /v1/streams/{id}/events          publish one event, or ``{"events": [...]}``
POST     /v1/streams/{id}/cancel          stop the producer; the stream ends ``cancelled``
DELETE   /v1/streams/{id}                 forget the stream
=======  ===============================  ================================================

Every SSE event's ``id:`` is the resume token ``<epoch>:<seq>`` and its ``data:`` the event's
native JSON (`airlane.wire.event_json`), so a plain browser ``EventSource`` resumes by itself.
"""

from __future__ import annotations

from functools import partial
from typing import Any
from urllib.parse import unquote

from airlane.core import Event, Position, StreamInfo, valid_stream_id
from airlane.core.errors import BadRequest, ErrorCode, NotFound
from airlane.gateway import Gateway, Principal
from airlane.transports.http.asgi import (
    HAND_OVER_EXTENSION,
    HttpError,
    Receive,
    Request,
    Send,
    read_json,
    send_body,
    send_json,
)
from airlane.transports.http.context import AppContext
from airlane.wire.errors import DecodeError
from airlane.wire.event_json import event_from_dict, event_to_dict, event_to_json
from airlane.wire.sse import encode_event, encode_numbered_event, encode_retry, event_id_prefix

__all__ = ["handle_streams", "render_native_sse"]

MAX_PUBLISH_BATCH = 1000
"""Events one publish request may carry."""


def render_native_sse(epoch: str, batch: list[Event]) -> bytes:
    """SSE frames of native JSON events, cached on each event."""
    out = []
    id_prefix = event_id_prefix(f"{epoch}:")
    for event in batch:
        frame = event.cached("sse")
        if frame is None:
            raw = event.raw
            if raw is None or (b"\n" not in raw and b"\r" not in raw):  # one line
                frame = encode_numbered_event(id_prefix, event.seq, event_to_json(event))
            else:  # a published payload's bytes, spliced in as they came, line breaks too
                frame = encode_event(event_to_json(event), id=f"{epoch}:{event.seq}")
            event.cache("sse", frame)
        out.append(frame)
    return b"".join(out)


def resume_position(request: Request) -> Position | None:
    """The position to resume after: ``Last-Event-ID`` (sent by a reconnecting
    ``EventSource``) wins over ``?from=`` (which stays in the URL across reconnects)."""
    token = request.header(b"last-event-id") or request.query.get("from")
    return Position.parse(token) if token else None  # BadResumeToken if malformed


async def handle_streams(
    app: AppContext, principal: Principal, request: Request, receive: Receive, send: Send
) -> None:
    """Route a request under ``/v1/streams``."""
    rest = request.path[len("/v1/streams") :]
    if rest in ("", "/"):
        if request.method == "GET":
            await _list(app, principal, request, send)
            return
        if request.method != "POST":
            raise HttpError(
                "use POST /v1/streams to create a stream, GET to list them",
                code=ErrorCode.METHOD_NOT_ALLOWED,
                headers=_ALLOW_LIST,
            )
        if await request.placed_elsewhere():
            return
        await _create(app, principal, receive, send)
        return
    stream_id, action = stream_target(request)
    if action not in _ALLOWED:
        raise NotFound(f"no stream resource {action[:40]!r}")
    if not valid_stream_id(stream_id):
        raise BadRequest(
            f"invalid stream id {stream_id[:80]!r}: use 1-200 of A-Z a-z 0-9 . _ : / -",
            code=ErrorCode.INVALID_STREAM_ID,
        )
    if await _handed_over(app, principal, request, stream_id):
        return
    method = request.method
    if action == "events" and method == "GET":
        await _events(app, principal, request, stream_id, receive, send)
    elif action == "events" and method == "POST":
        await _publish(app, principal, stream_id, receive, send)
    elif action == "snapshot" and method == "GET":
        snapshot = await app.gateway.snapshot(principal, stream_id)
        info = await app.gateway.info(principal, stream_id)
        body = {**event_to_dict(snapshot), "resume_token": Position(info.epoch, snapshot.seq).token}
        await send_json(send, 200, body)
    elif action == "cancel" and method == "POST":
        cancelled = await app.gateway.cancel(principal, stream_id)
        await send_json(send, 200, {"id": stream_id, "cancelled": cancelled})
    elif action == "" and method == "GET":
        await send_json(send, 200, (await app.gateway.info(principal, stream_id)).to_dict())
    elif action == "" and method == "DELETE":
        await app.gateway.delete(principal, stream_id)
        await send_body(send, 204, b"", b"text/plain")
    else:
        allowed = _ALLOWED[action]
        raise HttpError(
            f"{method} is not supported here; use {allowed}",
            code=ErrorCode.METHOD_NOT_ALLOWED,
            headers=[(b"allow", allowed.encode())],
        )


_ACTIONS = ("events", "snapshot", "cancel")
_ALLOWED = {"": "GET, DELETE", "events": "GET, POST", "snapshot": "GET", "cancel": "POST"}
_ALLOW_LIST = [(b"allow", b"GET, POST")]
MAX_LIST = 1000
"""Streams one list answers at most."""


async def _list(app: AppContext, principal: Principal, request: Request, send: Send) -> None:
    raw = request.query.get("limit", "100")
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_LIST:
        raise BadRequest(f"limit must be 1 to {MAX_LIST}", param="limit")
    prefix = request.query.get("prefix", "")
    listed = await app.gateway.list_streams(principal, prefix=prefix, limit=int(raw))
    await send_json(send, 200, {"streams": [info.to_dict() for info in listed]})


def stream_target(request: Request) -> tuple[str, str]:
    """The stream id and action of a ``/v1/streams/...`` path.

    Ids may contain ``/``, so ``/v1/streams/agents/42/events`` reads as the events of
    ``agents/42``. An id that itself ends in an action word is written with its slashes
    percent-encoded (``/v1/streams/agents%2F42%2Fevents``): an encoded path is split on its
    literal slashes, which the raw path preserves.
    """
    raw = request.scope.get("raw_path") or request.path.encode()
    rest = raw.split(b"?", 1)[0][len(b"/v1/streams/") :]
    if b"%2f" in rest.lower():
        segment, _, action = rest.partition(b"/")
        return unquote(segment.decode("latin-1")), unquote(action.decode("latin-1"))
    path = request.path[len("/v1/streams/") :]
    for action in _ACTIONS:
        suffix = "/" + action
        if path.endswith(suffix) and len(path) > len(suffix):
            return path[: -len(suffix)], action
    return path, ""


async def _create(app: AppContext, principal: Principal, receive: Receive, send: Send) -> None:
    body = await read_json(receive, app.config.max_body_bytes)
    if isinstance(body, dict) and "name" in body:
        name = body["name"]
        if not isinstance(name, str):
            raise BadRequest("'name' must be a string", param="name")
        info = await app.gateway.create_named(principal, name, exist_ok=bool(body.get("exist_ok")))
    elif isinstance(body, dict) and "loadtest" in body:
        info = await _create_loadtest(app.gateway, principal, body)
    else:
        info = (await app.gateway.start_chat(principal, body)).info
    payload = {
        **info.to_dict(),
        "events_url": f"/v1/streams/{info.stream_id}/events",
    }
    await send_json(send, 201, payload, [(b"x-airlane-stream-id", info.stream_id.encode())])


async def _create_loadtest(
    gateway: Gateway, principal: Principal, body: dict[str, Any]
) -> StreamInfo:
    """A load-test generation that clients subscribe to (``airlane bench``'s cluster run):
    ``{"loadtest": {"chunks": 200, "mode": "paced", "interval_ms": 20, "varied": false},
    "orphan": "grace"}``."""
    spec = body["loadtest"]
    if not isinstance(spec, dict):
        raise BadRequest("'loadtest' must be an object", param="loadtest")
    loadtest = gateway.loadtest_spec(
        spec.get("chunks", 200),
        spec.get("mode", "burst"),
        spec.get("interval_ms", 20.0),
        spec.get("varied", False),
    )
    orphan = body.get("orphan")
    if orphan is not None and not isinstance(orphan, str):
        raise BadRequest("'orphan' must be a string", param="orphan")
    return await gateway.start_loadtest(principal, loadtest, orphan=orphan)


async def _handed_over(
    app: AppContext, principal: Principal, request: Request, stream_id: str
) -> bool:
    """Whether the request went, with its connection, to the sibling process producing the
    stream (``--workers``): a reader is served where each event is encoded once for all its
    readers, an append stored without a broker round trip between the two, and an info,
    snapshot, cancel or delete where the stream is held, rather than loaded here. (The
    server offers it only for a request with no body or a small one.)"""
    pass_to = request.extension(HAND_OVER_EXTENSION)
    if pass_to is None:
        return False
    owner = await app.gateway.owner(principal, stream_id)
    return owner is not None and bool(await pass_to(owner))


async def _events(
    app: AppContext,
    principal: Principal,
    request: Request,
    stream_id: str,
    receive: Receive,
    send: Send,
) -> None:
    resume = resume_position(request)
    # Parsed before the response starts: after that an error could no longer be reported.
    max_events = request.query_int("max_events", 0, 0, 1 << 30) or None
    subscription = await app.gateway.subscribe(
        principal, stream_id, resume=resume, subscriber=request.query.get("subscriber")
    )
    async with subscription:
        if resume is not None and subscription.exhausted:
            # Resumed after the end: 204 tells an EventSource to stop reconnecting (WHATWG
            # HTML 9.2.3: a response other than 200 text/event-stream fails the connection).
            await send_body(send, 204, b"", b"text/plain")
            return
        epoch = subscription.position.epoch
        pump = app.sse_pump(request, receive, send)
        headers = [(b"x-airlane-stream-id", stream_id.encode())]
        app.metrics.connections["sse"] += 1
        try:
            await pump.start(headers, encode_retry(app.config.sse_retry_ms))
            await pump.pump(
                subscription,
                partial(render_native_sse, epoch),
                max_events=max_events,
            )
            await pump.finish()
        finally:
            app.metrics.connections["sse"] -= 1


async def _publish(
    app: AppContext, principal: Principal, stream_id: str, receive: Receive, send: Send
) -> None:
    body = await read_json(receive, app.config.max_body_bytes)
    items: Any = body.get("events") if isinstance(body, dict) and "events" in body else [body]
    if not isinstance(items, list) or not 0 < len(items) <= MAX_PUBLISH_BATCH:
        raise BadRequest(f"'events' must be an array of 1 to {MAX_PUBLISH_BATCH} events")
    try:
        events = [event_from_dict(item) for item in items]
    except DecodeError as exc:
        raise BadRequest(str(exc), code=ErrorCode.INVALID_EVENT) from None
    seqs = [(await app.gateway.publish(principal, stream_id, event)).seq for event in events]
    info = await app.gateway.info(principal, stream_id)
    token = Position(info.epoch, seqs[-1]).token
    await send_json(send, 200, {"id": stream_id, "seq": seqs, "resume_token": token})
