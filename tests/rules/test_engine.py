"""Running rules (`airlane.rules.engine`) on a fake clock: the time is whatever the test says,
so every window opens and closes where the test puts it."""

from __future__ import annotations

import pytest

from airlane.rules import RuleRunner, RuleStats, compile_rule


def runner(sql: str, **bounds: int) -> RuleRunner:
    return RuleRunner(compile_rule(sql), **bounds)


def test_a_mapping_rule_gives_each_kept_row_at_once():
    rule = runner(
        "SELECT deviceId AS id, v * 2 AS double, topic_level(2) AS site FROM 'plant/+/v' "
        "WHERE v > 1"
    )
    assert rule.feed({"deviceId": "a", "v": 2}, 1.0, topic="plant/north/v") == [
        {"id": "a", "double": 4, "site": "north"}
    ]
    assert rule.feed({"deviceId": "a", "v": 1}, 2.0) == []
    assert rule.feed({"deviceId": "a"}, 3.0) == []  # v missing: WHERE is NULL
    assert rule.get_timer() is None
    assert rule.handle_timer(100.0) == []
    assert rule.stats == RuleStats(rows_in=3, rows_filtered=2, rows_out=1)


def test_select_star_gives_the_payload_fields():
    rule = runner("SELECT *, topic AS t FROM s")
    payload = {"a": 1, "b": {"c": 2}}
    assert rule.feed(payload, 1.0, topic="x/y") == [{"a": 1, "b": {"c": 2}, "t": "x/y"}]


EXAMPLE = (
    "SELECT deviceId, avg(vibration) AS avg_v, count(*) AS n FROM sensors WHERE vibration > 0 "
    "GROUP BY deviceId, TUMBLINGWINDOW(ss, 10) HAVING avg(vibration) > 3.5"
)


def test_tumbling_windows_close_at_their_end_and_having_filters():
    rule = runner(EXAMPLE)
    assert rule.get_timer() is None
    assert rule.feed({"deviceId": "a", "vibration": 4}, 1.0) == []
    assert rule.feed({"deviceId": "b", "vibration": 1}, 2.0) == []
    assert rule.feed({"deviceId": "a", "vibration": 0}, 3.0) == []  # WHERE drops it
    assert rule.get_timer() == 10.0
    assert rule.handle_timer(9.999) == []
    assert rule.handle_timer(10.0) == [
        # b's average, 1, is not above 3.5
        {"deviceId": "a", "avg_v": 4.0, "n": 1, "window_start": 0.0, "window_end": 10.0}
    ]
    assert rule.get_timer() is None
    assert rule.feed({"deviceId": "a", "vibration": 5}, 11.0) == []
    assert rule.feed({"deviceId": "b", "vibration": 9}, 12.0) == []
    assert rule.feed({"deviceId": "a", "vibration": 1}, 12.5) == []
    assert rule.get_timer() == 20.0
    assert rule.handle_timer(25.0) == [
        {"deviceId": "b", "avg_v": 9.0, "n": 1, "window_start": 10.0, "window_end": 20.0}
    ]
    assert rule.stats == RuleStats(rows_in=6, rows_filtered=1, rows_out=2)


def test_rows_at_1_2_11_12_make_two_windows():
    rule = runner("SELECT count(*) AS n, sum(v) AS total FROM s GROUP BY TUMBLINGWINDOW(ss, 10)")
    output = []
    for ts in (1, 2, 11, 12):
        output += rule.feed({"v": ts}, float(ts))
    # Without a timer call, the row at 11 closes the first window before it is added.
    assert output == [{"n": 2, "total": 3, "window_start": 0.0, "window_end": 10.0}]
    assert rule.handle_timer(20.0) == [
        {"n": 2, "total": 23, "window_start": 10.0, "window_end": 20.0}
    ]


