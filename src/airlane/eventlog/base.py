"""The event log contract: named, append-only logs of typed events for event sourcing.

A **log** is an ordered sequence of **records**, numbered 1, 2, 3 ... without gaps. Producers
`EventLog.append` typed events (``reward.v1``: an RL reward signal); readers either replay with
`EventLog.read` (from a sequence, or from the first record at or after a wall-clock time) or
join a **consumer group**: a durable cursor shared by its members, each record handed to one
member at a time, redelivered when its ack deadline passes without an ack, up to
``max_deliver`` times. Retention trims the oldest records by count, bytes and age.

Every implementation (`airlane.eventlog.memory.MemoryEventLog`, the embedded default, and
`airlane.eventlog.jetstream.JetStreamEventLog`, past one process) passes one contract suite
(``tests/eventlog/contract.py``). The checks every implementation shares live here, in the
public methods; implementations provide the ``_``-prefixed hooks.

Bounds shared by every implementation (each refusal is an `InvalidRequest` or an
`EventTooLarge`):

- one event: `DEFAULT_MAX_EVENT_BYTES` (data + type + content type + headers), configurable;
- one `EventLog.append_many` call: `MAX_BATCH_EVENTS` events;
- one `EventLog.read`: `MAX_READ_LIMIT` records, and it stops early once `MAX_READ_BYTES` of
  data are gathered (always returning at least one record when one exists);
- one `ConsumerGroup.fetch`: `MAX_FETCH_EVENTS` deliveries, waiting at most `MAX_WAIT_S`.
"""

from __future__ import annotations

import abc
import base64
from collections.abc import Awaitable, Iterable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Protocol

import orjson

from airlane.eventlog.checks import (
    check_event_fields,
    check_limit,
    check_name,
    check_size,
    event_size,
)
from airlane.eventlog.errors import GroupSettingsConflict, InvalidRequest

__all__ = [
    "DEFAULT_ACK_WAIT_S",
    "DEFAULT_MAX_EVENT_BYTES",
    "JSON",
    "MAX_BATCH_EVENTS",
    "MAX_FETCH_EVENTS",
    "MAX_READ_BYTES",
    "MAX_READ_LIMIT",
    "MAX_WAIT_S",
    "SETTLE_ACTIONS",
    "ConsumerGroup",
    "Delivery",
    "EventLog",
    "GroupInfo",
    "GroupSettings",
    "LogInfo",
    "LogLimits",
    "NewEvent",
    "Record",
    "Validator",
    "is_json_content_type",
]

JSON = "application/json"
"""The default content type of an event."""

DEFAULT_MAX_EVENT_BYTES = 1_000_000
"""Largest event by default: under NATS's default 1 MiB ``max_payload``, with room left for
the headers that carry the type, content type and idempotency key."""

MAX_BATCH_EVENTS = 1_000
"""Most events one `EventLog.append_many` call takes (so one call's work stays bounded)."""

MAX_READ_LIMIT = 10_000
"""Largest ``limit`` one `EventLog.read` accepts."""

MAX_READ_BYTES = 16 * 1024 * 1024
"""A read stops adding records once this much data is gathered: bounds one read's memory."""

MAX_FETCH_EVENTS = 1_000
"""Largest ``max_events`` one `ConsumerGroup.fetch` accepts."""

MAX_WAIT_S = 300.0
"""Longest ``timeout_s`` one `ConsumerGroup.fetch` accepts."""
DEFAULT_ACK_WAIT_S = 30.0
"""The ack wait of a group whose creator did not ask for one."""
SETTLE_ACTIONS = ("ack", "nak", "progress")
"""What `EventLog.settle` can do with a delivery."""
MAX_TOKEN_LENGTH = 1024
"""Longest delivery token accepted."""


class Validator(Protocol):
    """``await validate(log, type, content_type, data)``: raise to refuse an event (a schema
    check, say). Whatever it raises propagates out of ``append`` unchanged, and nothing of
    that append is stored. Any ``async def`` with these four positional parameters fits."""

    def __call__(
        self, log: str, type: str, content_type: str, data: bytes, /
    ) -> Awaitable[None]: ...


