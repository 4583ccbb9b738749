"""A rule: one SELECT statement over one source, compiled into a `RulePlan`.

::

    SELECT deviceId, avg(vibration) AS avg_v, count(*) AS n
    FROM sensors
    WHERE vibration > 0
    GROUP BY deviceId, TUMBLINGWINDOW(ss, 10)
    HAVING avg(vibration) > 3.5

FROM names one source: a bare name (``sensors``: a stream defined elsewhere) or a quoted MQTT
topic filter (``"sensor/+/vibration"`` or ``'sensor/#'``), kept as written for whoever
subscribes. WHERE filters rows as they arrive (`airlane.rules.expressions` says what a row
offers). A rule either

- *maps*: no aggregate, no GROUP BY. Every row that passes WHERE gives one output row, at once.
  ``SELECT *`` gives the payload's fields; or
- *groups*: GROUP BY names one window (`airlane.rules.windows`) and up to `MAX_GROUP_KEYS`
  expressions; each window gives one output row per group, kept if HAVING is true. SELECT and
  HAVING may use the GROUP BY expressions (as written there), aggregates
  (`airlane.rules.aggregates`) of any row expression, and ``window_start``/``window_end``;
  HAVING may also name a SELECT alias. A rule with aggregates or GROUP BY but no window is
  refused: with no window, there is no moment at which a group is complete.

Output rows are objects whose fields are SELECT's names, in order: an alias, or a column's
path (``machine.rpm``), or else the expression as sqlglot writes it (``AVG(vibration)``: give it
an alias for a stable name). A grouping rule's rows end with ``window_start`` and
``window_end`` (seconds), unless SELECT already has them.

`compile_rule` refuses, with a `RuleError` saying what to change: bad syntax (with sqlglot's
line and column), more than one statement, anything but SELECT, JOIN, subqueries, UNION, WITH,
ORDER BY, LIMIT, DISTINCT, unknown functions, aggregates in WHERE or GROUP BY or inside another
aggregate, a SELECT column that is neither in GROUP BY nor in an aggregate, a window that is
not in GROUP BY or has a bad unit or size, two windows, and rules past the limits:
`MAX_SQL_CHARS`, `MAX_PROJECTIONS`, `MAX_GROUP_KEYS`, `airlane.rules.syntax.MAX_DEPTH`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from airlane.rules.aggregates import AGGREGATE_FUNCTIONS, AggregateFunction
from airlane.rules.errors import RuleError
from airlane.rules.expressions import (
    TOPIC_LEVEL,
    CompiledExpression,
    Compiler,
    GroupRow,
    Row,
    RowColumns,
    function_arguments,
)
from airlane.rules.syntax import Node, parse_statement, sql_of
from airlane.rules.windows import (
    WINDOW_COLUMNS,
    WINDOW_END,
    WINDOW_START,
    WindowSpec,
    is_window_call,
    window_from_call,
)

__all__ = [
    "MAX_GROUP_KEYS",
    "MAX_PROJECTIONS",
    "MAX_SQL_CHARS",
    "AggregateCall",
    "Projection",
    "RulePlan",
    "Source",
    "SourceKind",
    "compile_rule",
]

MAX_SQL_CHARS = 10_000
"""Longest rule text: a rule is a line or a screenful; the bound caps what parsing costs."""
MAX_PROJECTIONS = 64
"""Most SELECT expressions (each is evaluated per row, or per group and window)."""
MAX_GROUP_KEYS = 16
"""Most GROUP BY expressions besides the window."""

_ALLOWED_CLAUSES = frozenset({"expressions", "from", "from_", "where", "group", "having"})
_CLAUSE_NAMES = {
    "with": "WITH",
    "distinct": "SELECT DISTINCT",
    "joins": "JOIN (a rule reads one source)",
    "laterals": "LATERAL",
    "order": "ORDER BY",
    "limit": "LIMIT",
    "offset": "OFFSET",
    "windows": "WINDOW",
    "qualify": "QUALIFY",
    "into": "SELECT INTO",
    "sort": "SORT BY",
    "cluster": "CLUSTER BY",
    "distribute": "DISTRIBUTE BY",
    "pivots": "PIVOT",
    "sample": "TABLESAMPLE",
    "connect": "CONNECT BY",
    "kind": "SELECT AS",
}
_SUBQUERY_KEYS = frozenset({"select", "subquery", "union", "intersect", "except", "exists"})
_WHERE_HINT = " (WHERE filters rows before they are grouped; put it in HAVING)"


class SourceKind(enum.Enum):
    """What a rule's FROM names."""

    NAMED = "named"
    """A bare name: a source defined elsewhere (a stream)."""
    TOPIC_FILTER = "topic_filter"
    """A quoted MQTT topic filter, such as ``sensor/+/vibration``."""


