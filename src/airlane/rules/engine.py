"""Running a rule, sans-I/O: rows in, output rows out, time passed in.

`RuleRunner` runs one `RulePlan`. It reads no clock and does no I/O: the caller passes each
row with the time it has now (``feed(row, now)``), asks when the next window closes
(`RuleRunner.get_timer`) and calls `RuleRunner.handle_timer` then. Every call returns the
output rows it produced, in order. The same rows and times give the same output, which is what
lets tests run a rule on a fake clock and a restarted runner carry on from a snapshot.

Time
    A row's time is ``ts`` (default: ``now``); it decides the windows the row joins. ``now``
    closes windows. A ``ts`` later than ``now`` is taken as ``now`` (a window that only the
    future would close would wait for it); a ``now`` earlier than one seen before is taken as
    that one (windows never reopen).

A mapping rule
    Each row that passes WHERE gives its output row at once.

Tumbling and hopping windows
    A row joins each window holding its ``ts`` (`airlane.rules.windows`) and is folded into
    its group's aggregates there; the rows themselves are not kept. When ``now`` reaches a
    window's end (in ``feed``, before the new row is added, or in ``handle_timer``), the
    window gives one output row per group, groups in order of first arrival, those for which
    HAVING is true, with ``window_start`` and ``window_end``; windows come out in order of
    their end. A window that saw no row gives nothing. A row whose windows have all closed is
    *late*: dropped and counted (`RuleStats.late_rows`).

Sliding windows
    Each row that passes WHERE gives at once one output row for its group, aggregated over
    the group's rows with ``ts`` in ``(ts - size, ts]`` (the row included), if HAVING is true;
    ``window_start`` and ``window_end`` are ``ts - size`` and ``ts``. These rows' aggregate
    arguments are kept (not the whole rows) until ``now - size`` passes them; a row already
    that old when it arrives is late. Each output row costs one pass over its group's kept
    rows.

Bounds
    A window holds at most ``max_groups`` groups: a row of a new group beyond that is dropped
    from that window and counted (`RuleStats.dropped_groups`, once per row and window). A
    sliding window keeps at most ``max_window_rows`` rows, all groups together: past that the
    oldest goes and is counted (`RuleStats.dropped_rows`). A tumbling or hopping rule holds at
    most ``size / hop`` open windows (`airlane.rules.windows.MAX_WINDOWS_PER_ROW`) of at most
    ``max_groups`` groups, each a few numbers per aggregate.

Snapshots
    `RuleRunner.snapshot` returns the runner's state as JSON-compatible data (dicts, lists,
    strings, numbers); `RuleRunner.restore` rebuilds a runner from it and the same plan. A
    runner restored from a snapshot produces what the original would have produced from there
    on. Serialize the snapshot before feeding more rows: it shares nested values with the
    runner's state. The runner keeps references to values of the rows fed to it (group keys,
    aggregate arguments, ``first``/``last`` values), so a row must not be changed after it is
    fed.
"""

from __future__ import annotations

import json
import math
from collections import deque
from collections.abc import Hashable, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from airlane.rules.errors import SnapshotError
from airlane.rules.expressions import GroupRow, Row
from airlane.rules.plan import RulePlan
from airlane.rules.values import kind
from airlane.rules.windows import (
    MAX_WINDOWS_PER_ROW,
    WINDOW_END,
    WINDOW_START,
    WindowKind,
    WindowSpec,
    to_ms,
)

__all__ = [
    "DEFAULT_MAX_GROUPS",
    "DEFAULT_MAX_WINDOW_ROWS",
    "MAX_TIME_S",
    "SNAPSHOT_FORMAT",
    "RuleRunner",
    "RuleStats",
]

DEFAULT_MAX_GROUPS = 10_000
"""Groups per window: one per device of a large site; each holds its keys and a few numbers
per aggregate, so 10,000 groups are a few MB at most."""
DEFAULT_MAX_WINDOW_ROWS = 100_000
"""Rows a sliding window keeps (their aggregate arguments): a minute of 1,600 rows a second."""
SNAPSHOT_FORMAT = "airlane.rules/1"
"""The ``format`` of the snapshots this version writes and reads."""
MAX_TIME_S = 1e12
"""Largest time accepted, in seconds either side of 0 (Unix time until the year 33658)."""

