"""Expressions: sqlglot syntax trees compiled once into Python closures over a row.

A rule's expressions are compiled when the rule is, into plain closures (no ``eval``, no
``exec``); evaluating one is a few function calls per operator. What the values do, NULL
included, is `airlane.rules.values`; the functions are `airlane.rules.functions`.

What a row offers as columns (`Row`):

- the fields of its JSON payload, by name: ``vibration``; nested objects by path:
  ``machine.spindle.rpm``, or with brackets: ``readings[0]`` (lists count from 0),
  ``payload['odd key']``; a field that is missing, or a path through something that is not an
  object, is NULL;
- ``topic`` (the MQTT topic it came on), ``qos`` (its QoS, 0 to 2) and ``ts`` (its time in
  seconds, given by whoever feeds the rule): these three names are the message's metadata and
  win over payload fields of the same name, so a payload cannot pretend to come from another
  topic; such a field is still there as ``payload.topic``;
- ``payload``: the whole payload, an object;
- ``topic_level(n)``: the ``n``-th level of the topic (`airlane.rules.functions`).

Unquoted identifiers keep their case; double quotes make an identifier (``"odd key"``), single
quotes a string.

In a rule that groups (`airlane.rules.plan`), SELECT and HAVING are evaluated once per group,
not per row, over a `GroupRow`: they may use the GROUP BY expressions, aggregates, and the
window's ``window_start`` and ``window_end``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from operator import attrgetter
from typing import Any, Generic, TypeVar

from airlane.rules.aggregates import AGGREGATE_FUNCTIONS
from airlane.rules.errors import RuleError
from airlane.rules.functions import SCALAR_FUNCTIONS, topic_level
from airlane.rules.syntax import Node, is_node, parse_expression, sql_of
from airlane.rules.values import (
    arithmetic,
    compare,
    equal,
    is_number,
    like,
    logical_and,
    logical_not,
    logical_or,
    to_bool,
    to_float,
    to_int,
    to_string,
    truth,
)

__all__ = [
    "METADATA_COLUMNS",
    "PAYLOAD_COLUMN",
    "TOPIC_LEVEL",
    "CompiledExpression",
    "Compiler",
    "GroupRow",
    "Row",
    "RowColumns",
    "compile_expression",
]

METADATA_COLUMNS = ("topic", "qos", "ts")
"""Columns that read the message's metadata, not its payload."""
PAYLOAD_COLUMN = "payload"
"""The column holding the whole payload object."""
TOPIC_LEVEL = "topic_level"
"""The function returning one level of the topic, counting from 1."""

S = TypeVar("S")


@dataclass(frozen=True, slots=True)
class Row:
    """One message as a rule sees it: its JSON payload and its metadata."""

    payload: Mapping[str, Any]
    """The payload, a JSON object."""
    topic: str | None = None
    """The topic it arrived on (the ``topic`` column); None when it came some other way."""
    qos: int | None = None
    """Its MQTT QoS (the ``qos`` column), when known."""
    ts: float = 0.0
    """Its time in seconds (the ``ts`` column); what puts it in a window."""


@dataclass(frozen=True, slots=True)
class GroupRow:
    """One group of a window, as SELECT and HAVING see it in a rule that groups."""

    keys: tuple[Any, ...]
    """The values of the GROUP BY expressions (the window left out), in their order."""
    aggregates: tuple[Any, ...]
    """The result of each aggregate of the rule (`RulePlan.aggregates`), in its order."""
    window_start: float | None = None
    """The window's start in seconds (the ``window_start`` column)."""
    window_end: float | None = None
    """The window's end in seconds (the ``window_end`` column)."""


@dataclass(frozen=True, slots=True)
class CompiledExpression(Generic[S]):
    """An expression ready to run: ``evaluate(scope)`` returns its value, never raises."""

    sql: str
    """The expression as sqlglot writes it (for messages and names)."""
    evaluate: Callable[[S], Any]
    """The compiled closure: a `Row` (or a `GroupRow`, in a grouping rule's SELECT and
    HAVING) in, a JSON value or None out."""