@dataclass(frozen=True, slots=True)
class Source:
    """The source a rule reads, as written in FROM (not resolved or checked here)."""

    text: str
    """The name or the topic filter, without quotes."""
    kind: SourceKind
    """Whether it is a name or a topic filter."""


@dataclass(frozen=True, slots=True)
class Projection:
    """One SELECT expression: the field it writes and how it is computed."""

    name: str
    """The output field's name."""
    sql: str
    """The expression, as sqlglot writes it."""
    evaluate: Callable[[Any], Any]
    """Over a `Row` in a mapping rule, over a `GroupRow` in a grouping one."""
    star: bool = False
    """``SELECT *``: ``evaluate`` returns the payload, whose fields are all written."""


@dataclass(frozen=True, slots=True)
class AggregateCall:
    """One aggregate of a grouping rule: the function, and its argument per row."""

    sql: str
    """The call, as sqlglot writes it (``AVG(vibration)``)."""
    function: AggregateFunction
    """The accumulator."""
    argument: Callable[[Row], Any]
    """The value a row adds (``count(*)`` adds 1 for every row)."""


@dataclass(frozen=True, slots=True)
class RulePlan:
    """A compiled rule: everything `airlane.rules.engine.RuleRunner` needs to run it."""

    sql: str
    """The rule's text, as given."""
    source: Source
    """What FROM names."""
    projections: tuple[Projection, ...]
    """SELECT, in order."""
    where: CompiledExpression[Row] | None
    """The row filter; None keeps every row."""
    group_keys: tuple[CompiledExpression[Row], ...]
    """GROUP BY's expressions, the window left out."""
    window: WindowSpec | None
    """GROUP BY's window; None in a mapping rule."""
    having: CompiledExpression[GroupRow] | None
    """The group filter; None keeps every group."""
    aggregates: tuple[AggregateCall, ...]
    """Every distinct aggregate of SELECT and HAVING; a `GroupRow` holds their results in
    this order."""

    @property
    def aggregating(self) -> bool:
        """Whether the rule groups (has a window) rather than maps rows one to one."""
        return self.window is not None


def compile_rule(sql: str) -> RulePlan:
    """Compile a rule's SQL into a `RulePlan`; `RuleError` says what is wrong with it."""
    if not isinstance(sql, str):
        raise TypeError(f"a rule is a str of SQL, not {type(sql).__name__}")
    if len(sql) > MAX_SQL_CHARS:
        raise RuleError(f"the rule is {len(sql)} characters long; the limit is {MAX_SQL_CHARS}")
    tree = parse_statement(sql)
    _refuse_clauses(tree)
    _refuse_subqueries(tree)
    source = _source(tree)
    selected = list(tree.expressions)
    if len(selected) > MAX_PROJECTIONS:
        raise RuleError(f"SELECT has {len(selected)} expressions; the limit is {MAX_PROJECTIONS}")
    window, key_nodes = _group_by(tree)
    where_node = tree.args["where"].this if tree.args.get("where") else None
    having_node = tree.args["having"].this if tree.args.get("having") else None
    aggregate_nodes = _aggregates_of([*selected, *([having_node] if having_node else [])])
    if window is None and (key_nodes or aggregate_nodes or having_node is not None):
        raise RuleError(
            "a rule that aggregates or groups needs a window: add TUMBLINGWINDOW(unit, size), "
            "HOPPINGWINDOW(unit, size, hop) or SLIDINGWINDOW(unit, size) to GROUP BY"
        )
    where = None
    if where_node is not None:
        where = CompiledExpression(
            sql_of(where_node),
            Compiler(RowColumns("WHERE", _WHERE_HINT), "WHERE").compile(where_node),
        )
    group_by = Compiler(RowColumns("GROUP BY"), "GROUP BY")
    keys = tuple(CompiledExpression(sql_of(n), group_by.compile(n)) for n in key_nodes)
    aggregates = tuple(_aggregate_call(node) for node in aggregate_nodes)
    if window is None:
        return RulePlan(sql, source, _map_projections(selected), where, (), None, None, ())
    group_columns = _GroupColumns(
        "SELECT", {node: i for i, node in enumerate(key_nodes)}, aggregate_nodes
    )
    projections = _group_projections(selected, group_columns)
    having = None
    if having_node is not None:
        aliases = {p.name: _unaliased(n) for p, n in zip(projections, selected, strict=True)}
        in_having = Compiler(group_columns.for_clause("HAVING", aliases), "HAVING")
        having = CompiledExpression(sql_of(having_node), in_having.compile(having_node))
    return RulePlan(sql, source, projections, where, keys, window, having, aggregates)