def test_a_window_that_saw_no_row_gives_nothing():
    rule = runner("SELECT count(*) AS n FROM s GROUP BY TUMBLINGWINDOW(ss, 1)")
    assert rule.handle_timer(5.0) == []
    rule.feed({}, 5.5)
    assert rule.handle_timer(100.0) == [{"n": 1, "window_start": 5.0, "window_end": 6.0}]


def test_groups_come_out_in_order_of_first_arrival():
    rule = runner("SELECT k, count(*) AS n FROM s GROUP BY k, TUMBLINGWINDOW(ms, 100)")
    for k in ("z", "a", "z", "m"):
        rule.feed({"k": k}, 0.01)
    assert [(row["k"], row["n"]) for row in rule.handle_timer(0.1)] == [
        ("z", 2),
        ("a", 1),
        ("m", 1),
    ]


def test_group_keys_of_every_kind():
    rule = runner("SELECT k, count(*) AS n FROM s GROUP BY k, TUMBLINGWINDOW(ss, 1)")
    for k in (1, 1.0, True, "1", None, {"b": 1, "a": 2}, {"a": 2, "b": 1}, [1], None):
        rule.feed({"k": k}, 0.5)
    assert [(row["k"], row["n"]) for row in rule.handle_timer(1.0)] == [
        (1, 2),  # 1 and 1.0 are one group
        (True, 1),
        ("1", 1),
        (None, 2),
        ({"b": 1, "a": 2}, 2),  # objects by content, whatever the order of their keys
        ([1], 1),
    ]


def test_aggregates():
    rule = runner(
        "SELECT count(*) AS rows, count(v) AS values, sum(v) AS total, avg(v) AS mean, "
        "min(v) AS low, max(v) AS high, first(v) AS first_v, last(v) AS last_v, "
        "min(name) AS first_name, sum(nothing) AS none "
        "FROM s GROUP BY TUMBLINGWINDOW(ss, 10)"
    )
    for payload in ({"v": 3, "name": "b"}, {"v": None}, {"v": "x", "name": "a"}, {"v": 1.5}):
        rule.feed(payload, 1.0)
    (row,) = rule.handle_timer(10.0)
    assert row == {
        "rows": 4,
        "values": 3,  # "x" is a value; NULL is not
        "total": 4.5,  # "x" is not a number
        "mean": 2.25,
        "low": 1.5,
        "high": 3,
        "first_v": 3,
        "last_v": 1.5,
        "first_name": "a",
        "none": None,
        "window_start": 0.0,
        "window_end": 10.0,
    }


def test_expressions_over_groups_and_having_by_alias():
    rule = runner(
        "SELECT upper(k) AS device, max(v) - min(v) AS spread, "
        "window_end - window_start AS span FROM s GROUP BY k, TUMBLINGWINDOW(ss, 10) "
        "HAVING spread >= 2 AND count(*) > 1"
    )
    for k, v in (("a", 1), ("a", 3), ("b", 1), ("b", 1.5), ("c", 9)):
        rule.feed({"k": k, "v": v}, 1.0)
    assert rule.handle_timer(10.0) == [
        {"device": "A", "spread": 2, "span": 10.0, "window_start": 0.0, "window_end": 10.0}
    ]


def test_hopping_windows_overlap():
    rule = runner("SELECT count(*) AS n FROM s GROUP BY HOPPINGWINDOW(ss, 10, 5)")
    rule.feed({}, 1.0)  # in [-5, 5) and [0, 10)
    assert rule.get_timer() == 5.0
    assert rule.handle_timer(5.0) == [{"n": 1, "window_start": -5.0, "window_end": 5.0}]
    rule.feed({}, 6.0)  # in [0, 10) and [5, 15)
    assert rule.feed({}, 12.0) == [  # in [5, 15) and [10, 20); [0, 10) closed first
        {"n": 2, "window_start": 0.0, "window_end": 10.0}
    ]
    assert rule.handle_timer(30.0) == [
        {"n": 2, "window_start": 5.0, "window_end": 15.0},
        {"n": 1, "window_start": 10.0, "window_end": 20.0},
    ]