Leaves = Callable[[Node, "Compiler[S]"], Callable[[S], Any] | None]
Handler = Callable[["Compiler[Any]", Node], Callable[[Any], Any]]


class Compiler(Generic[S]):
    """Compiles expression nodes into closures over one kind of scope ``S``.

    ``leaves`` is asked first about every node: it returns the closure for what it knows (the
    columns of a `Row`, or a group's keys and aggregates), raises `RuleError` for what its
    scope forbids, or returns None to let the operator table handle the node. ``clause``
    names where the expression stands (``WHERE``), for messages.
    """

    def __init__(self, leaves: Leaves[S], clause: str) -> None:
        self.leaves = leaves
        self.clause = clause

    def compile(self, node: Node) -> Callable[[S], Any]:
        """The closure computing ``node``; `RuleError` if it uses what is not supported."""
        found = self.leaves(node, self)
        if found is not None:
            return found
        handler = _HANDLERS.get(node.key)
        if handler is None:
            raise RuleError(_unsupported(node, self.clause))
        return handler(self, node)


class RowColumns:
    """The leaves of a per-row expression: payload fields, metadata and ``topic_level``.
    Aggregates are refused: in ``clause``, there is no group to aggregate over."""

    def __init__(self, clause: str, hint: str = "") -> None:
        self.clause = clause
        self.hint = hint

    def __call__(self, node: Node, compiler: Compiler[Row]) -> Callable[[Row], Any] | None:
        """The closure for a column or ``topic_level``; None for other nodes."""
        key = node.key
        if key == "column":
            return column_reader(node)
        if key in AGGREGATE_FUNCTIONS:
            raise RuleError(f"aggregate {sql_of(node)} is not allowed in {self.clause}{self.hint}")
        if key == "anonymous" and str(node.name).lower() == TOPIC_LEVEL:
            (level,) = function_arguments(node, TOPIC_LEVEL, 1, 1)
            read_level = compiler.compile(level)
            return lambda row: topic_level(row.topic, read_level(row))
        return None


def column_reader(node: Node) -> Callable[[Row], Any]:
    """The closure reading a column (``a``, ``a.b.c``, ``topic``) from a `Row`."""
    names: list[str] = []
    for part in node.parts:
        if part.key != "identifier":
            raise RuleError(f"{sql_of(node)}: only whole fields can be selected by path")
        names.append(str(part.name))
    root, path = names[0], tuple(names[1:])
    # The metadata and the payload are attributes of Row, named as their columns.
    read: Callable[[Row], Any] = (
        attrgetter(root) if root in _ROW_ATTRIBUTES else partial(_payload_field, root)
    )
    if not path:
        return read
    return lambda row: _walk(read(row), path)


def compile_expression(text: str) -> CompiledExpression[Row]:
    """Compile one expression over a row (``vibration * 2 > 7``); `RuleError` if it is not
    valid. What a WHERE clause is compiled with: no aggregates."""
    node = parse_expression(text)
    evaluate = Compiler(RowColumns("a row expression"), "a row expression").compile(node)
    return CompiledExpression(sql_of(node), evaluate)