def is_json_content_type(content_type: str) -> bool:
    """True for ``application/json`` and any ``+json`` media type, parameters ignored."""
    media_type = content_type.split(";", 1)[0].strip().lower()
    return media_type == JSON or media_type.endswith("+json")


@dataclass(frozen=True, slots=True)
class Record:
    """One stored event, exactly as the log holds it."""

    log: str
    """The log's name."""
    seq: int
    """Its position: 1, 2, 3 ... per log, without gaps."""
    time_ns: int
    """When the log stored it: wall clock, Unix nanoseconds. The memory log never lets it
    decrease along a log; JetStream's is the broker's stamp, as its clock reads. ``0`` in one
    corner case: an idempotent retry whose original was already trimmed and whose
    time the log no longer knows."""
    type: str
    """The event type, e.g. ``reward.v1``."""
    data: bytes
    """The payload, as appended."""
    content_type: str = JSON
    """The payload's media type."""
    headers: dict[str, str] = field(default_factory=dict, hash=False)
    """Free-form string headers, as appended (left out of the hash, so records hash)."""

    def json(self) -> Any:
        """The payload parsed as JSON (raises ``orjson.JSONDecodeError``, a ValueError)."""
        return orjson.loads(self.data)

    def to_dict(self) -> dict[str, Any]:
        """JSON-compatible form. A JSON payload appears parsed as ``data``; any other payload
        (or one that does not parse) as base64 in ``data_base64``, as CloudEvents' JSON format
        does (CloudEvents JSON Event Format 1.0, section 3.1)."""
        out: dict[str, Any] = {
            "log": self.log,
            "seq": self.seq,
            "time_ns": self.time_ns,
            "type": self.type,
            "content_type": self.content_type,
            "headers": dict(self.headers),
        }
        if is_json_content_type(self.content_type):
            try:
                out["data"] = orjson.loads(self.data)
            except orjson.JSONDecodeError:
                pass
            else:
                return out
        out["data_base64"] = base64.b64encode(self.data).decode("ascii")
        return out


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An event to append with `EventLog.append_many`; it checks its fields on construction."""

    type: str
    data: bytes
    content_type: str = JSON
    headers: Mapping[str, str] = field(default_factory=dict, hash=False)
    idempotency_key: str | None = None
    """Makes a retried append return the original record instead of storing a duplicate,
    within the log's deduplication window. The key identifies the event; the data of a retry
    is not compared with the original's."""

    def __post_init__(self) -> None:
        check_event_fields(
            self.type, self.data, self.content_type, self.headers, self.idempotency_key
        )
        # A private copy: a caller mutating its dict later cannot change the stored event.
        object.__setattr__(self, "headers", dict(self.headers))

    @property
    def size(self) -> int:
        """The bytes this event counts against ``max_event_bytes``."""
        return event_size(self.type, self.data, self.content_type, self.headers)


@dataclass(frozen=True, slots=True)
class LogLimits:
    """A log's retention: the oldest records go once any limit is passed. None: no limit of
    that kind beyond the implementation's default (see its configuration)."""

    max_age_s: float | None = None
    max_bytes: int | None = None
    max_events: int | None = None


@dataclass(frozen=True, slots=True)
class LogInfo:
    """A log's state. An empty log has ``first_seq == last_seq + 1`` and ``events == 0``."""

    name: str
    first_seq: int
    """The oldest retained record's seq."""
    last_seq: int
    """The newest record's seq (0 before the first append)."""
    events: int
    """Records retained."""
    bytes: int
    """Bytes retained, as the implementation counts them (JetStream adds its own overhead)."""
    limits: LogLimits

    def to_dict(self) -> dict[str, Any]:
        """JSON-compatible form."""
        return {
            "name": self.name,
            "first_seq": self.first_seq,
            "last_seq": self.last_seq,
            "events": self.events,
            "bytes": self.bytes,
            "max_age_s": self.limits.max_age_s,
            "max_bytes": self.limits.max_bytes,
            "max_events": self.limits.max_events,
        }