# -- clauses ----------------------------------------------------------------------------------


def _descendants(node: Node, prune: Callable[[Node], bool] | None = None) -> Iterator[Node]:
    """``node``'s subtree in pre-order, left to right, not below nodes ``prune`` accepts."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        if prune is None or not prune(current):
            stack.extend(reversed(list(current.iter_expressions())))


def _refuse_subqueries(tree: Node) -> None:
    for node in _descendants(tree):
        if node is not tree and node.key in _SUBQUERY_KEYS:
            raise RuleError("subqueries are not supported: a rule is one SELECT over one source")


def _refuse_clauses(tree: Node) -> None:
    for field, value in tree.args.items():
        if field in _ALLOWED_CLAUSES or value is None or value is False or value == []:
            continue
        bare = field.rstrip("_")
        name = _CLAUSE_NAMES.get(bare, bare.upper().replace("_", " "))
        raise RuleError(f"{name} is not supported in a rule")
    group = tree.args.get("group")
    if group is not None:
        for field, value in group.args.items():
            if field != "expressions" and value not in (None, False, []):
                raise RuleError(f"GROUP BY {field.upper()} is not supported in a rule")


def _source(tree: Node) -> Source:
    clause = tree.args.get("from_") or tree.args.get("from")  # sqlglot < 28 says "from"
    if clause is None:
        raise RuleError("a rule needs FROM: a source name or a quoted MQTT topic filter")
    table = clause.this
    extra = [f for f, v in table.args.items() if f != "this" and v not in (None, False, [])]
    if table.key != "table" or extra or getattr(table.this, "key", None) != "identifier":
        raise RuleError(
            "FROM takes one source, a name or a quoted MQTT topic filter (no alias, no "
            f"schema), not {sql_of(table)}"
        )
    identifier = table.this
    kind = SourceKind.TOPIC_FILTER if identifier.args.get("quoted") else SourceKind.NAMED
    if not str(identifier.name):
        raise RuleError("FROM names an empty source")
    return Source(str(identifier.name), kind)


def _group_by(tree: Node) -> tuple[WindowSpec | None, list[Node]]:
    """The window and the other GROUP BY expressions; `RuleError` for a window anywhere
    else, for two windows, and for too many or positional keys."""
    group = tree.args.get("group")
    items = list(group.expressions) if group is not None else []
    windows = [item for item in items if is_window_call(item)]
    for node in _descendants(tree):
        if is_window_call(node) and not any(node is w for w in windows):
            raise RuleError(f"the window {sql_of(node)} belongs in GROUP BY, alone")
    if len(windows) > 1:
        raise RuleError(f"a rule has one window; this one has {len(windows)}")
    keys = [item for item in items if not is_window_call(item)]
    if len(keys) > MAX_GROUP_KEYS:
        raise RuleError(f"GROUP BY has {len(keys)} expressions; the limit is {MAX_GROUP_KEYS}")
    for key in keys:
        if key.key == "literal":
            raise RuleError(
                f"GROUP BY {sql_of(key)}: group by an expression, not a constant or a position"
            )
    return (window_from_call(windows[0]) if windows else None), keys


# -- aggregates -------------------------------------------------------------------------------


def _aggregates_of(nodes: list[Node]) -> dict[Node, int]:
    """Every distinct aggregate call in ``nodes`` (not inside another: that is refused when
    its argument is compiled), numbered in order of first appearance."""
    found: dict[Node, int] = {}
    for root in nodes:
        for node in _descendants(root, prune=_is_aggregate):
            if _is_aggregate(node) and node not in found:
                found[node] = len(found)
    return found


def _is_aggregate(node: Node) -> bool:
    return node.key in AGGREGATE_FUNCTIONS


def _aggregate_call(node: Node) -> AggregateCall:
    function = AGGREGATE_FUNCTIONS[node.key]
    argument = node.args.get("this")
    if argument is not None and argument.key == "distinct":
        raise RuleError(f"{sql_of(node)}: DISTINCT inside an aggregate is not supported")
    if node.key == "count" and argument is None:
        raise RuleError("count() needs an argument: count(*) counts rows, count(x) values")
    if node.key == "count" and argument.key == "star" and not node.expressions:
        return AggregateCall(sql_of(node), function, _one)
    (argument,) = function_arguments(node, function.name, 1, 1)
    clause = f"the argument of {sql_of(node)}"
    compiler = Compiler(RowColumns(clause, " (aggregates cannot be nested)"), clause)
    return AggregateCall(sql_of(node), function, compiler.compile(argument))


def _one(row: Row) -> int:
    return 1


# -- projections ------------------------------------------------------------------------------


def _unaliased(node: Node) -> Node:
    return node.this if node.key == "alias" else node


def _output_name(node: Node) -> str:
    if node.key == "alias":
        return str(node.alias)
    if node.key == "column" and all(part.key == "identifier" for part in node.parts):
        return ".".join(str(part.name) for part in node.parts)
    return sql_of(node)


def _check_names(names: list[str]) -> None:
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise RuleError(f"two SELECT expressions are named {name!r}; give one an alias")
        seen.add(name)


def _map_projections(selected: list[Node]) -> tuple[Projection, ...]:
    compiler = Compiler(RowColumns("SELECT"), "SELECT")
    projections = []
    for node in selected:
        if node.key == "star":
            projections.append(Projection("*", "*", attrgetter("payload"), star=True))
            continue
        expression = _unaliased(node)
        evaluate = compiler.compile(expression)
        projections.append(Projection(_output_name(node), sql_of(expression), evaluate))
    _check_names([p.name for p in projections if not p.star])
    return tuple(projections)


def _group_projections(
    selected: list[Node], group_columns: _GroupColumns
) -> tuple[Projection, ...]:
    compiler = Compiler(group_columns, "SELECT")
    projections = []
    for node in selected:
        if node.key == "star":
            raise RuleError("SELECT * cannot be used in a rule that groups; name the columns")
        expression, name = _unaliased(node), _output_name(node)
        if name in WINDOW_COLUMNS and not _is_column(expression, name):
            raise RuleError(f"the output name {name!r} is the window's; choose another alias")
        evaluate = compiler.compile(expression)
        projections.append(Projection(name, sql_of(expression), evaluate))
    _check_names([p.name for p in projections])
    return tuple(projections)


def _is_column(node: Node, name: str) -> bool:
    return node.key == "column" and len(node.parts) == 1 and str(node.name) == name


class _GroupColumns:
    """The leaves of SELECT and HAVING in a grouping rule: GROUP BY expressions (matched as
    written), aggregates, the window's columns and, in HAVING, SELECT's aliases. Anything
    else that reads a row is refused: a group has many rows."""

    def __init__(
        self,
        clause: str,
        keys: dict[Node, int],
        aggregates: dict[Node, int],
        aliases: dict[str, Node] | None = None,
    ) -> None:
        self.clause = clause
        self.keys = keys
        self.aggregates = aggregates
        self.aliases = aliases or {}

    def for_clause(self, clause: str, aliases: dict[str, Node]) -> _GroupColumns:
        """The same leaves for another clause, with SELECT's aliases."""
        return _GroupColumns(clause, self.keys, self.aggregates, aliases)

    def __call__(
        self, node: Node, compiler: Compiler[GroupRow]
    ) -> Callable[[GroupRow], Any] | None:
        key = self.keys.get(node)
        if key is not None:
            return lambda group: group.keys[key]
        aggregate = self.aggregates.get(node)
        if aggregate is not None:
            return lambda group: group.aggregates[aggregate]
        if node.key == "column":
            return self._column(node)
        if node.key == "anonymous" and str(node.name).lower() == TOPIC_LEVEL:
            raise RuleError(
                f"{sql_of(node)} in {self.clause} reads a row: put it in GROUP BY or inside "
                "an aggregate"
            )
        return None

    def _column(self, node: Node) -> Callable[[GroupRow], Any]:
        name = str(node.name) if len(node.parts) == 1 else None
        if name == WINDOW_START:
            return attrgetter("window_start")
        if name == WINDOW_END:
            return attrgetter("window_end")
        if name is not None and name in self.aliases:
            # Compiled as in SELECT (no aliases there), so an alias cannot refer to itself.
            selected = _GroupColumns("SELECT", self.keys, self.aggregates)
            return Compiler(selected, self.clause).compile(self.aliases[name])
        raise RuleError(
            f"column {sql_of(node)} in {self.clause} is neither in GROUP BY nor inside an aggregate"
        )