Output = dict[str, Any]


@dataclass(slots=True)
class RuleStats:
    """What a runner did with the rows it was fed. Counters only grow; a snapshot keeps
    them."""

    rows_in: int = 0
    """Rows fed."""
    rows_filtered: int = 0
    """Rows WHERE did not keep (false or NULL)."""
    rows_out: int = 0
    """Output rows produced."""
    late_rows: int = 0
    """Rows dropped because every window they belonged to had closed (or, sliding, because
    they were older than the window size)."""
    dropped_groups: int = 0
    """Times a row was kept out of a window that already held ``max_groups`` groups."""
    dropped_rows: int = 0
    """Rows a sliding window dropped, oldest first, to stay within ``max_window_rows``."""


class RuleRunner:
    """One rule's state and its run: `feed` rows, `handle_timer` at `get_timer`, and
    `snapshot` / `restore` across restarts (see the module docstring)."""

    def __init__(
        self,
        plan: RulePlan,
        *,
        max_groups: int = DEFAULT_MAX_GROUPS,
        max_window_rows: int = DEFAULT_MAX_WINDOW_ROWS,
    ) -> None:
        if max_groups < 1:
            raise ValueError(f"max_groups must be at least 1, not {max_groups}")
        if max_window_rows < 1:
            raise ValueError(f"max_window_rows must be at least 1, not {max_window_rows}")
        self.plan = plan
        """The rule being run."""
        self.max_groups = max_groups
        """Most groups per window."""
        self.max_window_rows = max_window_rows
        """Most rows a sliding window keeps."""
        self.stats = RuleStats()
        """Counters of what happened to the rows fed."""
        self._clock: float | None = None
        self._windows: _FixedWindows | _SlidingWindow | None = None
        window = plan.window
        if window is not None and window.kind is WindowKind.SLIDING:
            self._windows = _SlidingWindow(plan, window, self)
        elif window is not None:
            self._windows = _FixedWindows(plan, window, self)

    def feed(
        self,
        row: Mapping[str, Any],
        now: float,
        *,
        ts: float | None = None,
        topic: str | None = None,
        qos: int | None = None,
    ) -> list[Output]:
        """Add one row (its JSON payload, and its topic, QoS and time when known) at time
        ``now``; return the output rows produced: windows ``now`` closed, then this row's."""
        if not isinstance(row, Mapping):
            raise TypeError(f"a row is a mapping (a JSON object), not {type(row).__name__}")
        given_ts = None if ts is None else _check_time(ts, "ts")  # before any state changes
        clock = self._advance(now)
        output = self._close(clock)
        self.stats.rows_in += 1
        row_ts = clock if given_ts is None else min(given_ts, clock)
        message = Row(row, topic, qos, row_ts)
        where = self.plan.where
        if where is not None and where.evaluate(message) is not True:
            self.stats.rows_filtered += 1
            return output
        if self._windows is None:
            output.append(self._map(message))
            self.stats.rows_out += 1
        else:
            keys, group_id = _group_key(
                tuple(key.evaluate(message) for key in self.plan.group_keys)
            )
            inputs = [aggregate.argument(message) for aggregate in self.plan.aggregates]
            output.extend(self._windows.add(keys, group_id, inputs, row_ts, to_ms(clock)))
        return output

    def get_timer(self) -> float | None:
        """When the next window closes (seconds, on the caller's clock); None if no window
        is waiting for one."""
        if isinstance(self._windows, _FixedWindows):
            end_ms = self._windows.next_end_ms()
            return None if end_ms is None else end_ms / 1000
        return None

    def handle_timer(self, now: float) -> list[Output]:
        """Close what ``now`` closes; the output rows of the windows that ended."""
        return self._close(self._advance(now))

    def snapshot(self) -> dict[str, Any]:
        """The runner's state as JSON-compatible data, for `restore`."""
        snapshot: dict[str, Any] = {
            "format": SNAPSHOT_FORMAT,
            "sql": self.plan.sql,
            "clock": self._clock,
            "stats": asdict(self.stats),
        }
        if self._windows is not None:
            snapshot.update(self._windows.dump())
        return snapshot

    @classmethod
    def restore(
        cls,
        plan: RulePlan,
        snapshot: Mapping[str, Any],
        *,
        max_groups: int = DEFAULT_MAX_GROUPS,
        max_window_rows: int = DEFAULT_MAX_WINDOW_ROWS,
    ) -> RuleRunner:
        """A runner of ``plan`` in the state ``snapshot`` recorded; `SnapshotError` if the
        snapshot is malformed, of another rule, or larger than these bounds allow."""
        runner = cls(plan, max_groups=max_groups, max_window_rows=max_window_rows)
        if not isinstance(snapshot, Mapping) or snapshot.get("format") != SNAPSHOT_FORMAT:
            raise SnapshotError(f"not a rule snapshot of format {SNAPSHOT_FORMAT!r}")
        if snapshot.get("sql") != plan.sql:
            raise SnapshotError("the snapshot was taken of another rule (its SQL differs)")
        clock = snapshot.get("clock")
        if clock is not None and not _is_time(clock):
            raise SnapshotError(f"the snapshot's clock is not a time: {clock!r}")
        runner._clock = clock
        runner.stats = _load_stats(snapshot.get("stats"))
        if runner._windows is not None:
            runner._windows.load(snapshot)
        return runner

    # -- internals --------------------------------------------------------------------------

    def _advance(self, now: float) -> float:
        now = _check_time(now, "now")
        if self._clock is None or now > self._clock:
            self._clock = now
        return self._clock

    def _close(self, clock: float) -> list[Output]:
        if self._windows is None:
            return []
        return self._windows.close(to_ms(clock))

    def _map(self, message: Row) -> Output:
        output: Output = {}
        for projection in self.plan.projections:
            value = projection.evaluate(message)
            if projection.star:
                output.update(value)
            else:
                output[projection.name] = value
        return output

    def _group_output(
        self, keys: tuple[Any, ...], results: tuple[Any, ...], start: float, end: float
    ) -> Output | None:
        """One group's output row, or None if HAVING does not keep it (counted in
        `RuleStats.rows_out` when kept). For the window states of this module."""
        group = GroupRow(keys, results, start, end)
        having = self.plan.having
        if having is not None and having.evaluate(group) is not True:
            return None
        output: Output = {p.name: p.evaluate(group) for p in self.plan.projections}
        output.setdefault(WINDOW_START, start)
        output.setdefault(WINDOW_END, end)
        self.stats.rows_out += 1
        return output