@dataclass(frozen=True, slots=True)
class GroupSettings:
    """What one `EventLog.consumer_group` call asks of a group.

    ``None`` means *not asked*, which is not the same as a default: a new group takes
    `DEFAULT_ACK_WAIT_S` and no ``max_deliver`` limit, while an existing group keeps the
    settings it was created with. A setting that is asked must match an existing group's
    (`check_join`). The start position applies only when the group is created.
    """

    ack_wait_s: float | None = None
    max_deliver: int | None = None
    start_seq: int | None = None
    start_time_ns: int | None = None

    @property
    def new_ack_wait_s(self) -> float:
        """The ack wait a group created by this call gets."""
        return DEFAULT_ACK_WAIT_S if self.ack_wait_s is None else self.ack_wait_s

    def check_join(self, log: str, group: str, ack_wait_s: float, max_deliver: int | None) -> None:
        """Raise `GroupSettingsConflict` if this call asks for an ``ack_wait_s`` or a
        ``max_deliver`` other than the existing group's (given: what the group stores)."""
        conflicts: list[tuple[str, Any, Any]] = []
        if self.ack_wait_s is not None and not _same_duration(self.ack_wait_s, ack_wait_s):
            conflicts.append(("ack_wait_s", ack_wait_s, self.ack_wait_s))
        if self.max_deliver is not None and self.max_deliver != max_deliver:
            conflicts.append(("max_deliver", max_deliver, self.max_deliver))
        if conflicts:
            raise GroupSettingsConflict(log, group, conflicts)


def _same_duration(a: float, b: float) -> bool:
    # JetStream stores durations as integer nanoseconds (nats-py truncates on the way in),
    # so 0.3 comes back as 0.299999999: equal to within a nanosecond is equal.
    return abs(round(a * 1e9) - round(b * 1e9)) <= 1


@dataclass(frozen=True, slots=True)
class GroupInfo:
    """A consumer group's state."""

    log: str
    group: str
    next_seq: int
    """The seq the group hands out next for the first time (at most ``last_seq + 1``)."""
    pending_acks: int
    """Records handed out and neither acknowledged nor given up (max_deliver) yet."""
    redelivered: int
    """Of those, how many have been handed out more than once."""
    unprocessed: int
    """Records stored that the group has not handed out yet."""
    ack_wait_s: float
    max_deliver: int | None

    def to_dict(self) -> dict[str, Any]:
        """JSON-compatible form."""
        return {
            "log": self.log,
            "group": self.group,
            "next_seq": self.next_seq,
            "pending_acks": self.pending_acks,
            "redelivered": self.redelivered,
            "unprocessed": self.unprocessed,
            "ack_wait_s": self.ack_wait_s,
            "max_deliver": self.max_deliver,
        }


class Delivery(abc.ABC):
    """A record handed to one member of a consumer group, to be settled by that member.

    ``ack()`` settles it for good; ``nak(delay)`` asks for a redelivery (after ``delay``
    seconds); ``in_progress()`` restarts the ack deadline (``ack_wait_s`` from now). Without
    any of them the record is redelivered once the deadline passes. Once acked or nakked,
    further calls on this delivery do nothing. An ack after the deadline still counts while
    the record is pending, even if it has meanwhile been handed to another member.
    """

    __slots__ = ("_settled", "deliveries", "record")

    def __init__(self, record: Record, deliveries: int) -> None:
        self.record = record
        """The record."""
        self.deliveries = deliveries
        """How many times the group has handed this record out: 1 the first time. It never
        goes down; on JetStream it can repeat (the broker takes back the count of a
        redelivery that met a fetch just as it expired)."""
        self._settled = False

    @property
    def seq(self) -> int:
        """The record's seq."""
        return self.record.seq

    @property
    def settled(self) -> bool:
        """True once this delivery was acked or nakked."""
        return self._settled

    async def ack(self) -> None:
        """Settle the record: the group will not hand it out again."""
        if not self._settled:
            await self._ack()
            self._settled = True

    async def nak(self, delay: float | None = None) -> None:
        """Hand the record out again, at once or ``delay`` seconds from now."""
        if delay is not None and not 0 <= delay <= MAX_WAIT_S:
            raise InvalidRequest(f"nak delay must be in 0..{MAX_WAIT_S} s, not {delay!r}")
        if not self._settled:
            await self._nak(delay)
            self._settled = True

    async def in_progress(self) -> None:
        """Still working on it: the ack deadline restarts at ``ack_wait_s`` from now."""
        if not self._settled:
            await self._in_progress()

    @property
    @abc.abstractmethod
    def token(self) -> str:
        """An opaque string that settles this delivery through `EventLog.settle`, from any
        handle on the same logs (what the HTTP API hands a consumer instead of this object)."""

    @abc.abstractmethod
    async def _ack(self) -> None: ...

    @abc.abstractmethod
    async def _nak(self, delay: float | None) -> None: ...

    @abc.abstractmethod
    async def _in_progress(self) -> None: ...

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.record.log}#{self.seq} x{self.deliveries}>"


