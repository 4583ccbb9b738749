"""Compiling rules (`airlane.rules.plan`): what a rule may say, and what `RuleError` says when
it says something else."""

from __future__ import annotations

import pytest

from airlane.core.errors import BadRequest, ErrorCode
from airlane.rules import (
    MAX_GROUP_KEYS,
    MAX_PROJECTIONS,
    MAX_SQL_CHARS,
    RuleError,
    SourceKind,
    WindowKind,
    WindowSpec,
    compile_rule,
)
from airlane.rules.syntax import MAX_DEPTH

EXAMPLE = (
    "SELECT deviceId, avg(vibration) AS avg_v, count(*) AS n FROM sensors WHERE vibration > 0 "
    "GROUP BY deviceId, TUMBLINGWINDOW(ss, 10) HAVING avg(vibration) > 3.5"
)


def test_the_product_brief_example():
    plan = compile_rule(EXAMPLE)
    assert plan.sql == EXAMPLE
    assert (plan.source.text, plan.source.kind) == ("sensors", SourceKind.NAMED)
    assert [p.name for p in plan.projections] == ["deviceId", "avg_v", "n"]
    assert plan.where is not None and plan.where.sql == "vibration > 0"
    assert [key.sql for key in plan.group_keys] == ["deviceId"]
    assert plan.window == WindowSpec(WindowKind.TUMBLING, 10_000, 10_000)
    assert plan.having is not None and plan.having.sql == "AVG(vibration) > 3.5"
    # avg(vibration) in SELECT and in HAVING is one accumulator.
    assert [a.sql for a in plan.aggregates] == ["AVG(vibration)", "COUNT(*)"]
    assert plan.aggregating


@pytest.mark.parametrize(
    ("source", "text", "kind"),
    [
        ("sensors", "sensors", SourceKind.NAMED),
        ('"sensor/+/vibration"', "sensor/+/vibration", SourceKind.TOPIC_FILTER),
        ("'sensor/#'", "sensor/#", SourceKind.TOPIC_FILTER),
        ('"plant 1"', "plant 1", SourceKind.TOPIC_FILTER),
    ],
)
def test_from_names_a_source_or_a_quoted_topic_filter(source, text, kind):
    plan = compile_rule(f"SELECT * FROM {source}")
    assert (plan.source.text, plan.source.kind) == (text, kind)
    assert not plan.aggregating and plan.window is None


@pytest.mark.parametrize(
    ("window", "spec"),
    [
        ("TUMBLINGWINDOW(ss, 10)", WindowSpec(WindowKind.TUMBLING, 10_000, 10_000)),
        ("tumblingwindow(MS, 500)", WindowSpec(WindowKind.TUMBLING, 500, 500)),
        ("HOPPINGWINDOW(mi, 1, 1)", WindowSpec(WindowKind.HOPPING, 60_000, 60_000)),
        ("HOPPINGWINDOW(ss, 10, 5)", WindowSpec(WindowKind.HOPPING, 10_000, 5_000)),
        ("SLIDINGWINDOW(hh, 2)", WindowSpec(WindowKind.SLIDING, 7_200_000, 7_200_000)),
        ("SLIDINGWINDOW('ss', 3)", WindowSpec(WindowKind.SLIDING, 3_000, 3_000)),
        ("TUMBLINGWINDOW(hh, 168)", WindowSpec(WindowKind.TUMBLING, 604_800_000, 604_800_000)),
    ],
)
def test_windows_and_their_units(window, spec):
    assert compile_rule(f"SELECT count(*) AS n FROM s GROUP BY {window}").window == spec


def test_output_names():
    plan = compile_rule(
        "SELECT a, a.b.c, payload['k'], a + 1, a + 2 AS two, * FROM s WHERE topic_level(1) = 'x'"
    )
    names = [p.name for p in plan.projections]
    assert names == ["a", "a.b.c", "payload['k']", "a + 1", "two", "*"]
    assert plan.projections[-1].star


def test_a_grouping_rule_may_use_keys_aggregates_window_columns_and_aliases():
    plan = compile_rule(
        "SELECT upper(deviceId) AS device, max(v) - min(v) AS spread, window_end - window_start "
        "AS span, window_start FROM s GROUP BY deviceId, SLIDINGWINDOW(ss, 5) "
        "HAVING spread > 1 AND count(*) >= 2"
    )
    assert [p.name for p in plan.projections] == ["device", "spread", "span", "window_start"]
    assert [a.sql for a in plan.aggregates] == ["MAX(v)", "MIN(v)", "COUNT(*)"]


def test_group_keys_may_be_expressions_and_metadata():
    plan = compile_rule(
        "SELECT topic_level(2) AS device, qos, avg(v) AS a FROM 'sensor/+/v' "
        "GROUP BY topic_level(2), qos, TUMBLINGWINDOW(ss, 1)"
    )
    assert [key.sql for key in plan.group_keys] == ["TOPIC_LEVEL(2)", "qos"]


