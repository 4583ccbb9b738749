"""Expressions over a row (`airlane.rules.expressions`, `values`, `functions`): one table of
(expression, payload, value), NULL semantics first. Data never raises: what does not fit is
NULL."""

from __future__ import annotations

import math

import pytest

from airlane.rules import Row, RuleError, compile_expression

TOPIC = "sensor/pump-7/vibration"


def evaluate(text: str, payload: dict | None = None, **metadata):
    row = Row(payload or {}, metadata.get("topic", TOPIC), metadata.get("qos", 1), 12.5)
    return compile_expression(text).evaluate(row)


NULLS = [
    # a missing field, and paths through what is not an object
    ("missing", {}, None),
    ("a.b", {"a": 3}, None),
    ("a.b.c", {"a": {"b": 1}}, None),
    ("a[0]", {"a": "text"}, None),
    # arithmetic with NULL or the wrong kind
    ("a + 1", {}, None),
    ("a * 2", {"a": "x"}, None),
    ("'a' + 'b'", {}, None),
    ("a + 1", {"a": True}, None),
    ("-a", {"a": "x"}, None),
    ("a / 0", {"a": 1}, None),
    ("a % 0", {"a": 1}, None),
    ("1e308 * 10", {}, None),
    # comparisons across kinds or with NULL
    ("a > 1", {}, None),
    ("a > 1", {"a": "2"}, None),
    ("1 = '1'", {}, None),
    ("true = 1", {}, None),
    ("a = NULL", {"a": 1}, None),
    ("a <> 1", {}, None),
    ("a < b", {"a": [1], "b": [2]}, None),
    # three-valued logic
    ("NOT a", {}, None),
    ("NOT a", {"a": 1}, None),
    ("false AND NULL", {}, False),
    ("NULL AND false", {}, False),
    ("true AND NULL", {}, None),
    ("true OR NULL", {}, True),
    ("NULL OR true", {}, True),
    ("false OR NULL", {}, None),
    ("a AND true", {"a": 1}, None),
    # IN, BETWEEN, LIKE
    ("a IN (1, NULL)", {"a": 3}, None),
    ("a IN (1, NULL)", {"a": 1}, True),
    ("a IN (1, 2)", {}, None),
    ("a IN ('1', 1)", {"a": 1}, True),
    ("a NOT IN (1, 2)", {"a": 3}, True),
    ("a BETWEEN 1 AND b", {"a": 2}, None),
    ("a BETWEEN 3 AND b", {"a": 2}, False),
    ("a LIKE 'x%'", {"a": 3}, None),
    # IS NULL is never NULL
    ("a IS NULL", {}, True),
    ("a IS NULL", {"a": 0}, False),
    ("a IS NOT NULL", {"a": False}, True),
    ("a IS TRUE", {}, False),
    ("a IS NOT FALSE", {"a": None}, True),
    # functions
    ("abs(a)", {"a": "x"}, None),
    ("sqrt(-1)", {}, None),
    ("lower(3)", {}, None),
    ("length(3)", {}, None),
    ("concat('a', NULL)", {}, None),
    ("a || 'x'", {}, None),
    ("round(a, 'x')", {"a": 1.5}, None),
    ("topic_level(0)", {}, None),
    ("topic_level(4)", {}, None),
    ("topic_level('1')", {}, None),
    ("CASE WHEN a THEN 1 END", {"a": None}, None),
    ("CASE a WHEN 1 THEN 'one' END", {"a": 2}, None),
]