# -- groups -----------------------------------------------------------------------------------


def _group_key(values: tuple[Any, ...]) -> tuple[tuple[Any, ...], Hashable]:
    """The group's key values and a hashable identity for them: 1 and 1.0 are one group,
    true and 1 two; lists and objects are compared by their JSON text (keys sorted). A value
    that cannot be written as JSON (nested too deeply) is taken as NULL."""
    keys = list(values)
    identity: list[Hashable] = []
    for i, value in enumerate(values):
        value_kind = kind(value)
        if value_kind in ("null", "boolean", "number", "string"):
            identity.append((value_kind, value))
            continue
        try:
            text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=repr)
        except (TypeError, ValueError, RecursionError):
            keys[i] = None
            identity.append(("null", None))
        else:
            identity.append((value_kind, text))
    return tuple(keys), tuple(identity)


class _Group:
    """One group of a tumbling or hopping window: its keys and aggregate states."""

    __slots__ = ("keys", "states")

    def __init__(self, keys: tuple[Any, ...], states: list[Any]) -> None:
        self.keys = keys
        self.states = states


class _FixedWindows:
    """The open windows of a tumbling or hopping rule, by start (ms), each its groups."""

    def __init__(self, plan: RulePlan, spec: WindowSpec, runner: RuleRunner) -> None:
        self.spec = spec
        self.runner = runner
        self.functions = [aggregate.function for aggregate in plan.aggregates]
        self.windows: dict[int, dict[Hashable, _Group]] = {}

    def add(
        self,
        keys: tuple[Any, ...],
        group_id: Hashable,
        inputs: list[Any],
        ts: float,
        clock_ms: int,
    ) -> list[Output]:
        size, stats = self.spec.size_ms, self.runner.stats
        starts = [start for start in self.spec.starts_ms(to_ms(ts)) if start + size > clock_ms]
        if not starts:
            stats.late_rows += 1
            return []
        for start in starts:
            groups = self.windows.setdefault(start, {})
            group = groups.get(group_id)
            if group is None:
                if len(groups) >= self.runner.max_groups:
                    stats.dropped_groups += 1
                    continue
                group = groups[group_id] = _Group(keys, [f.initial for f in self.functions])
            states = group.states
            for i, function in enumerate(self.functions):
                states[i] = function.add(states[i], inputs[i])
        return []

    def close(self, clock_ms: int) -> list[Output]:
        size = self.spec.size_ms
        output: list[Output] = []
        for start in sorted(s for s in self.windows if s + size <= clock_ms):
            window_start, window_end = start / 1000, (start + size) / 1000
            for group in self.windows.pop(start).values():
                results = tuple(
                    f.result(s) for f, s in zip(self.functions, group.states, strict=True)
                )
                row = self.runner._group_output(group.keys, results, window_start, window_end)
                if row is not None:
                    output.append(row)
        return output

    def next_end_ms(self) -> int | None:
        return min(self.windows) + self.spec.size_ms if self.windows else None

    def dump(self) -> dict[str, Any]:
        return {
            "windows": [
                [start, [[list(g.keys), list(g.states)] for g in groups.values()]]
                for start, groups in self.windows.items()
            ]
        }

    def load(self, snapshot: Mapping[str, Any]) -> None:
        windows = snapshot.get("windows")
        if not isinstance(windows, list) or len(windows) > MAX_WINDOWS_PER_ROW + 1:
            raise SnapshotError("the snapshot's windows are not a list of open windows")
        for window in windows:
            if not (isinstance(window, list) and len(window) == 2 and isinstance(window[1], list)):
                raise SnapshotError(f"not a window: {window!r:.80}")
            start, groups = window
            if not _is_int(start) or start % self.spec.hop_ms or start in self.windows:
                raise SnapshotError(f"not the start of a window of this rule: {start!r}")
            if len(groups) > self.runner.max_groups:
                raise SnapshotError(
                    f"a window holds {len(groups)} groups; max_groups is {self.runner.max_groups}"
                )
            loaded = self.windows[start] = {}
            for group in groups:
                keys, states = _load_group(group, self.runner.plan, self.functions)
                keys, group_id = _group_key(keys)
                if group_id in loaded:
                    raise SnapshotError(f"a window holds the group {list(keys)!r:.80} twice")
                loaded[group_id] = _Group(keys, states)


