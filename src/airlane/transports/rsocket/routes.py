"""What each route of the RSocket transport asks of the gateway.

A request names its route in routing metadata (``message/x.rsocket.routing.v0``, alone or in
composite metadata); the route says which interaction model it takes:

================================  ==================  =============================================
route                             model               request data -> answer
================================  ==================  =============================================
``chat.completions``              request-stream      an OpenAI chat request -> a ``started``
                                                      payload, then the stream's events
``streams.subscribe``             request-stream      ``{"stream_id", "resume"?}`` -> its events
``loadtest.stream``               request-stream      ``{"chunks", "mode", "interval_ms"}`` -> the
                                                      benchmark stream's chunks, raw
``streams.snapshot``              request-response    ``{"stream_id"}`` -> a snapshot event
``streams.info``                  request-response    ``{"stream_id"}`` -> the stream's status
``streams.cancel``                request-response    ``{"stream_id"}`` -> ``{"cancelled": bool}``
``streams.publish``               response or F&F     ``{"stream_id", "event"}`` -> ``{"seq"}``
``logs.append``                   response or F&F     ``{"log", "event"}`` or ``{"log", "events"}``
                                                      -> ``{"records": [...]}``
``rooms.state``                   request-response    ``{"room"}`` -> the room's state
``schemas.version``               request-response    ``{"subject", "version"?}`` -> the version
``agent.session``                 request-channel     commands -> events and answers
                                                      (`airlane.transports.rsocket.channel`)
================================  ==================  =============================================

Every handler here takes the caller's principal and the decoded request, and raises the
gateway's `AirlaneError` subclasses for the session to turn into ERROR frames.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Literal

from airlane.core import Event, Position
from airlane.core.errors import BadRequest, ErrorCode
from airlane.core.numbers import decimal
from airlane.gateway import Gateway, Principal, parse_new_event, version_to_dict
from airlane.wire.errors import DecodeError
from airlane.wire.event_json import event_from_dict, event_to_dict

__all__ = [
    "CHANNEL_ROUTES",
    "FIRE_AND_FORGET_ROUTES",
    "RESPONSE_ROUTES",
    "STREAM_ROUTES",
    "field",
    "resume_position",
]

Handler = Callable[[Gateway, Principal, dict[str, Any]], Awaitable[Any]]


def field(body: dict[str, Any], name: str) -> str:
    """A required string field of a request."""
    value = body.get(name)
    if not isinstance(value, str) or not value:
        raise BadRequest(f"the request needs a '{name}' string", param=name)
    return value


def resume_position(body: dict[str, Any]) -> Position | None:
    """The ``resume`` token (``epoch:seq``) a subscription continues after, if any."""
    token = body.get("resume")
    if token is None:
        return None
    if not isinstance(token, str):
        raise BadRequest("'resume' must be a resume token, 'epoch:seq'", param="resume")
    return Position.parse(token)


def published_event(body: dict[str, Any]) -> Event:
    """The event a publish request carries in ``event``."""
    try:
        return event_from_dict(body.get("event"))
    except DecodeError as exc:
        raise BadRequest(str(exc), code=ErrorCode.INVALID_EVENT, param="event") from None


async def _snapshot(gateway: Gateway, principal: Principal, body: dict[str, Any]) -> Any:
    stream_id = field(body, "stream_id")
    snapshot = await gateway.snapshot(principal, stream_id)
    info = await gateway.info(principal, stream_id)
    return {**event_to_dict(snapshot), "resume": Position(info.epoch, snapshot.seq).token}


async def _info(gateway: Gateway, principal: Principal, body: dict[str, Any]) -> Any:
    return (await gateway.info(principal, field(body, "stream_id"))).to_dict()


async def _cancel(gateway: Gateway, principal: Principal, body: dict[str, Any]) -> Any:
    return {"cancelled": await gateway.cancel(principal, field(body, "stream_id"))}


async def _publish(gateway: Gateway, principal: Principal, body: dict[str, Any]) -> Any:
    stream_id = field(body, "stream_id")
    event = await gateway.publish(principal, stream_id, published_event(body))
    return {"stream_id": stream_id, "seq": event.seq}


async def _append(gateway: Gateway, principal: Principal, body: dict[str, Any]) -> Any:
    log = field(body, "log")
    if "events" in body:
        items = body["events"]
        if not isinstance(items, list):
            raise BadRequest("'events' must be a list of events", param="events")
    elif "event" in body:
        items = [body["event"]]
    else:
        raise BadRequest("the request needs an 'event' or 'events'", param="event")
    records = await gateway.logs.append(principal, log, [parse_new_event(e) for e in items])
    return {"records": [record.to_dict() for record in records]}


async def _room(gateway: Gateway, principal: Principal, body: dict[str, Any]) -> Any:
    return await gateway.rooms.state(principal, field(body, "room"))


async def _schema(gateway: Gateway, principal: Principal, body: dict[str, Any]) -> Any:
    subject = field(body, "subject")
    raw = body.get("version", "latest")
    version: int | Literal["latest"]
    if raw == "latest":
        version = "latest"
    elif isinstance(raw, int) and not isinstance(raw, bool) and raw > 0:
        version = raw
    elif isinstance(raw, str) and (number := decimal(raw)) is not None and number > 0:
        version = number
    else:
        raise BadRequest("'version' is a number above 0 or 'latest'", param="version")
    return version_to_dict(await gateway.schemas.version(principal, subject, version))


RESPONSE_ROUTES: dict[str, Handler] = {
    "streams.snapshot": _snapshot,
    "streams.info": _info,
    "streams.cancel": _cancel,
    "streams.publish": _publish,
    "logs.append": _append,
    "rooms.state": _room,
    "schemas.version": _schema,
}
"""Request-response routes."""

FIRE_AND_FORGET_ROUTES: dict[str, Handler] = {
    "streams.publish": _publish,
    "logs.append": _append,
}
"""Fire-and-forget routes (the answer is dropped; a refusal is logged, as RSocket has no
way to report it)."""

STREAM_ROUTES = ("chat.completions", "streams.subscribe", "loadtest.stream")
"""Request-stream routes (served by the session: they need its credit)."""

CHANNEL_ROUTES = ("agent.session",)
"""Request-channel routes."""