class ConsumerGroup(abc.ABC):
    """One member's handle on a durable consumer group. Members of one group (in one process
    or many) share the work: each record goes to one of them at a time. Closing a handle
    leaves the group and its position in place (`EventLog.delete_group` removes it)."""

    def __init__(self, log: str, group: str) -> None:
        self.log = log
        """The log's name."""
        self.group = group
        """The group's name."""
        self._closed = False

    async def fetch(self, max_events: int = 64, timeout_s: float = 1.0) -> list[Delivery]:
        """Up to ``max_events`` deliveries (redeliveries first), waiting up to ``timeout_s``
        for the first; ``[]`` if none came in time. `InvalidRequest` once this handle is
        closed (deliveries already fetched can still be settled)."""
        if self._closed:
            raise InvalidRequest(f"this handle on group {self.group!r} is closed")
        if isinstance(max_events, bool) or not isinstance(max_events, int):
            raise InvalidRequest(f"max_events must be an int, not {max_events!r}")
        if not 1 <= max_events <= MAX_FETCH_EVENTS:
            raise InvalidRequest(f"max_events must be in 1..{MAX_FETCH_EVENTS}")
        if not 0 <= timeout_s <= MAX_WAIT_S:
            raise InvalidRequest(f"timeout_s must be in 0..{MAX_WAIT_S}")
        return await self._fetch(max_events, float(timeout_s))

    @abc.abstractmethod
    async def _fetch(self, max_events: int, timeout_s: float) -> list[Delivery]:
        """`fetch` with checked arguments."""

    @abc.abstractmethod
    async def info(self) -> GroupInfo:
        """The group's state (`GroupNotFound` once deleted)."""

    async def aclose(self) -> None:
        """Release this member's resources; the group and its position stay. Idempotent."""
        if not self._closed:
            self._closed = True
            await self._release()

    async def _release(self) -> None:  # noqa: B027 (optional hook: not every member holds any)
        """Hook: release what this member holds."""

    async def __aenter__(self) -> ConsumerGroup:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


def _check_int(value: object, what: str, minimum: int) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InvalidRequest(f"{what} must be an int >= {minimum}, not {value!r}")


