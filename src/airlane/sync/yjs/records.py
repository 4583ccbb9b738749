"""How a room keeps its document and presence in the hub, sans I/O.

A room ``R`` has two hub streams of ``message`` events whose payloads are JSON objects (binary
Yjs data base64-encoded):

``yjs/R`` (`doc_stream_id`), the document::

    {"yjs": 1, "type": "update", "origin": O, "data": B64}             a change, as applied
    {"yjs": 1, "type": "state",  "origin": O, "data": B64, "covers": N} the whole document

``yjs-awareness/R`` (`awareness_stream_id`), presence::

    {"yjs": 1, "type": "awareness", "origin": O, "data": B64}   an awareness update
    {"yjs": 1, "type": "query",     "origin": O}                "send me your peers' states"

``origin`` names the room instance (one per node per opening) that appended the record, so a
room skips its own records when they come back to it. A ``state`` record holds everything its
writer had applied from the stream up to and including seq ``covers`` (and maybe more): the
document is that state plus every ``update`` after ``covers``. That is what lets any node, at
any time, compact without coordination (`airlane.sync.yjs.room` explains the rule).
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any

import orjson

from airlane.core import Event, Kind
from airlane.core.scope import scoped, split_scope
from airlane.sync.yjs.errors import YjsError

__all__ = [
    "AWARENESS_STREAM_PREFIX",
    "DOC_STREAM_PREFIX",
    "RECORD_VERSION",
    "AwarenessQuery",
    "AwarenessRecord",
    "CorruptRecord",
    "Record",
    "StateRecord",
    "UpdateRecord",
    "awareness_stream_id",
    "decode_record",
    "doc_stream_id",
    "record_event",
]

RECORD_VERSION = 1
"""The ``yjs`` field of every record; a reader refuses other versions."""
DOC_STREAM_PREFIX = "yjs/"
"""Hub stream of room ``R``'s document: ``yjs/R``."""
AWARENESS_STREAM_PREFIX = "yjs-awareness/"
"""Hub stream of room ``R``'s presence: ``yjs-awareness/R`` (another prefix, not a suffix, so
no room name can collide with another room's presence stream)."""


def doc_stream_id(room: str) -> str:
    """The hub stream holding ``room``'s document (in the room's tenant scope, if it has one:
    `airlane.core.scope`)."""
    tenant, name = split_scope(room)
    return scoped(tenant, DOC_STREAM_PREFIX + name)


def awareness_stream_id(room: str) -> str:
    """The hub stream carrying ``room``'s awareness updates between nodes."""
    tenant, name = split_scope(room)
    return scoped(tenant, AWARENESS_STREAM_PREFIX + name)


class CorruptRecord(YjsError, ValueError):
    """A hub event in a room stream that is not a room record (another writer, a newer
    version, damage). The room logs and skips it."""


@dataclass(frozen=True, slots=True)
class UpdateRecord:
    """A document change, as the writer's document applied it."""

    origin: str
    update: bytes


@dataclass(frozen=True, slots=True)
class StateRecord:
    """The writer's whole document, covering the stream up to seq ``covers``."""

    origin: str
    state: bytes
    covers: int


@dataclass(frozen=True, slots=True)
class AwarenessRecord:
    """An awareness update made by peers of the writer's node."""

    origin: str
    update: bytes


@dataclass(frozen=True, slots=True)
class AwarenessQuery:
    """A room just opened on some node: every other node answers with its peers' states."""

    origin: str


Record = UpdateRecord | StateRecord | AwarenessRecord | AwarenessQuery
"""Every record kind."""


def record_event(record: Record) -> Event:
    """The hub event that carries ``record``."""
    payload: dict[str, Any] = {"yjs": RECORD_VERSION, "origin": record.origin}
    if isinstance(record, UpdateRecord):
        payload |= {"type": "update", "data": _b64(record.update)}
    elif isinstance(record, StateRecord):
        payload |= {"type": "state", "data": _b64(record.state), "covers": record.covers}
    elif isinstance(record, AwarenessRecord):
        payload |= {"type": "awareness", "data": _b64(record.update)}
    else:
        payload["type"] = "query"
    return Event.message(payload)


def decode_record(event: Event) -> Record:
    """The record ``event`` carries; raises `CorruptRecord` if it carries none."""
    if event.kind is not Kind.MESSAGE:
        raise CorruptRecord(f"a {event.kind.value} event is not a room record")
    payload = _payload(event)
    if not isinstance(payload, dict) or payload.get("yjs") != RECORD_VERSION:
        raise CorruptRecord(f"event {event.seq} is not a version {RECORD_VERSION} room record")
    origin, kind = payload.get("origin"), payload.get("type")
    if not isinstance(origin, str):
        raise CorruptRecord(f"record {event.seq} has no origin")
    if kind == "update":
        return UpdateRecord(origin, _data(payload, event.seq))
    if kind == "state":
        covers = payload.get("covers")
        if not isinstance(covers, int) or isinstance(covers, bool) or covers < 0:
            raise CorruptRecord(f"state record {event.seq} has no valid 'covers'")
        return StateRecord(origin, _data(payload, event.seq), covers)
    if kind == "awareness":
        return AwarenessRecord(origin, _data(payload, event.seq))
    if kind == "query":
        return AwarenessQuery(origin)
    raise CorruptRecord(f"record {event.seq} has unknown type {str(kind)[:40]!r}")


def _payload(event: Event) -> Any:
    if event.raw is not None:  # published as pre-encoded JSON (streams API, another node)
        try:
            return orjson.loads(event.raw)
        except orjson.JSONDecodeError:
            raise CorruptRecord(f"event {event.seq} is not JSON") from None
    return (event.data or {}).get("payload")


def _data(payload: dict[str, Any], seq: int) -> bytes:
    data = payload.get("data")
    if not isinstance(data, str):
        raise CorruptRecord(f"record {seq} has no 'data'")
    try:
        return base64.b64decode(data, validate=True)
    except binascii.Error:
        raise CorruptRecord(f"record {seq}: 'data' is not base64") from None


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
