"""Argument checks shared by every event log implementation (pure: no I/O, no clock).

The checks run before anything reaches a backend, so the in-memory and the JetStream logs
refuse exactly the same inputs with exactly the same errors.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from airlane.core.scope import split_scope
from airlane.eventlog.errors import EventTooLarge, InvalidLogName, InvalidRequest

__all__ = [
    "MAX_HEADERS",
    "MAX_NAME_CHARS",
    "check_event_fields",
    "check_limit",
    "check_name",
    "check_size",
    "event_size",
]

MAX_NAME_CHARS = 200
"""Longest log name, group name, event type, content type or idempotency key."""

MAX_HEADERS = 64
"""Most user headers on one event (their bytes also count towards the event size bound)."""

_NAME = re.compile(r"[A-Za-z0-9._-]{1,200}")
# Event types and idempotency keys travel as NATS header values: printable ASCII without
# whitespace keeps them intact through any header parser (no folding, no trimming).
_TOKEN = re.compile(r"[!-~]{1,200}")
# A media type may hold inner spaces ("text/plain; charset=utf-8") but not outer ones, which a
# header parser would trim.
_MEDIA_TYPE = re.compile(r"[!-~](?:[ -~]{0,198}[!-~])?")


def check_name(name: object, what: str = "log", *, scoped: bool = True) -> str:
    """``name`` if it is a valid log (or group) name, else raise `InvalidLogName`. A log's
    name may be in a tenant's scope (``@tenant/name``, `airlane.core.scope`, tenant and name
    together at most 200 characters) unless ``scoped`` is false: what a client sends."""
    if not isinstance(name, str):
        raise InvalidLogName(f"invalid {what} name {name!r}: expected [A-Za-z0-9._-]{{1,200}}")
    tenant, plain = split_scope(name) if scoped and what == "log" else (None, name)
    if _NAME.fullmatch(plain) is None:
        raise InvalidLogName(f"invalid {what} name {plain!r}: expected [A-Za-z0-9._-]{{1,200}}")
    if tenant is not None and len(tenant) + len(plain) > MAX_NAME_CHARS:
        raise InvalidLogName(
            f"{what} name {plain!r} too long: with its tenant's name at most {MAX_NAME_CHARS}"
        )
    return name


def check_event_fields(
    type: str,
    data: bytes,
    content_type: str,
    headers: Mapping[str, str],
    idempotency_key: str | None,
) -> None:
    """Raise `InvalidRequest` unless every field of a new event is well formed."""
    if not isinstance(type, str) or _TOKEN.fullmatch(type) is None:
        raise InvalidRequest(f"invalid event type {type!r}: 1-200 printable ASCII, no spaces")
    if not isinstance(data, bytes):
        raise InvalidRequest(f"event data must be bytes, not {data.__class__.__name__}")
    if not isinstance(content_type, str) or _MEDIA_TYPE.fullmatch(content_type) is None:
        raise InvalidRequest(f"invalid content type {content_type!r}")
    if len(headers) > MAX_HEADERS:
        raise InvalidRequest(f"{len(headers)} headers: at most {MAX_HEADERS}")
    for key, value in headers.items():
        if not isinstance(key, str) or not isinstance(value, str) or not key:
            raise InvalidRequest(f"header {key!r}: names and values are strings, names non-empty")
    if idempotency_key is not None and (
        not isinstance(idempotency_key, str) or _TOKEN.fullmatch(idempotency_key) is None
    ):
        raise InvalidRequest(f"invalid idempotency key {idempotency_key!r}")


def event_size(type: str, data: bytes, content_type: str, headers: Mapping[str, str]) -> int:
    """The bytes an event counts against the size bound: data, type, content type, headers."""
    size = len(data) + len(type) + len(content_type)
    for key, value in headers.items():
        size += len(key.encode()) + len(value.encode())
    return size


def check_size(size: int, max_event_bytes: int) -> None:
    """Raise `EventTooLarge` if ``size`` is over ``max_event_bytes``."""
    if size > max_event_bytes:
        raise EventTooLarge(f"event of {size} bytes: at most {max_event_bytes}")


def check_limit(value: float | None, what: str) -> None:
    """Raise `InvalidRequest` unless ``value`` is None or a positive number (not a bool)."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise InvalidRequest(f"{what} must be a positive number or None, not {value!r}")