class EventLog(abc.ABC):
    """Named append-only event logs with replay and durable consumer groups.

    ``validate``, when given, is awaited for every event before anything of an append is
    stored; ``max_event_bytes`` bounds one event.
    """

    def __init__(
        self,
        *,
        validate: Validator | None = None,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    ) -> None:
        _check_int(max_event_bytes, "max_event_bytes", 1)
        self.validate = validate
        """The validator hook, or None."""
        self.max_event_bytes = max_event_bytes
        """Largest event accepted, in bytes."""

    # -- logs ---------------------------------------------------------------------------------

    async def create_log(
        self,
        name: str,
        *,
        max_age_s: float | None = None,
        max_bytes: int | None = None,
        max_events: int | None = None,
        exist_ok: bool = True,
    ) -> LogInfo:
        """Create a log with these retention limits; return its info. If it exists already,
        raise `LogExists` unless ``exist_ok``, in which case its limits stay as they are."""
        check_name(name)
        check_limit(max_age_s, "max_age_s")
        _check_int(max_bytes, "max_bytes", 1)
        _check_int(max_events, "max_events", 1)
        return await self._create_log(name, LogLimits(max_age_s, max_bytes, max_events), exist_ok)

    async def delete_log(self, name: str) -> None:
        """Delete a log, its records and its consumer groups (`LogNotFound` if missing)."""
        await self._delete_log(check_name(name))

    @abc.abstractmethod
    async def logs(self) -> list[str]:
        """The names of all logs, sorted."""

    async def info(self, name: str) -> LogInfo:
        """A log's state (`LogNotFound` if missing)."""
        return await self._info(check_name(name))

    # -- appending ----------------------------------------------------------------------------

    async def append(
        self,
        name: str,
        type: str,
        data: bytes,
        *,
        content_type: str = JSON,
        headers: Mapping[str, str] | None = None,
        idempotency_key: str | None = None,
    ) -> Record:
        """Append one event; return its record once it is durably stored (as durably as the
        implementation stores anything). With ``idempotency_key``, a retry within the log's
        deduplication window returns the original record and stores nothing: after an
        `EventLogUnavailable`, retrying with the same key is how to be sure.

        Order of refusals: malformed arguments, `EventTooLarge`, the ``validate`` hook, then
        the log's own (`LogNotFound`, ...)."""
        event = NewEvent(type, data, content_type, headers or {}, idempotency_key)
        [record] = await self.append_many(name, [event])
        return record

    async def append_many(self, name: str, events: Iterable[NewEvent]) -> list[Record]:
        """Append events in order; return their records. Every event is checked and validated
        before any is stored. Whether a failure while storing can leave a prefix stored
        depends on the implementation (the in-memory log stores all or nothing; JetStream
        stores one event at a time, so retry with idempotency keys)."""
        check_name(name)
        batch = list(events)
        if len(batch) > MAX_BATCH_EVENTS:
            raise InvalidRequest(f"{len(batch)} events in one batch: at most {MAX_BATCH_EVENTS}")
        for event in batch:
            if not isinstance(event, NewEvent):
                raise InvalidRequest(f"expected NewEvent, not {event.__class__.__name__}")
            check_size(event.size, self.max_event_bytes)
        if self.validate is not None:
            for event in batch:
                await self.validate(name, event.type, event.content_type, event.data)
        if not batch:
            await self._info(name)  # still LogNotFound for a missing log
            return []
        return await self._append(name, batch)

    # -- replay -------------------------------------------------------------------------------

    async def read(
        self,
        name: str,
        *,
        from_seq: int | None = None,
        from_time_ns: int | None = None,
        limit: int = 100,
    ) -> list[Record]:
        """Up to ``limit`` records in order: from ``from_seq`` (inclusive), or from the first
        record stored at or after ``from_time_ns``, or from the oldest retained. A start
        before the oldest retained record starts there. Fewer than ``limit`` come back when
        the log ends first or after `MAX_READ_BYTES` of data; continue from the last seq + 1.
        """
        check_name(name)
        if from_seq is not None and from_time_ns is not None:
            raise InvalidRequest("give from_seq or from_time_ns, not both")
        _check_int(from_seq, "from_seq", 1)
        _check_int(from_time_ns, "from_time_ns", 0)
        _check_int(limit, "limit", 1)
        if limit > MAX_READ_LIMIT:
            raise InvalidRequest(f"limit {limit}: at most {MAX_READ_LIMIT}")
        return await self._read(name, from_seq, from_time_ns, limit)

    # -- consumer groups ----------------------------------------------------------------------

    async def consumer_group(
        self,
        name: str,
        group: str,
        *,
        ack_wait_s: float | None = None,
        max_deliver: int | None = None,
        start_seq: int | None = None,
        start_time_ns: int | None = None,
    ) -> ConsumerGroup:
        """Join consumer group ``group`` on log ``name``, creating it if needed.

        A new group is created with these settings: ``ack_wait_s`` (`DEFAULT_ACK_WAIT_S`
        if None) and ``max_deliver`` (None: redeliver without limit); it starts at
        ``start_seq``, or at the first record stored at or after ``start_time_ns``, or at the
        oldest retained record.

        Joining an existing group never changes it: it keeps its position (the start
        arguments are ignored) and its settings. Leave ``ack_wait_s`` and ``max_deliver`` out
        (None) to join with the group's own; one that is given and differs from the group's
        raises `GroupSettingsConflict` (giving the same value is fine).
        """
        check_name(name)
        check_name(group, "group")
        check_limit(ack_wait_s, "ack_wait_s")
        _check_int(max_deliver, "max_deliver", 1)
        if start_seq is not None and start_time_ns is not None:
            raise InvalidRequest("give start_seq or start_time_ns, not both")
        _check_int(start_seq, "start_seq", 1)
        _check_int(start_time_ns, "start_time_ns", 0)
        ack_wait = None if ack_wait_s is None else float(ack_wait_s)
        settings = GroupSettings(ack_wait, max_deliver, start_seq, start_time_ns)
        return await self._consumer_group(name, group, settings)

    async def group_info(self, name: str, group: str) -> GroupInfo:
        """A consumer group's state, without joining it (`LogNotFound` or `GroupNotFound` if
        missing): looking at a group never creates it, so never fixes its settings before
        its first member asks for them."""
        return await self._group_info(check_name(name), check_name(group, "group"))

    async def delete_group(self, name: str, group: str) -> None:
        """Delete a consumer group and its position (`GroupNotFound` if missing)."""
        await self._delete_group(check_name(name), check_name(group, "group"))

    async def settle(self, token: str, action: str = "ack", delay: float | None = None) -> None:
        """Settle the delivery whose `Delivery.token` is ``token``: ``ack``, ``nak`` (with an
        optional ``delay``) or ``progress`` (restart its ack deadline). A token that is not
        one this log hands out is an `InvalidRequest`; one whose delivery is already settled
        or redelivered since does nothing (as `Delivery` does)."""
        if action not in SETTLE_ACTIONS:
            raise InvalidRequest(f"action {action!r}: use one of {', '.join(SETTLE_ACTIONS)}")
        if delay is not None and (action != "nak" or not 0 <= delay <= MAX_WAIT_S):
            raise InvalidRequest(f"a delay (0..{MAX_WAIT_S} s) goes with nak only")
        if not isinstance(token, str) or not 0 < len(token) <= MAX_TOKEN_LENGTH:
            raise InvalidRequest("a delivery token is a non-empty string")
        await self._settle(token, action, delay)

    def token_log(self, token: str) -> str | None:
        """The log whose delivery ``token`` settles (None: not a token of this event log), so
        that a caller allowed on one log settles nothing of another's."""
        return self._token_log(token) if isinstance(token, str) else None

    # -- implementation hooks (arguments already checked) ------------------------------------

    @abc.abstractmethod
    async def _create_log(self, name: str, limits: LogLimits, exist_ok: bool) -> LogInfo: ...

    @abc.abstractmethod
    async def _delete_log(self, name: str) -> None: ...

    @abc.abstractmethod
    def _token_log(self, token: str) -> str | None: ...

    @abc.abstractmethod
    async def _info(self, name: str) -> LogInfo: ...

    @abc.abstractmethod
    async def _append(self, name: str, events: list[NewEvent]) -> list[Record]: ...

    @abc.abstractmethod
    async def _read(
        self, name: str, from_seq: int | None, from_time_ns: int | None, limit: int
    ) -> list[Record]: ...

    @abc.abstractmethod
    async def _consumer_group(
        self, name: str, group: str, settings: GroupSettings
    ) -> ConsumerGroup:
        """Create the group from ``settings``, or join the existing one unchanged once
        ``settings.check_join`` accepts what it stores (also when another member created it
        a moment earlier)."""

    @abc.abstractmethod
    async def _group_info(self, name: str, group: str) -> GroupInfo: ...

    @abc.abstractmethod
    async def _delete_group(self, name: str, group: str) -> None: ...

    @abc.abstractmethod
    async def _settle(self, token: str, action: str, delay: float | None) -> None: ...