def test_hopping_windows_with_a_hop_that_does_not_divide_the_size():
    rule = runner("SELECT count(*) AS n FROM s GROUP BY HOPPINGWINDOW(ms, 10, 4)")
    rule.feed({}, 0.009)  # 9 ms: in [0, 10), [4, 14), [8, 18)
    assert [(r["window_start"], r["window_end"]) for r in rule.handle_timer(1.0)] == [
        (0.0, 0.01),
        (0.004, 0.014),
        (0.008, 0.018),
    ]


def test_sliding_windows_emit_per_row_over_the_last_size():
    rule = runner(
        "SELECT k, count(*) AS n, sum(v) AS total FROM s "
        "GROUP BY k, SLIDINGWINDOW(ss, 10) HAVING sum(v) > 1"
    )
    assert rule.feed({"k": "a", "v": 1}, 1.0) == []  # HAVING: 1 is not above 1
    assert rule.feed({"k": "a", "v": 2}, 5.0) == [
        {"k": "a", "n": 2, "total": 3, "window_start": -5.0, "window_end": 5.0}
    ]
    assert rule.feed({"k": "b", "v": 7}, 6.0) == [
        {"k": "b", "n": 1, "total": 7, "window_start": -4.0, "window_end": 6.0}
    ]
    # At 11 the row of 1.0 is out of (1, 11]: exactly size old.
    assert rule.feed({"k": "a", "v": 4}, 11.0) == [
        {"k": "a", "n": 2, "total": 6, "window_start": 1.0, "window_end": 11.0}
    ]
    assert rule.get_timer() is None
    assert rule.handle_timer(100.0) == []
    assert rule.feed({"k": "a", "v": 5}, 100.5) == [
        {"k": "a", "n": 1, "total": 5, "window_start": 90.5, "window_end": 100.5}
    ]


def test_a_sliding_row_with_an_earlier_ts_counts_what_came_before_it():
    rule = runner("SELECT count(*) AS n FROM s GROUP BY SLIDINGWINDOW(ss, 10)")
    rule.feed({}, 5.0)
    rule.feed({}, 8.0)
    assert rule.feed({}, 9.0, ts=6.0) == [{"n": 2, "window_start": -4.0, "window_end": 6.0}]


def test_late_rows_are_dropped_and_counted():
    rule = runner("SELECT count(*) AS n FROM s GROUP BY TUMBLINGWINDOW(ss, 10)")
    rule.feed({}, 12.0, ts=8.0)  # its window closed at 10
    rule.feed({}, 12.0, ts=10.0)
    assert rule.stats.late_rows == 1
    rule.feed({}, 13.0, ts=50.0)  # from the future: taken as now
    assert rule.handle_timer(20.0) == [{"n": 2, "window_start": 10.0, "window_end": 20.0}]
    # A clock that goes back is taken as the latest: no window reopens.
    rule.feed({}, 15.0, ts=15.0)
    assert rule.stats.late_rows == 2
    rule.feed({}, 15.0)  # at 20, the latest now
    assert rule.get_timer() == 30.0

    sliding = runner("SELECT count(*) AS n FROM s GROUP BY SLIDINGWINDOW(ss, 10)")
    sliding.feed({}, 20.0)
    assert sliding.feed({}, 20.0, ts=10.0) == []
    assert sliding.stats.late_rows == 1
    assert sliding.feed({}, 20.0, ts=10.5) == [{"n": 1, "window_start": 0.5, "window_end": 10.5}]


def test_a_hopping_row_joins_the_windows_still_open():
    rule = runner("SELECT count(*) AS n FROM s GROUP BY HOPPINGWINDOW(ss, 10, 5)")
    rule.feed({}, 11.0)
    rule.feed({}, 11.0, ts=7.0)  # [0, 10) has closed; [5, 15) is open
    assert rule.stats.late_rows == 0
    assert rule.handle_timer(15.0) == [{"n": 2, "window_start": 5.0, "window_end": 15.0}]