def function_arguments(node: Node, name: str, low: int, high: int | None) -> list[Node]:
    """The argument nodes of a function call, in order; `RuleError` for the wrong count, for
    ``*``, or for clauses a function here does not take (FILTER, DISTINCT...)."""
    if node.key == "anonymous":  # a function sqlglot does not know: `this` is its name
        arguments = list(node.expressions)
    else:
        arguments = []
        for field in node.arg_types:
            value = node.args.get(field)
            if field in _ARGUMENT_FIELDS and is_node(value):
                arguments.append(value)
            elif field in _ARGUMENT_FIELDS and isinstance(value, list):
                arguments.extend(value)
            elif is_node(value) or (isinstance(value, list) and value):
                raise RuleError(f"{name}() does not take {field.upper()}")
    most = len(arguments) if high is None else high
    if not low <= len(arguments) <= most:
        if high is None:
            wanted = f"at least {low}"
        else:
            wanted = f"{low}" if low == high else f"{low} to {high}"
        raise RuleError(f"{name}() takes {wanted} argument(s), not {len(arguments)}")
    if any(argument.key == "star" for argument in arguments):
        raise RuleError(f"{name}(*) is not valid; name a column")
    return arguments


_ARGUMENT_FIELDS = frozenset({"this", "expression", "expressions", "decimals"})
"""Where sqlglot keeps the arguments of the functions supported here; any other field that
holds an expression is a clause the rule language does not have."""


_ROW_ATTRIBUTES = frozenset({*METADATA_COLUMNS, PAYLOAD_COLUMN})


def _payload_field(name: str, row: Row) -> Any:
    return row.payload.get(name)


# -- the operator table ------------------------------------------------------------------------


def _walk(value: Any, path: tuple[str, ...]) -> Any:
    for name in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(name)
    return value


def _index(value: Any, key: Any) -> Any:
    if isinstance(value, Mapping) and isinstance(key, str):
        return value.get(key)
    if isinstance(value, list) and isinstance(key, int) and not isinstance(key, bool):
        return value[key] if 0 <= key < len(value) else None
    return None


def _literal(compiler: Compiler[Any], node: Node) -> Callable[[Any], Any]:
    text = str(node.this)
    value: Any
    if node.is_string:
        value = text
    else:
        try:
            value = int(text)
        except ValueError:
            value = to_float(text)
            if value is None:
                raise RuleError(f"the number {text} is out of range") from None
    return lambda _: value


def _constant(value: Any) -> Handler:
    return lambda compiler, node: lambda _: value


def _boolean(compiler: Compiler[Any], node: Node) -> Callable[[Any], Any]:
    value = bool(node.this)
    return lambda _: value


def _paren(compiler: Compiler[Any], node: Node) -> Callable[[Any], Any]:
    return compiler.compile(node.this)


def _negate(compiler: Compiler[Any], node: Node) -> Callable[[Any], Any]:
    operand = compiler.compile(node.this)

    def evaluate(scope: Any) -> Any:
        value = operand(scope)
        return -value if is_number(value) else None

    return evaluate


def _binary(function: Callable[[str, Any, Any], Any]) -> Handler:
    def handler(compiler: Compiler[Any], node: Node) -> Callable[[Any], Any]:
        op = str(node.key)
        left, right = compiler.compile(node.this), compiler.compile(node.expression)
        return lambda scope: function(op, left(scope), right(scope))

    return handler


def _concat_operator(compiler: Compiler[Any], node: Node) -> Callable[[Any], Any]:
    left, right = compiler.compile(node.this), compiler.compile(node.expression)
    concat = SCALAR_FUNCTIONS["concat"].apply
    return lambda scope: concat(left(scope), right(scope))


def _and(compiler: Compiler[Any], node: Node) -> Callable[[Any], Any]:
    left, right = compiler.compile(node.this), compiler.compile(node.expression)

    def evaluate(scope: Any) -> Any:
        first = truth(left(scope))
        return False if first is False else logical_and(first, right(scope))

    return evaluate


def _or(compiler: Compiler[Any], node: Node) -> Callable[[Any], Any]:
    left, right = compiler.compile(node.this), compiler.compile(node.expression)

    def evaluate(scope: Any) -> Any:
        first = truth(left(scope))
        return True if first is True else logical_or(first, right(scope))

    return evaluate


def _not(compiler: Compiler[Any], node: Node) -> Callable[[Any], Any]:
    operand = compiler.compile(node.this)
    return lambda scope: logical_not(operand(scope))


