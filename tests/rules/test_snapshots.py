"""Snapshots (`RuleRunner.snapshot` / `RuleRunner.restore`).

Invariant, checked for random rules' inputs below: for any sequence of rows and clock readings
fed to a rule, stopping after any of them, writing the runner's snapshot out as JSON text and
restoring a new runner from that text produces exactly the output rows, statistics and final
state that the uninterrupted runner produces from that point on."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airlane.core.errors import AirlaneError
from airlane.rules import RuleRunner, SnapshotError, compile_rule

RULES = [
    "SELECT k, v * 2 AS double FROM s WHERE v > 0",
    "SELECT k, count(*) AS n, sum(v) AS total, avg(v) AS mean, min(v) AS low, max(v) AS high, "
    "first(v) AS first_v, last(v) AS last_v FROM s GROUP BY k, TUMBLINGWINDOW(ss, 3)",
    "SELECT count(v) AS n, max(v) AS high FROM s GROUP BY HOPPINGWINDOW(ms, 3000, 1000) "
    "HAVING count(*) > 1",
    "SELECT k, count(*) AS n, avg(v) AS mean FROM s WHERE v IS NOT NULL "
    "GROUP BY k, SLIDINGWINDOW(ss, 4) HAVING n > 0",
    "SELECT count(*) AS n, first(v) AS f, min(v) AS low FROM s GROUP BY SLIDINGWINDOW(ss, 5)",
    "SELECT CAST(k AS string) AS key, sum(v) AS total, last(k) AS last_k FROM s "
    "GROUP BY CAST(k AS string), HOPPINGWINDOW(ss, 2, 1)",
]

values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-5, 5),
    st.floats(-100, 100, allow_nan=False, width=32),
    st.sampled_from(["a", "b", ""]),
)
keys = st.sampled_from([None, 1, 1.0, True, "a", "b", [1], {"x": 1}])
steps = st.one_of(
    st.tuples(
        st.just("row"),
        st.floats(-0.2, 1.0, allow_nan=False),  # the clock moves by this (back, sometimes)
        st.one_of(st.none(), st.floats(-4, 0.5, allow_nan=False)),  # ts, relative to now
        keys,
        values,
    ),
    st.tuples(st.just("timer"), st.floats(0, 4, allow_nan=False), st.none(), st.none(), st.none()),
)


def run(runner: RuleRunner, script: list[tuple[Any, ...]], now: float) -> tuple[list, float]:
    output: list[dict[str, Any]] = []
    for kind, delta, ts, key, value in script:
        now += delta
        if kind == "timer":
            timer = runner.get_timer()
            output += runner.handle_timer(now if timer is None else max(now, timer))
        else:
            at = None if ts is None else now + ts
            output += runner.feed({"k": key, "v": value}, now, ts=at, topic="t/1", qos=1)
    return output, now


def through_json(runner: RuleRunner) -> dict[str, Any]:
    return json.loads(json.dumps(runner.snapshot(), allow_nan=False))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    rule=st.sampled_from(RULES),
    script=st.lists(steps, min_size=1, max_size=40),
    cut=st.integers(0, 40),
    bounds=st.sampled_from([(2, 3), (10_000, 100_000)]),
)
def test_a_restored_runner_carries_on_as_if_never_stopped(rule, script, cut, bounds):
    plan = compile_rule(rule)
    max_groups, max_window_rows = bounds
    limits = {"max_groups": max_groups, "max_window_rows": max_window_rows}
    cut = min(cut, len(script))

    whole = RuleRunner(plan, **limits)
    expected, _ = run(whole, script, 1000.0)

    first = RuleRunner(plan, **limits)
    before, now = run(first, script[:cut], 1000.0)
    second = RuleRunner.restore(plan, through_json(first), **limits)
    after, _ = run(second, script[cut:], now)

    assert before + after == expected
    assert second.stats == whole.stats
    assert through_json(second) == through_json(whole)
    assert second.get_timer() == whole.get_timer()


def test_restoring_mid_window():
    plan = compile_rule(
        "SELECT deviceId, avg(vibration) AS avg_v, count(*) AS n FROM sensors "
        "GROUP BY deviceId, TUMBLINGWINDOW(ss, 10) HAVING avg(vibration) > 3.5"
    )
    runner = RuleRunner(plan)
    runner.feed({"deviceId": "a", "vibration": 4}, 1.0)
    runner.feed({"deviceId": "b", "vibration": 9}, 2.0)
    snapshot = json.loads(json.dumps(runner.snapshot()))
    assert snapshot == {
        "format": "airlane.rules/1",
        "sql": plan.sql,
        "clock": 2.0,
        "stats": {
            "rows_in": 2,
            "rows_filtered": 0,
            "rows_out": 0,
            "late_rows": 0,
            "dropped_groups": 0,
            "dropped_rows": 0,
        },
        # one open window, from 0 ms, its groups: keys, then avg's [sum, count] and count's n
        "windows": [[0, [[["a"], [[4, 1], 1]], [["b"], [[9, 1], 1]]]]],
    }
    restored = RuleRunner.restore(plan, snapshot)
    assert restored.get_timer() == 10.0
    restored.feed({"deviceId": "a", "vibration": 2}, 3.0)
    assert restored.handle_timer(10.0) == [
        {"deviceId": "b", "avg_v": 9.0, "n": 1, "window_start": 0.0, "window_end": 10.0}
    ]
    assert restored.stats.rows_in == 3


def test_a_fresh_runner_round_trips():
    plan = compile_rule("SELECT count(*) AS n FROM s GROUP BY SLIDINGWINDOW(ss, 1)")
    restored = RuleRunner.restore(plan, RuleRunner(plan).snapshot())
    assert restored.snapshot() == {
        "format": "airlane.rules/1",
        "sql": plan.sql,
        "clock": None,
        "stats": dict.fromkeys(
            ["rows_in", "rows_filtered", "rows_out", "late_rows", "dropped_groups", "dropped_rows"],
            0,
        ),
        "rows": [],
    }


TUMBLING = "SELECT k, avg(v) AS a FROM s GROUP BY k, TUMBLINGWINDOW(ss, 10)"
SLIDING = "SELECT k, count(*) AS n FROM s GROUP BY k, SLIDINGWINDOW(ss, 10)"


def snapshot_of(sql: str, rows: int = 2) -> dict[str, Any]:
    runner = RuleRunner(compile_rule(sql))
    for i in range(rows):
        runner.feed({"k": f"k{i}", "v": i}, 1.0)
    return through_json(runner)


@pytest.mark.parametrize(
    ("sql", "change", "message"),
    [
        (TUMBLING, lambda s: s.update(format="other/1"), "not a rule snapshot"),
        (TUMBLING, lambda s: s.update(sql="SELECT 1 FROM s"), "taken of another rule"),
        (TUMBLING, lambda s: s.update(clock="soon"), "clock is not a time"),
        (TUMBLING, lambda s: s.update(clock=float("inf")), "clock is not a time"),
        (TUMBLING, lambda s: s["stats"].pop("rows_in"), "stats are not"),
        (TUMBLING, lambda s: s["stats"].update(rows_in=-1), "stats are not counts"),
        (TUMBLING, lambda s: s.update(windows={}), "windows are not a list"),
        (TUMBLING, lambda s: s.update(windows=[[1234, []]]), "not the start of a window"),
        (TUMBLING, lambda s: s.update(windows=[[0, []], [0, []]]), "not the start of a window"),
        (TUMBLING, lambda s: s["windows"][0][1][0].__setitem__(1, [[1, 2, 3]]), "states"),
        (TUMBLING, lambda s: s["windows"][0][1][0].__setitem__(1, ["x"]), "states"),
        (TUMBLING, lambda s: s["windows"][0][1][0].__setitem__(0, []), "group keys"),
        (TUMBLING, lambda s: s["windows"][0][1].append(s["windows"][0][1][0]), "twice"),
        (SLIDING, lambda s: s.update(rows=None), "rows are not a list"),
        (SLIDING, lambda s: s["rows"].append([1.0, ["x"]]), "not a kept row"),
        (SLIDING, lambda s: s["rows"].append([1.0, ["x"], []]), "aggregate arguments"),
    ],
)
def test_a_bad_snapshot_is_refused(sql, change, message):
    snapshot = snapshot_of(sql)
    change(snapshot)
    with pytest.raises(SnapshotError, match=message) as caught:
        RuleRunner.restore(compile_rule(sql), snapshot)
    assert isinstance(caught.value, AirlaneError) and isinstance(caught.value, ValueError)


def test_a_snapshot_larger_than_the_bounds_is_refused():
    with pytest.raises(SnapshotError, match="a window holds 3 groups; max_groups is 2"):
        RuleRunner.restore(compile_rule(TUMBLING), snapshot_of(TUMBLING, 3), max_groups=2)
    with pytest.raises(SnapshotError, match="keeps 3 rows; max_window_rows is 2"):
        RuleRunner.restore(compile_rule(SLIDING), snapshot_of(SLIDING, 3), max_window_rows=2)
    with pytest.raises(SnapshotError, match="more than max_groups"):
        RuleRunner.restore(compile_rule(SLIDING), snapshot_of(SLIDING, 3), max_groups=2)