def test_the_group_bound_drops_extra_groups_and_counts_them():
    rule = runner("SELECT k, count(*) AS n FROM s GROUP BY k, TUMBLINGWINDOW(ss, 10)", max_groups=2)
    for k in ("a", "b", "c", "a", "d", "b"):
        rule.feed({"k": k}, 1.0)
    assert rule.stats.dropped_groups == 2
    assert [(r["k"], r["n"]) for r in rule.handle_timer(10.0)] == [("a", 2), ("b", 2)]
    rule.feed({"k": "c"}, 11.0)  # a new window has room again
    assert [r["k"] for r in rule.handle_timer(20.0)] == ["c"]

    sliding = runner(
        "SELECT k, count(*) AS n FROM s GROUP BY k, SLIDINGWINDOW(ss, 10)", max_groups=1
    )
    assert sliding.feed({"k": "a"}, 1.0) == [
        {"k": "a", "n": 1, "window_start": -9.0, "window_end": 1.0}
    ]
    assert sliding.feed({"k": "b"}, 2.0) == []
    assert sliding.stats.dropped_groups == 1
    assert sliding.feed({"k": "b"}, 11.5) != []  # a's row has gone: room for b


def test_the_sliding_row_bound_drops_the_oldest():
    rule = runner(
        "SELECT k, count(*) AS n FROM s GROUP BY k, SLIDINGWINDOW(ss, 100)", max_window_rows=3
    )
    counts = [rule.feed({"k": k}, float(t))[0]["n"] for t, k in enumerate("aabab")]
    assert counts == [1, 2, 1, 2, 2]  # at 4: a's row of 0 and 1 are gone; a kept 3
    assert rule.stats.dropped_rows == 2
    assert len(rule.snapshot()["rows"]) == 3


def test_where_and_having_keep_only_true():
    rule = runner(
        "SELECT k, count(*) AS n FROM s WHERE flag GROUP BY k, TUMBLINGWINDOW(ss, 1) "
        "HAVING max(v) > 1"
    )
    rule.feed({"k": "a", "flag": 1, "v": 5}, 0.1)  # 1 is not a boolean
    rule.feed({"k": "b", "flag": True, "v": "x"}, 0.2)  # HAVING: NULL > 1
    rule.feed({"k": "c", "flag": True, "v": 2}, 0.3)
    assert [r["k"] for r in rule.handle_timer(1.0)] == ["c"]
    assert rule.stats.rows_filtered == 1


def test_window_columns_in_select_are_not_repeated():
    rule = runner(
        "SELECT window_start, count(*) AS n, window_end FROM s GROUP BY TUMBLINGWINDOW(ss, 1)"
    )
    rule.feed({}, 0.5)
    (row,) = rule.handle_timer(1.0)
    assert list(row) == ["window_start", "n", "window_end"]


def test_window_boundaries_are_exact_in_milliseconds():
    rule = runner("SELECT count(*) AS n FROM s GROUP BY TUMBLINGWINDOW(ms, 50)")
    rule.feed({}, 4.35)  # 4349.999... ms in binary, 4350 ms as written
    assert rule.get_timer() == 4.4
    assert rule.handle_timer(4.4) == [{"n": 1, "window_start": 4.35, "window_end": 4.4}]


def test_misuse_by_the_caller_raises():
    rule = runner("SELECT a FROM s")
    with pytest.raises(TypeError, match="a row is a mapping"):
        rule.feed([1, 2], 1.0)  # type: ignore[arg-type]
    for bad in (float("nan"), float("inf"), 1e13, True):
        with pytest.raises(ValueError, match="now must be a finite number"):
            rule.feed({}, bad)
    with pytest.raises(ValueError, match="ts must be a finite number"):
        rule.feed({}, 1.0, ts=float("nan"))
    with pytest.raises(ValueError, match="max_groups"):
        runner("SELECT a FROM s", max_groups=0)
    with pytest.raises(ValueError, match="max_window_rows"):
        runner("SELECT a FROM s", max_window_rows=0)
