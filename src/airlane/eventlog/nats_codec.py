"""How event logs map onto JetStream names, headers and times (pure: no I/O).

Names. Log and group names may hold dots, which NATS reads as subject token separators (and
which stream and consumer names may not contain at all), so ``.`` is written as ``=``, a
character names cannot hold: the mapping is one-to-one and stays readable
(``rl.rewards`` -> subject ``airlane.log.rl=rewards``, stream ``AIRLANE_LOGS_rl=rewards``).

Headers. NATS headers are MIME-style lines that parsers fold and trim, so only values that
survive that travel as they are: the event type (printable ASCII, no spaces) in
``Airlane-Type``, the content type in ``Airlane-Content-Type``, the idempotency key in
``Nats-Msg-Id`` (JetStream's deduplication header). The caller's free-form headers travel
together as one ASCII-only JSON object in ``Airlane-Headers``, so any name and any value
(spaces, colons, newlines, non-ASCII) round-trip exactly.

Times. JetStream stamps each message with its wall clock in nanoseconds; consumers see it in
the ack reply subject and direct gets in RFC 3339 with nanoseconds (``Nats-Time-Stamp``).
Start times are sent the same way, so replay from a time keeps nanosecond precision.
"""

from __future__ import annotations

import calendar
import json
import secrets
import time
from collections.abc import Mapping

from airlane.core.scope import scoped, split_scope
from airlane.eventlog.base import NewEvent, Record

__all__ = [
    "HEADER_CONTENT_TYPE",
    "HEADER_HEADERS",
    "HEADER_MSG_ID",
    "HEADER_TYPE",
    "decode_record",
    "format_time_ns",
    "message_headers",
    "name_from_token",
    "name_token",
    "parse_ack_reply",
    "parse_time_ns",
]

HEADER_TYPE = "Airlane-Type"
HEADER_CONTENT_TYPE = "Airlane-Content-Type"
HEADER_HEADERS = "Airlane-Headers"
HEADER_MSG_ID = "Nats-Msg-Id"

# A message published by something other than this library may lack our headers.
_UNKNOWN_TYPE = "unknown"
_OCTET_STREAM = "application/octet-stream"


def name_token(name: str) -> str:
    """The subject token (and stream or consumer name part) for a log or group name: dots
    written as ``=``; a tenant's scope (``@tenant/name``) as ``~tenant~name``, since NATS
    names may hold neither ``@`` nor ``/``, and plain names never hold ``~``."""
    tenant, plain = split_scope(name)
    token = plain.replace(".", "=")
    return token if tenant is None else f"~{tenant.replace('.', '=')}~{token}"


def name_from_token(token: str) -> str:
    """The inverse of `name_token`."""
    if token.startswith("~"):
        _, tenant, plain = token.split("~", 2)
        return scoped(tenant.replace("=", "."), plain.replace("=", "."))
    return token.replace("=", ".")


def message_headers(event: NewEvent) -> dict[str, str]:
    """The NATS headers that carry ``event``'s metadata.

    Every append carries a ``Nats-Msg-Id``: the caller's idempotency key (``k:`` prefix), or a
    random one (``r:``) so that this library's own retries, after a lost reply, are
    deduplicated by JetStream instead of stored twice.
    """
    key = event.idempotency_key
    headers = {
        HEADER_TYPE: event.type,
        HEADER_CONTENT_TYPE: event.content_type,
        HEADER_MSG_ID: f"k:{key}" if key is not None else f"r:{secrets.token_hex(12)}",
    }
    if event.headers:
        headers[HEADER_HEADERS] = json.dumps(
            dict(event.headers), ensure_ascii=True, separators=(",", ":")
        )
    return headers


def decode_record(
    log: str, seq: int, time_ns: int, headers: Mapping[str, str] | None, data: bytes | None
) -> Record:
    """The record a stored message describes."""
    headers = headers or {}
    user_headers: dict[str, str] = {}
    if encoded := headers.get(HEADER_HEADERS):
        parsed = json.loads(encoded)
        if isinstance(parsed, dict):
            user_headers = {str(k): str(v) for k, v in parsed.items()}
    return Record(
        log=log,
        seq=seq,
        time_ns=time_ns,
        type=headers.get(HEADER_TYPE, _UNKNOWN_TYPE),
        data=data or b"",
        content_type=headers.get(HEADER_CONTENT_TYPE, _OCTET_STREAM),
        headers=user_headers,
    )


def format_time_ns(time_ns: int) -> str:
    """RFC 3339 in UTC with nanoseconds, as the server parses it (Go's RFC3339Nano)."""
    seconds, nanos = divmod(time_ns, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{nanos:09d}Z"


def parse_time_ns(text: str) -> int:
    """Unix nanoseconds from the server's RFC 3339 UTC timestamp (``...T04:50:33.4547988Z``;
    Go trims trailing zeros from the fraction, and drops it when it is zero)."""
    whole, _, fraction = text.removesuffix("Z").partition(".")
    seconds = calendar.timegm(time.strptime(whole, "%Y-%m-%dT%H:%M:%S"))
    return seconds * 1_000_000_000 + int(fraction.ljust(9, "0")[:9])


def parse_ack_reply(reply: str) -> tuple[int, int, int]:
    """``(stream_seq, deliveries, time_ns)`` from a JetStream ack reply subject.

    Two layouts exist (ADR-15): ``$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.
    <ts>.<pending>`` and, with a domain and account hash, ``$JS.ACK.<domain>.<hash>.<stream>.
    <consumer>.<delivered>.<sseq>.<cseq>.<ts>.<pending>[.<token>]``.
    """
    tokens = reply.split(".")
    if tokens[:2] != ["$JS", "ACK"] or len(tokens) not in (9, 11, 12):
        raise ValueError(f"not a JetStream ack subject: {reply!r}")
    base = 2 if len(tokens) == 9 else 4
    deliveries, stream_seq, time_ns = tokens[base + 2], tokens[base + 3], tokens[base + 5]
    return int(stream_seq), int(deliveries), int(time_ns)