class _Entry:
    """One row a sliding window keeps: its time, group and aggregate arguments."""

    __slots__ = ("group_id", "inputs", "ts", "ts_ms")

    def __init__(self, ts: float, group_id: Hashable, inputs: list[Any]) -> None:
        self.ts = ts
        self.ts_ms = to_ms(ts)
        self.group_id = group_id
        self.inputs = inputs


class _SlidingWindow:
    """The rows a sliding rule keeps, in arrival order, and per group.

    Rows leave only from the front of the arrival order (too old, or past the row limit);
    each group's rows are in arrival order too, so the oldest row overall is always the first
    of its group."""

    def __init__(self, plan: RulePlan, spec: WindowSpec, runner: RuleRunner) -> None:
        self.spec = spec
        self.runner = runner
        self.functions = [aggregate.function for aggregate in plan.aggregates]
        self.entries: deque[_Entry] = deque()
        self.groups: dict[Hashable, tuple[tuple[Any, ...], deque[_Entry]]] = {}

    def add(
        self,
        keys: tuple[Any, ...],
        group_id: Hashable,
        inputs: list[Any],
        ts: float,
        clock_ms: int,
    ) -> list[Output]:
        stats, size = self.runner.stats, self.spec.size_ms
        entry = _Entry(ts, group_id, inputs)
        if entry.ts_ms <= clock_ms - size:
            stats.late_rows += 1
            return []
        if group_id not in self.groups and len(self.groups) >= self.runner.max_groups:
            stats.dropped_groups += 1
            return []
        self._append(keys, entry)
        if len(self.entries) > self.runner.max_window_rows:
            self._drop_oldest()
            stats.dropped_rows += 1
        _, rows = self.groups[group_id]
        states = [function.initial for function in self.functions]
        low = entry.ts_ms - size
        for kept in rows:
            if low < kept.ts_ms <= entry.ts_ms:
                for i, function in enumerate(self.functions):
                    states[i] = function.add(states[i], kept.inputs[i])
        results = tuple(f.result(s) for f, s in zip(self.functions, states, strict=True))
        row = self.runner._group_output(keys, results, ts - self.spec.size_s, ts)
        return [] if row is None else [row]

    def close(self, clock_ms: int) -> list[Output]:
        cutoff = clock_ms - self.spec.size_ms
        while self.entries and self.entries[0].ts_ms <= cutoff:
            self._drop_oldest()
        return []

    def _append(self, keys: tuple[Any, ...], entry: _Entry) -> None:
        group = self.groups.get(entry.group_id)
        if group is None:
            group = self.groups[entry.group_id] = (keys, deque())
        group[1].append(entry)
        self.entries.append(entry)

    def _drop_oldest(self) -> None:
        entry = self.entries.popleft()
        _, rows = self.groups[entry.group_id]
        rows.popleft()
        if not rows:
            del self.groups[entry.group_id]

    def dump(self) -> dict[str, Any]:
        return {
            "rows": [[e.ts, list(self.groups[e.group_id][0]), list(e.inputs)] for e in self.entries]
        }

    def load(self, snapshot: Mapping[str, Any]) -> None:
        rows = snapshot.get("rows")
        if not isinstance(rows, list):
            raise SnapshotError("the snapshot's rows are not a list")
        if len(rows) > self.runner.max_window_rows:
            raise SnapshotError(
                f"the snapshot keeps {len(rows)} rows; max_window_rows is "
                f"{self.runner.max_window_rows}"
            )
        plan = self.runner.plan
        for row in rows:
            if not (isinstance(row, list) and len(row) == 3 and _is_time(row[0])):
                raise SnapshotError(f"not a kept row: {row!r:.80}")
            ts, keys, inputs = row
            if not isinstance(inputs, list) or len(inputs) != len(plan.aggregates):
                raise SnapshotError(f"not a kept row's aggregate arguments: {inputs!r:.80}")
            keys, group_id = _group_key(_load_keys(keys, plan))
            if group_id not in self.groups and len(self.groups) >= self.runner.max_groups:
                raise SnapshotError(
                    f"the snapshot holds more than max_groups ({self.runner.max_groups}) groups"
                )
            self._append(keys, _Entry(ts, group_id, inputs))