def test_a_rule_error_is_a_bad_request_about_the_sql():
    with pytest.raises(RuleError) as caught:
        compile_rule("SELECT a FROM")
    assert isinstance(caught.value, ValueError)
    assert isinstance(caught.value, BadRequest)
    assert caught.value.code is ErrorCode.INVALID_REQUEST
    assert caught.value.param == "sql"
    assert (caught.value.line, caught.value.column) == (1, 13)
    assert str(caught.value) == (
        "syntax error at line 1, column 13 near 'FROM': "
        "Expected table name but got the end of the rule"
    )


REFUSED = [
    # syntax, statements, clauses
    ("", "the rule is empty"),
    ("SELECT a FROM s WHERE a = = 1", "syntax error at line 1, column 27 near '='"),
    ("SELECT 'abc FROM s", "syntax error: Error tokenizing"),
    ("SELECT a FROM s; SELECT b FROM s", "a rule is one SELECT statement"),
    ("INSERT INTO t VALUES (1)", "a rule is a SELECT statement, not INSERT"),
    ("DELETE FROM s", "a rule is a SELECT statement, not DELETE"),
    ("SELECT a FROM s UNION SELECT a FROM t", "UNION is not supported"),
    ("SELECT a FROM s JOIN t ON s.a = t.a", "JOIN (a rule reads one source) is not supported"),
    ("SELECT a FROM s, t", "JOIN (a rule reads one source) is not supported"),
    ("SELECT a FROM (SELECT a FROM s)", "subqueries are not supported"),
    ("SELECT a FROM s WHERE a IN (SELECT b FROM t)", "subqueries are not supported"),
    ("SELECT a FROM s WHERE EXISTS (SELECT 1)", "subqueries are not supported"),
    ("WITH x AS (SELECT 1) SELECT * FROM x", "WITH is not supported"),
    ("SELECT a FROM s ORDER BY a", "ORDER BY is not supported"),
    ("SELECT a FROM s LIMIT 3", "LIMIT is not supported"),
    ("SELECT DISTINCT a FROM s", "SELECT DISTINCT is not supported"),
    ("SELECT 1", "a rule needs FROM"),
    ("SELECT a FROM s AS x", "FROM takes one source"),
    ("SELECT a FROM db.s", "FROM takes one source"),
    # functions and expressions
    ("SELECT foo(a) FROM s", "unknown function foo() in SELECT"),
    ("SELECT substr(a, 1) FROM s", "unknown function SUBSTRING() in SELECT"),
    ("SELECT a FROM s WHERE bar(a) > 1", "unknown function bar() in WHERE"),
    ("SELECT a ^ 2 FROM s", "'a ^ 2' is not supported in SELECT"),
    ("SELECT abs(a, b) FROM s", "The number of provided arguments (2) is greater than"),
    ("SELECT topic_level() FROM s", "topic_level() takes 1 argument(s), not 0"),
    ("SELECT topic_level(1, 2) FROM s", "topic_level() takes 1 argument(s), not 2"),
    ("SELECT CAST(a AS date) FROM s", "CAST converts to int, float, string or bool, not DATE"),
    ("SELECT a FROM s WHERE a IS 3", "IS takes NULL, TRUE or FALSE"),
    ("SELECT a.* FROM s", "only whole fields can be selected by path"),
    ("SELECT 1e999 FROM s", "the number 1e999 is out of range"),
    ("SELECT a, a FROM s", "two SELECT expressions are named 'a'"),
    # aggregates
    ("SELECT a FROM s WHERE avg(a) > 1", "aggregate AVG(a) is not allowed in WHERE"),
    (
        "SELECT count(*) FROM s GROUP BY max(a), TUMBLINGWINDOW(ss, 1)",
        "aggregate MAX(a) is not allowed in GROUP BY",
    ),
    (
        "SELECT avg(avg(x)) FROM s GROUP BY TUMBLINGWINDOW(ss, 1)",
        "aggregate AVG(x) is not allowed in the argument of AVG(AVG(x)) (aggregates cannot be",
    ),
    (
        "SELECT count(DISTINCT x) FROM s GROUP BY TUMBLINGWINDOW(ss, 1)",
        "DISTINCT inside an aggregate is not supported",
    ),
    ("SELECT count() FROM s GROUP BY TUMBLINGWINDOW(ss, 1)", "count() needs an argument"),
    ("SELECT max(a, b) FROM s GROUP BY TUMBLINGWINDOW(ss, 1)", "max() takes 1 argument(s)"),
    ("SELECT sum(*) FROM s GROUP BY TUMBLINGWINDOW(ss, 1)", "sum(*) is not valid; name a column"),
    (
        "SELECT deviceId, vibration, avg(x) FROM s GROUP BY deviceId, TUMBLINGWINDOW(ss, 10)",
        "column vibration in SELECT is neither in GROUP BY nor inside an aggregate",
    ),
    (
        "SELECT avg(x) AS a FROM s GROUP BY TUMBLINGWINDOW(ss, 10) HAVING y > 1",
        "column y in HAVING is neither in GROUP BY nor inside an aggregate",
    ),
    (
        "SELECT topic_level(2), count(*) FROM s GROUP BY TUMBLINGWINDOW(ss, 1)",
        "TOPIC_LEVEL(2) in SELECT reads a row: put it in GROUP BY or inside an aggregate",
    ),
    ("SELECT * FROM s GROUP BY TUMBLINGWINDOW(ss, 1)", "SELECT * cannot be used in a rule that"),
    (
        "SELECT avg(x) AS window_end FROM s GROUP BY TUMBLINGWINDOW(ss, 1)",
        "the output name 'window_end' is the window's",
    ),
    # no window
    ("SELECT avg(x) FROM s", "a rule that aggregates or groups needs a window"),
    ("SELECT a FROM s GROUP BY a", "a rule that aggregates or groups needs a window"),
    ("SELECT a FROM s HAVING a > 1", "a rule that aggregates or groups needs a window"),
    # windows
    ("SELECT count(*) FROM s GROUP BY TUMBLINGWINDOW(yy, 10)", "unknown window unit 'yy'"),
    ("SELECT count(*) FROM s GROUP BY TUMBLINGWINDOW(ss, 0)", "size must be a positive whole"),
    ("SELECT count(*) FROM s GROUP BY TUMBLINGWINDOW(ss, -1)", "size must be a positive whole"),
    ("SELECT count(*) FROM s GROUP BY TUMBLINGWINDOW(ss, 1.5)", "size must be a positive whole"),
    ("SELECT count(*) FROM s GROUP BY TUMBLINGWINDOW(ss, x)", "size must be a positive whole"),
    ("SELECT count(*) FROM s GROUP BY TUMBLINGWINDOW(ss)", "TUMBLINGWINDOW takes (unit, size)"),
    ("SELECT count(*) FROM s GROUP BY HOPPINGWINDOW(ss, 10)", "takes (unit, size, hop)"),
    ("SELECT count(*) FROM s GROUP BY HOPPINGWINDOW(ss, 5, 10)", "the hop may not exceed"),
    ("SELECT count(*) FROM s GROUP BY HOPPINGWINDOW(ss, 101, 1)", "size / hop is at most 100"),
    ("SELECT count(*) FROM s GROUP BY TUMBLINGWINDOW(hh, 169)", "a window lasts at most a week"),
    ("SELECT count(*) FROM s GROUP BY SESSIONWINDOW(ss, 1, 2)", "SESSIONWINDOW is not supported"),
    (
        "SELECT count(*) FROM s GROUP BY TUMBLINGWINDOW(ss, 10), SLIDINGWINDOW(ss, 5)",
        "a rule has one window; this one has 2",
    ),
    ("SELECT TUMBLINGWINDOW(ss, 10) FROM s", "belongs in GROUP BY, alone"),
    (
        "SELECT count(*) FROM s WHERE TUMBLINGWINDOW(ss, 1) GROUP BY TUMBLINGWINDOW(ss, 1)",
        "belongs in GROUP BY, alone",
    ),
    ("SELECT count(*) FROM s GROUP BY 1, TUMBLINGWINDOW(ss, 1)", "GROUP BY 1: group by an"),
]