def _is(compiler: Compiler[Any], node: Node) -> Callable[[Any], Any]:
    operand = compiler.compile(node.this)
    target = node.expression
    negate = bool(node.args.get("negate"))
    if target.key == "null":
        return lambda scope: (operand(scope) is None) != negate
    if target.key == "boolean":
        wanted = bool(target.this)
        return lambda scope: (operand(scope) is wanted) != negate
    raise RuleError(f"{sql_of(node)}: IS takes NULL, TRUE or FALSE")


def _in(compiler: Compiler[Any], node: Node) -> Callable[[Any], Any]:
    if any(node.args.get(field) for field in ("query", "unnest", "field")):
        raise RuleError(f"{sql_of(node)}: IN takes a list of values, not a subquery")
    operand = compiler.compile(node.this)
    items = [compiler.compile(item) for item in node.expressions]

    def evaluate(scope: Any) -> Any:
        value = operand(scope)
        unknown = value is None
        for item in items:
            same = equal(value, item(scope))
            if same:
                return True
            unknown = unknown or same is None
        return None if unknown else False

    return evaluate


def _between(compiler: Compiler[Any], node: Node) -> Callable[[Any], Any]:
    if node.args.get("symmetric"):
        raise RuleError(f"{sql_of(node)}: BETWEEN SYMMETRIC is not supported")
    operand = compiler.compile(node.this)
    low, high = compiler.compile(node.args["low"]), compiler.compile(node.args["high"])

    def evaluate(scope: Any) -> Any:
        value = operand(scope)
        return logical_and(compare("gte", value, low(scope)), compare("lte", value, high(scope)))

    return evaluate


def _like(compiler: Compiler[Any], node: Node, escape: str | None = None) -> Callable[[Any], Any]:
    operand, pattern = compiler.compile(node.this), compiler.compile(node.expression)
    ignore_case = node.key == "ilike"
    negate = bool(node.args.get("negate"))

    def evaluate(scope: Any) -> Any:
        found = like(operand(scope), pattern(scope), ignore_case=ignore_case, escape=escape)
        return logical_not(found) if negate else found

    return evaluate


def _escape(compiler: Compiler[Any], node: Node) -> Callable[[Any], Any]:
    inner, escape = node.this, node.expression
    if inner.key not in ("like", "ilike"):
        raise RuleError(f"{sql_of(node)}: ESCAPE goes with LIKE")
    if escape.key != "literal" or not escape.is_string or len(str(escape.this)) != 1:
        raise RuleError(f"{sql_of(node)}: ESCAPE takes one character in quotes")
    return _like(compiler, inner, str(escape.this))


def _case(compiler: Compiler[Any], node: Node) -> Callable[[Any], Any]:
    subject = node.args.get("this")
    operand = compiler.compile(subject) if subject is not None else None
    branches = [
        (compiler.compile(branch.this), compiler.compile(branch.args["true"]))
        for branch in node.args.get("ifs") or []
    ]
    default_node = node.args.get("default")
    default = compiler.compile(default_node) if default_node is not None else None

    def evaluate(scope: Any) -> Any:
        value = operand(scope) if operand is not None else None
        for condition, result in branches:
            test = condition(scope)
            if (equal(value, test) if operand is not None else test) is True:
                return result(scope)
        return default(scope) if default is not None else None

    return evaluate


def _if(compiler: Compiler[Any], node: Node) -> Callable[[Any], Any]:
    condition = compiler.compile(node.this)
    then = compiler.compile(node.args["true"])
    otherwise_node = node.args.get("false")
    otherwise = compiler.compile(otherwise_node) if otherwise_node is not None else None

    def evaluate(scope: Any) -> Any:
        if condition(scope) is True:
            return then(scope)
        return otherwise(scope) if otherwise is not None else None

    return evaluate