VALUES = [
    # columns and paths
    ("a", {"a": 1}, 1),
    ("a.b.c", {"a": {"b": {"c": "deep"}}}, "deep"),
    ("a.b.c.d.e", {"a": {"b": {"c": {"d": {"e": 5}}}}}, 5),
    ('"odd key"', {"odd key": 7}, 7),
    ("payload['odd key']", {"odd key": 7}, 7),
    ("payload.a", {"a": 1}, 1),
    ("payload", {"a": 1}, {"a": 1}),
    ("r[0]", {"r": [4, 5]}, 4),
    ("r[1]", {"r": [4, 5]}, 5),
    ("r[2]", {"r": [4, 5]}, None),
    ("r[-1]", {"r": [4, 5]}, None),
    ("a['b'][1]", {"a": {"b": [1, 2]}}, 2),
    ("A", {"a": 1, "A": 2}, 2),
    # metadata wins over the payload; the payload's field stays reachable
    ("topic", {"topic": "spoofed"}, TOPIC),
    ("payload.topic", {"topic": "spoofed"}, "spoofed"),
    ("qos", {}, 1),
    ("ts", {"ts": 99}, 12.5),
    ("topic_level(1)", {}, "sensor"),
    ("topic_level(2)", {}, "pump-7"),
    ("topic_level(3)", {}, "vibration"),
    ("topic_level(a)", {"a": 2}, "pump-7"),
    # literals and arithmetic
    ("1", {}, 1),
    ("1.5", {}, 1.5),
    ("1e3", {}, 1000.0),
    ("'it''s'", {}, "it's"),
    ("true", {}, True),
    ("NULL", {}, None),
    ("a + b", {"a": 1, "b": 2}, 3),
    ("a + b", {"a": 1, "b": 0.5}, 1.5),
    ("a - b * 2", {"a": 10, "b": 3}, 4),
    ("(a - b) * 2", {"a": 10, "b": 3}, 14),
    ("5 / 2", {}, 2.5),
    ("4 / 2", {}, 2.0),
    ("7 % 3", {}, 1),
    ("-7 % 3", {}, -1),
    ("7.5 % 2", {}, 1.5),
    ("-a", {"a": 2}, -2),
    # comparisons
    ("1 = 1.0", {}, True),
    ("a = b", {"a": {"x": [1]}, "b": {"x": [1]}}, True),
    ("'a' < 'b'", {}, True),
    ("a >= 2", {"a": 2}, True),
    ("a <> 'x'", {"a": "y"}, True),
    ("a != 'x'", {"a": "x"}, False),
    ("true = false", {}, False),
    # logic, IN, BETWEEN, LIKE
    ("a > 1 AND a < 3", {"a": 2}, True),
    ("a > 1 OR b", {"a": 0, "b": True}, True),
    ("NOT a > 1", {"a": 0}, True),
    ("a IN (1, 2, 3)", {"a": 2}, True),
    ("a IN (1, 2, 3)", {"a": 4}, False),
    ("a BETWEEN 1 AND 3", {"a": 3}, True),
    ("a NOT BETWEEN 1 AND 3", {"a": 4}, True),
    ("a LIKE 'ab%'", {"a": "abc"}, True),
    ("a LIKE 'ab_'", {"a": "abcd"}, False),
    ("a LIKE '%.%'", {"a": "a.b"}, True),
    ("a LIKE '%.%'", {"a": "ab"}, False),
    ("a LIKE 'x\ny'", {"a": "x\ny"}, True),
    ("a NOT LIKE 'ab%'", {"a": "abc"}, False),
    ("a ILIKE 'AB%'", {"a": "abc"}, True),
    ("a LIKE 'A%'", {"a": "abc"}, False),
    ("a LIKE '100!%' ESCAPE '!'", {"a": "100%"}, True),
    ("a LIKE '100!%' ESCAPE '!'", {"a": "1000"}, False),
    # CASE and IF
    ("CASE WHEN a > 1 THEN 'big' ELSE 'small' END", {"a": 2}, "big"),
    ("CASE WHEN a > 1 THEN 'big' ELSE 'small' END", {}, "small"),
    ("CASE a WHEN 1 THEN 'one' WHEN 2 THEN 'two' END", {"a": 2}, "two"),
    ("IF(a > 1, 'y', 'n')", {"a": 0}, "n"),
    # CAST
    ("CAST(a AS int)", {"a": "42"}, 42),
    ("CAST(a AS int)", {"a": "3.7"}, 3),
    ("CAST(a AS int)", {"a": -3.7}, -3),
    ("CAST(a AS int)", {"a": True}, 1),
    ("CAST(a AS int)", {"a": "x"}, None),
    ("CAST(a AS bigint)", {"a": 1.0}, 1),
    ("CAST(a AS float)", {"a": "2.5"}, 2.5),
    ("CAST(a AS double)", {"a": 2}, 2.0),
    ("CAST(a AS float)", {"a": "nan"}, None),
    ("CAST(a AS float)", {"a": [1]}, None),
    ("CAST(a AS string)", {"a": 1.5}, "1.5"),
    ("CAST(a AS string)", {"a": False}, "false"),
    ("CAST(a AS varchar)", {"a": {"k": [1, None]}}, '{"k":[1,null]}'),
    ("CAST(a AS string)", {}, None),
    ("CAST(a AS bool)", {"a": "TRUE"}, True),
    ("CAST(a AS boolean)", {"a": "0"}, False),
    ("CAST(a AS bool)", {"a": 2}, True),
    ("CAST(a AS bool)", {"a": "yes"}, None),
    ("a::int", {"a": "7"}, 7),
    # functions
    ("abs(-2)", {}, 2),
    ("abs(-2.5)", {}, 2.5),
    ("round(2.5)", {}, 3),
    ("round(-2.5)", {}, -3),
    ("round(2.675, 2)", {}, 2.68),
    ("round(1234, -2)", {}, 1200),
    ("floor(2.7)", {}, 2),
    ("floor(-2.5)", {}, -3),
    ("ceil(2.1)", {}, 3),
    ("sqrt(9)", {}, 3.0),
    ("lower('AbC')", {}, "abc"),
    ("upper('AbC')", {}, "ABC"),
    ("length('héllo')", {}, 5),
    ("length(a)", {"a": [1, 2, 3]}, 3),
    ("length(a)", {"a": {"x": 1}}, 1),
    ("concat('a', 1, true, 2.5)", {}, "a1true2.5"),
    ("a || '-' || b", {"a": "x", "b": 2}, "x-2"),
    ("coalesce(a, b, 3)", {"b": None}, 3),
    ("coalesce(a, b, 3)", {"b": 0}, 0),
    ("ifnull(a, 4)", {}, 4),
    ("nvl(a, 4)", {"a": 1}, 1),
    ("UPPER(topic_level(2))", {}, "PUMP-7"),
]