@pytest.mark.parametrize(("sql", "message"), REFUSED, ids=[sql[:50] for sql, _ in REFUSED])
def test_refused_rules_say_what_is_wrong(sql, message):
    with pytest.raises(RuleError) as caught:
        compile_rule(sql)
    assert message in str(caught.value)


def test_limits():
    with pytest.raises(RuleError, match="10001 characters long; the limit is 10000"):
        compile_rule("SELECT a FROM s WHERE " + "x" * (MAX_SQL_CHARS - 21))
    columns = ", ".join(f"c{i}" for i in range(MAX_PROJECTIONS))
    assert len(compile_rule(f"SELECT {columns} FROM s").projections) == MAX_PROJECTIONS
    with pytest.raises(RuleError, match="SELECT has 65 expressions; the limit is 64"):
        compile_rule(f"SELECT {columns}, extra FROM s")
    keys = ", ".join(f"k{i}" for i in range(MAX_GROUP_KEYS))
    compile_rule(f"SELECT count(*) AS n FROM s GROUP BY {keys}, TUMBLINGWINDOW(ss, 1)")
    with pytest.raises(RuleError, match="GROUP BY has 17 expressions; the limit is 16"):
        compile_rule(f"SELECT count(*) AS n FROM s GROUP BY {keys}, k, TUMBLINGWINDOW(ss, 1)")


def test_deep_nesting_is_refused_not_a_crash():
    chain = " + ".join(["a"] * MAX_DEPTH)
    with pytest.raises(RuleError, match="more than 64 levels deep"):
        compile_rule(f"SELECT {chain} FROM s")
    compile_rule(f"SELECT {' + '.join(['a'] * 30)} FROM s")
    parens = "(" * 200 + "a" + ")" * 200
    with pytest.raises(RuleError, match="too deeply for the parser"):
        compile_rule(f"SELECT {parens} FROM s")
    with pytest.raises(RuleError, match="too deeply"):
        compile_rule("SELECT " + "NOT " * 2000 + "a FROM s")


def test_a_rule_is_text():
    with pytest.raises(TypeError):
        compile_rule(b"SELECT a FROM s")  # type: ignore[arg-type]
