"""One in-memory log: its records, retention and idempotency keys (pure: time is passed in).

Records live in a deque, oldest first, so trimming the front is O(1) and seq ``s`` sits at
index ``s - first_seq``. Stored times never decrease along the log (a wall clock stepping
back is clamped to the previous record's time), which keeps "the first record at or after a
time" a binary search.
"""

from __future__ import annotations

import bisect
import itertools
from collections import OrderedDict, deque
from dataclasses import dataclass

from airlane.eventlog.base import MAX_READ_BYTES, LogInfo, LogLimits, NewEvent, Record
from airlane.eventlog.checks import event_size

__all__ = ["LogState"]


@dataclass(frozen=True, slots=True)
class _KeyedAppend:
    """What an idempotency key remembers: enough to answer a retry after trimming."""

    seq: int
    time_ns: int


class LogState:
    """The records of one log and the rules that bound them.

    ``limits`` holds the effective limits (defaults already applied); ``dedup_window_ns`` is
    how long an idempotency key is remembered, and at most ``max_keys`` are (the oldest are
    forgotten early past that, which shortens the window only under a flood of keys).
    """

    def __init__(
        self, name: str, limits: LogLimits, *, dedup_window_ns: int, max_keys: int
    ) -> None:
        self.name = name
        self.limits = limits
        self.records: deque[Record] = deque()
        self.bytes = 0
        self.last_seq = 0
        self._last_time_ns = 0
        self._dedup_window_ns = dedup_window_ns
        self._max_keys = max_keys
        self._keys: OrderedDict[str, _KeyedAppend] = OrderedDict()

    @property
    def first_seq(self) -> int:
        """The oldest retained record's seq (``last_seq + 1`` when empty)."""
        return self.last_seq - len(self.records) + 1

    def info(self) -> LogInfo:
        """The log's state."""
        return LogInfo(
            self.name, self.first_seq, self.last_seq, len(self.records), self.bytes, self.limits
        )

    def record(self, seq: int) -> Record | None:
        """The record at ``seq``, if retained."""
        index = seq - self.first_seq
        return self.records[index] if 0 <= index < len(self.records) else None

    def seq_at_time(self, time_ns: int) -> int:
        """The seq of the first retained record stored at or after ``time_ns``; ``last_seq +
        1`` if there is none yet."""
        index = bisect.bisect_left(self.records, time_ns, key=lambda record: record.time_ns)
        return self.first_seq + index

    def expire(self, now_ns: int) -> None:
        """Drop records older than ``max_age_s`` and idempotency keys past their window."""
        if self.limits.max_age_s is not None:
            cutoff = now_ns - int(self.limits.max_age_s * 1e9)
            while self.records and self.records[0].time_ns <= cutoff:
                self._drop_oldest()
        key_cutoff = now_ns - self._dedup_window_ns
        while self._keys:
            key, keyed = next(iter(self._keys.items()))
            if keyed.time_ns > key_cutoff:
                break
            del self._keys[key]

    def append(self, events: list[NewEvent], now_ns: int) -> list[Record]:
        """Store ``events`` (all of them: nothing here can fail halfway) and return their
        records; a known idempotency key returns the original record instead."""
        self.expire(now_ns)
        out: list[Record] = []
        for event in events:
            key = event.idempotency_key
            keyed = self._keys.get(key) if key is not None else None
            if keyed is not None:
                out.append(self._original(keyed, event))
                continue
            record = self._store(event, max(now_ns, self._last_time_ns))
            if key is not None:
                self._remember(key, record)
            out.append(record)
        self._trim()
        return out

    def read(self, start_seq: int, limit: int) -> list[Record]:
        """Up to ``limit`` records from ``start_seq`` (or the oldest retained, if later),
        stopping once `MAX_READ_BYTES` of data are gathered."""
        index = max(start_seq - self.first_seq, 0)
        out: list[Record] = []
        total = 0
        for record in itertools.islice(self.records, index, index + limit):
            total += len(record.data)
            if out and total > MAX_READ_BYTES:
                break
            out.append(record)
        return out

    # -- internals ----------------------------------------------------------------------------

    def _store(self, event: NewEvent, time_ns: int) -> Record:
        self.last_seq += 1
        self._last_time_ns = time_ns
        record = Record(
            self.name,
            self.last_seq,
            time_ns,
            event.type,
            event.data,
            event.content_type,
            dict(event.headers),
        )
        self.records.append(record)
        self.bytes += event.size
        return record

    def _original(self, keyed: _KeyedAppend, retry: NewEvent) -> Record:
        original = self.record(keyed.seq)
        if original is not None:
            return original
        # Trimmed already: the key is the event's identity, so the retry describes it.
        return Record(
            self.name,
            keyed.seq,
            keyed.time_ns,
            retry.type,
            retry.data,
            retry.content_type,
            dict(retry.headers),
        )

    def _remember(self, key: str, record: Record) -> None:
        self._keys[key] = _KeyedAppend(record.seq, record.time_ns)
        while len(self._keys) > self._max_keys:
            self._keys.popitem(last=False)

    def _trim(self) -> None:
        max_events, max_bytes = self.limits.max_events, self.limits.max_bytes
        while len(self.records) > 1 and (
            (max_events is not None and len(self.records) > max_events)
            or (max_bytes is not None and self.bytes > max_bytes)
        ):
            self._drop_oldest()

    def _drop_oldest(self) -> None:
        record = self.records.popleft()
        self.bytes -= event_size(record.type, record.data, record.content_type, record.headers)