@pytest.mark.parametrize(("text", "payload", "expected"), NULLS, ids=[c[0] for c in NULLS])
def test_null_semantics(text, payload, expected):
    assert evaluate(text, payload) is expected


@pytest.mark.parametrize(("text", "payload", "expected"), VALUES, ids=[c[0] for c in VALUES])
def test_values(text, payload, expected):
    value = evaluate(text, payload)
    assert value == expected
    assert type(value) is type(expected)  # 3 is not 3.0, and True is not 1


def test_a_row_without_topic():
    assert evaluate("topic_level(1)", topic=None) is None
    assert evaluate("topic IS NULL", topic=None) is True


def test_an_absurd_value_gives_null_not_an_exception():
    deep: dict = {}
    for _ in range(5000):
        deep = {"a": deep}
    assert evaluate("CAST(a AS string)", {"a": deep}) is None
    assert evaluate("a + 1", {"a": 10**400}) is not None  # ints are exact
    assert evaluate("a / 3", {"a": 10**400}) is None  # too large for a float
    assert evaluate("floor(a)", {"a": math.inf}) is None
    assert evaluate("a * 2", {"a": math.inf}) is None


def test_compiled_expressions_keep_their_sql():
    assert compile_expression("a.b  +  1").sql == "a.b + 1"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("SELECT a FROM s", "an expression was expected, not a statement"),
        ("avg(a) > 1", "aggregate AVG(a) is not allowed in a row expression"),
        ("nosuch(1)", "unknown function nosuch()"),
        ("a +", "syntax error"),
    ],
)
def test_expression_errors(text, message):
    with pytest.raises(RuleError, match=message.replace("(", r"\(").replace(")", r"\)")):
        compile_expression(text)