# -- checks -----------------------------------------------------------------------------------


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_time(value: object) -> bool:
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and abs(value) <= MAX_TIME_S
    )


def _check_time(value: float, name: str) -> float:
    if not _is_time(value):
        raise ValueError(f"{name} must be a finite number of seconds within ±{MAX_TIME_S:g}")
    return float(value)


def _load_stats(stats: object) -> RuleStats:
    names = [field.name for field in fields(RuleStats)]
    if not isinstance(stats, Mapping) or sorted(stats) != sorted(names):
        raise SnapshotError(f"the snapshot's stats are not {names}")
    if not all(_is_int(stats[name]) and stats[name] >= 0 for name in names):
        raise SnapshotError(f"the snapshot's stats are not counts: {dict(stats)!r:.120}")
    return RuleStats(**{name: stats[name] for name in names})


def _load_keys(keys: object, plan: RulePlan) -> tuple[Any, ...]:
    if not isinstance(keys, list) or len(keys) != len(plan.group_keys):
        raise SnapshotError(f"not the group keys of this rule: {keys!r:.80}")
    return tuple(keys)


def _load_group(
    group: object, plan: RulePlan, functions: list[Any]
) -> tuple[tuple[Any, ...], list[Any]]:
    if not (isinstance(group, list) and len(group) == 2 and isinstance(group[1], list)):
        raise SnapshotError(f"not a group: {group!r:.80}")
    keys, states = _load_keys(group[0], plan), group[1]
    if len(states) != len(functions) or not all(
        function.valid(state) for function, state in zip(functions, states, strict=True)
    ):
        raise SnapshotError(f"not the aggregate states of this rule: {states!r:.80}")
    return keys, list(states)