_CASTS: dict[str, Callable[[Any], Any]] = {
    **dict.fromkeys(("INT", "BIGINT", "SMALLINT", "TINYINT"), to_int),
    **dict.fromkeys(("FLOAT", "DOUBLE", "DECIMAL"), to_float),
    **dict.fromkeys(("TEXT", "VARCHAR", "CHAR", "NVARCHAR", "NCHAR"), to_string),
    "BOOLEAN": to_bool,
}


def _cast(compiler: Compiler[Any], node: Node) -> Callable[[Any], Any]:
    if node.args.get("format"):
        raise RuleError(f"{sql_of(node)}: CAST ... FORMAT is not supported")
    target = node.args["to"]
    name = getattr(target.this, "name", str(target.this))
    convert = _CASTS.get(name)
    if convert is None or target.expressions:
        raise RuleError(
            f"{sql_of(node)}: CAST converts to int, float, string or bool, not {sql_of(target)}"
        )
    operand = compiler.compile(node.this)
    return lambda scope: convert(operand(scope))


def _dot(compiler: Compiler[Any], node: Node) -> Callable[[Any], Any]:
    if node.expression.key != "identifier":
        raise RuleError(f"{sql_of(node)}: only field names may follow a dot")
    base, path = compiler.compile(node.this), (str(node.expression.name),)
    return lambda scope: _walk(base(scope), path)


def _bracket(compiler: Compiler[Any], node: Node) -> Callable[[Any], Any]:
    if len(node.expressions) != 1:
        raise RuleError(f"{sql_of(node)}: brackets take one key or index")
    base, key = compiler.compile(node.this), compiler.compile(node.expressions[0])
    return lambda scope: _index(base(scope), key(scope))


def _function(name: str) -> Handler:
    function = SCALAR_FUNCTIONS[name]

    def handler(compiler: Compiler[Any], node: Node) -> Callable[[Any], Any]:
        nodes = function_arguments(node, name, function.min_args, function.max_args)
        arguments = [compiler.compile(argument) for argument in nodes]
        apply = function.apply
        if len(arguments) == 1:
            (only,) = arguments
            return lambda scope: apply(only(scope))
        return lambda scope: apply(*[argument(scope) for argument in arguments])

    return handler


def _anonymous(compiler: Compiler[Any], node: Node) -> Callable[[Any], Any]:
    raise RuleError(f"unknown function {node.name}() in {compiler.clause}")


_HANDLERS: dict[str, Handler] = {
    "literal": _literal,
    "boolean": _boolean,
    "null": _constant(None),
    "paren": _paren,
    "neg": _negate,
    **dict.fromkeys(("add", "sub", "mul", "div", "mod"), _binary(arithmetic)),
    **dict.fromkeys(("eq", "neq", "lt", "lte", "gt", "gte"), _binary(compare)),
    "dpipe": _concat_operator,
    "and": _and,
    "or": _or,
    "not": _not,
    "is": _is,
    "in": _in,
    "between": _between,
    "like": _like,
    "ilike": _like,
    "escape": _escape,
    "case": _case,
    "if": _if,
    "cast": _cast,
    "trycast": _cast,
    "dot": _dot,
    "bracket": _bracket,
    **{name: _function(name) for name in SCALAR_FUNCTIONS},
    "anonymous": _anonymous,
}
"""sqlglot node key -> compiler. sqlglot gives most functions their own node, keyed by name
(``abs``, ``coalesce``...), and the ones it does not know an ``anonymous`` one."""


def _unsupported(node: Node, clause: str) -> str:
    if any(base.__name__ in ("Func", "AggFunc") for base in type(node).__mro__):
        return f"unknown function {node.sql_name()}() in {clause}"
    if node.key in ("subquery", "select", "exists"):
        return f"subqueries are not supported ({clause})"
    if node.key == "star":
        return f"* is only allowed alone in SELECT or in count(*) ({clause})"
    return f"{sql_of(node)!r} is not supported in {clause}"
