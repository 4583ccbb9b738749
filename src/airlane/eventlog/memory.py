"""`MemoryEventLog`: the embedded default, in one process, nothing durable past its lifetime.

The state machines are pure (`airlane.eventlog.memory_log.LogState`,
`airlane.eventlog.memory_group.GroupState`); this module adds the clocks and the wake-ups.
Record times come from ``config.clock_ns`` (the wall clock); ack deadlines from the running
event loop's clock, so a wall clock step never makes a record redeliver early or late.

Bounds (`MemoryEventLogConfig`): ``max_logs`` logs; per log, ``default_max_events`` records
and ``default_max_bytes`` bytes unless created with tighter (or looser) limits,
``max_groups_per_log`` consumer groups, ``max_idempotency_keys`` keys; per group,
``max_ack_pending`` pending records. Worst case is therefore ``max_logs`` times the per-log
limits: lower the defaults where memory is tight.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from airlane.eventlog.base import (
    DEFAULT_MAX_EVENT_BYTES,
    ConsumerGroup,
    Delivery,
    EventLog,
    GroupInfo,
    GroupSettings,
    LogInfo,
    LogLimits,
    NewEvent,
    Record,
    Validator,
)
from airlane.eventlog.errors import (
    CapacityExceeded,
    GroupNotFound,
    InvalidRequest,
    LogExists,
    LogNotFound,
)
from airlane.eventlog.memory_group import GroupState
from airlane.eventlog.memory_log import LogState

__all__ = ["MemoryEventLog", "MemoryEventLogConfig"]

DEFAULT_MAX_LOGS = 1_000
DEFAULT_MAX_EVENTS = 100_000
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_GROUPS_PER_LOG = 64
DEFAULT_MAX_ACK_PENDING = 1_000
DEFAULT_DEDUP_WINDOW_S = 120.0
DEFAULT_MAX_IDEMPOTENCY_KEYS = 100_000


@dataclass(frozen=True, slots=True)
class MemoryEventLogConfig:
    """Bounds and clock of a `MemoryEventLog`."""

    max_logs: int = DEFAULT_MAX_LOGS
    """Most logs at once; `EventLog.create_log` past it raises `CapacityExceeded`."""
    default_max_events: int = DEFAULT_MAX_EVENTS
    """Records kept per log when it is created without ``max_events``."""
    default_max_bytes: int = DEFAULT_MAX_BYTES
    """Bytes kept per log when it is created without ``max_bytes``."""
    max_groups_per_log: int = DEFAULT_MAX_GROUPS_PER_LOG
    """Most consumer groups per log; past it `CapacityExceeded`."""
    max_ack_pending: int = DEFAULT_MAX_ACK_PENDING
    """Most records pending an ack per group (JetStream's default is the same)."""
    dedup_window_s: float = DEFAULT_DEDUP_WINDOW_S
    """How long an idempotency key is remembered (JetStream's default window is the same)."""
    max_idempotency_keys: int = DEFAULT_MAX_IDEMPOTENCY_KEYS
    """Most idempotency keys remembered per log; the oldest are forgotten first."""
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
    """Largest event accepted."""
    clock_ns: Callable[[], int] = field(default=time.time_ns)
    """The wall clock that stamps records and ages them out (Unix nanoseconds)."""


class _Signal:
    """Wakes every waiter once per `notify`; a waiter that arrives later waits for the next."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def notify(self) -> None:
        self._event.set()
        self._event = asyncio.Event()

    async def wait_at_most(self, seconds: float) -> None:
        event = self._event
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await event.wait()


@dataclass(slots=True)
class _Log:
    state: LogState
    groups: dict[str, GroupState] = field(default_factory=dict)
    changed: _Signal = field(default_factory=_Signal)


def _loop_time() -> float:
    return asyncio.get_running_loop().time()


class MemoryEventLog(EventLog):
    """Event logs in this process's memory (see the module docstring for the bounds)."""

    def __init__(
        self, config: MemoryEventLogConfig | None = None, *, validate: Validator | None = None
    ) -> None:
        self.config = config or MemoryEventLogConfig()
        """The bounds and clock."""
        super().__init__(validate=validate, max_event_bytes=self.config.max_event_bytes)
        self._logs: dict[str, _Log] = {}

    async def logs(self) -> list[str]:
        """The names of all logs, sorted."""
        return sorted(self._logs)

    async def _create_log(self, name: str, limits: LogLimits, exist_ok: bool) -> LogInfo:
        existing = self._logs.get(name)
        if existing is not None:
            if not exist_ok:
                raise LogExists(f"log {name!r} exists")
            return self._current(name).info()
        if len(self._logs) >= self.config.max_logs:
            raise CapacityExceeded(f"{len(self._logs)} logs: at most {self.config.max_logs}")
        effective = LogLimits(
            limits.max_age_s,
            limits.max_bytes or self.config.default_max_bytes,
            limits.max_events or self.config.default_max_events,
        )
        state = LogState(
            name,
            effective,
            dedup_window_ns=int(self.config.dedup_window_s * 1e9),
            max_keys=self.config.max_idempotency_keys,
        )
        self._logs[name] = _Log(state)
        return state.info()

    async def _delete_log(self, name: str) -> None:
        log = self._log(name)
        del self._logs[name]
        for group in log.groups.values():
            group.deleted = True
        log.changed.notify()

    async def _info(self, name: str) -> LogInfo:
        return self._current(name).info()

    async def _append(self, name: str, events: list[NewEvent]) -> list[Record]:
        log = self._log(name)
        records = log.state.append(events, self.config.clock_ns())
        log.changed.notify()
        return records

    async def _read(
        self, name: str, from_seq: int | None, from_time_ns: int | None, limit: int
    ) -> list[Record]:
        state = self._current(name)
        if from_time_ns is not None:
            start = state.seq_at_time(from_time_ns)
        else:
            start = from_seq or state.first_seq
        return state.read(start, limit)

    async def _consumer_group(
        self, name: str, group: str, settings: GroupSettings
    ) -> ConsumerGroup:
        log = self._log(name)
        existing = log.groups.get(group)
        if existing is not None:
            settings.check_join(name, group, existing.ack_wait_s, existing.max_deliver)
        else:
            if len(log.groups) >= self.config.max_groups_per_log:
                raise CapacityExceeded(
                    f"{len(log.groups)} groups on {name!r}: at most "
                    f"{self.config.max_groups_per_log}"
                )
            state = self._current(name)
            if settings.start_time_ns is not None:
                start = state.seq_at_time(settings.start_time_ns)
            else:
                start = settings.start_seq or state.first_seq
            log.groups[group] = GroupState(
                name, group, settings, start, self.config.max_ack_pending
            )
        return _MemoryConsumerGroup(self, name, group)

    async def _group_info(self, name: str, group: str) -> GroupInfo:
        log, state = self._group(name, group)
        return state.info(log.state, _loop_time())

    async def _delete_group(self, name: str, group: str) -> None:
        log = self._log(name)
        state = log.groups.pop(group, None)
        if state is None:
            raise GroupNotFound(f"no group {group!r} on log {name!r}")
        state.deleted = True
        log.changed.notify()

    def _token_log(self, token: str) -> str | None:
        parts = token.split("|")
        return parts[0] if len(parts) == 4 else None

    async def _settle(self, token: str, action: str, delay: float | None) -> None:
        try:
            name, group, seq_text, deliveries_text = token.split("|")
            seq, deliveries = int(seq_text), int(deliveries_text)
        except ValueError:
            raise InvalidRequest("not a delivery token of this event log") from None
        log, state = self._group(name, group)
        now = _loop_time()
        if action == "ack":
            state.ack(seq)
        elif action == "nak":
            state.nak(seq, deliveries, delay, now)
        else:
            state.touch(seq, deliveries, now)
        log.changed.notify()

    # -- helpers for the group handles --------------------------------------------------------

    def _log(self, name: str) -> _Log:
        log = self._logs.get(name)
        if log is None:
            raise LogNotFound(f"no log {name!r}")
        return log

    def _current(self, name: str) -> LogState:
        """The log's state with age-expired records already dropped."""
        state = self._log(name).state
        state.expire(self.config.clock_ns())
        return state

    def _group(self, name: str, group: str) -> tuple[_Log, GroupState]:
        log = self._log(name)
        state = log.groups.get(group)
        if state is None:
            raise GroupNotFound(f"no group {group!r} on log {name!r}")
        log.state.expire(self.config.clock_ns())
        return log, state


class _MemoryConsumerGroup(ConsumerGroup):
    """A member's handle: it looks the group up by name on every call, so a handle on a
    deleted group raises `GroupNotFound`, and one on a re-created group joins the new one."""

    def __init__(self, owner: MemoryEventLog, log: str, group: str) -> None:
        super().__init__(log, group)
        self._owner = owner

    async def _fetch(self, max_events: int, timeout_s: float) -> list[Delivery]:
        deadline = _loop_time() + timeout_s
        while True:
            log, state = self._owner._group(self.log, self.group)
            now = _loop_time()
            taken = state.take(log.state, max_events, now)
            if taken:
                return [_MemoryDelivery(r, n, state, log.changed) for r, n in taken]
            if now >= deadline:
                return []
            # Sleep until something changes (append, ack, nak, deletion) or the earliest
            # ack deadline passes, whichever comes first, but never past our own deadline.
            next_deadline = state.next_deadline()
            wake = deadline if next_deadline is None else min(deadline, next_deadline)
            await log.changed.wait_at_most(max(wake - now, 0.0))

    async def info(self) -> GroupInfo:
        """The group's state (`GroupNotFound` once deleted)."""
        return await self._owner.group_info(self.log, self.group)


class _MemoryDelivery(Delivery):
    __slots__ = ("_changed", "_log", "_state")

    def __init__(
        self, record: Record, deliveries: int, state: GroupState, changed: _Signal
    ) -> None:
        super().__init__(record, deliveries)
        self._log = record.log  # the token's, whatever name the record is shown under later
        self._state = state
        self._changed = changed

    async def _ack(self) -> None:
        if self._state.deleted:
            raise GroupNotFound(f"group {self._state.group!r} on {self._log!r} is gone")
        self._state.ack(self.seq)
        self._changed.notify()  # a pending slot is free

    # nak and in_progress on a deleted group do nothing, as on JetStream (where they are
    # unconfirmed messages to a consumer that no longer listens).

    async def _nak(self, delay: float | None) -> None:
        self._state.nak(self.seq, self.deliveries, delay, _loop_time())
        self._changed.notify()  # a member may be waiting for exactly this redelivery

    async def _in_progress(self) -> None:
        self._state.touch(self.seq, self.deliveries, _loop_time())

    @property
    def token(self) -> str:
        # Log and group names cannot contain "|".
        return f"{self._log}|{self._state.group}|{self.seq}|{self.deliveries}"
