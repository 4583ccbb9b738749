"""The boundary with sqlglot: text in, one checked syntax tree out, sqlglot's errors translated.

Rules are parsed by sqlglot with its default dialect. Three things about that dialect matter
to rule authors: strings are single-quoted (``'dev1'``), double quotes make an identifier
(``"weird name"`` is a column, so ``WHERE id = "dev1"`` compares with a column named dev1),
and identifiers keep their case (JSON keys are case-sensitive); keywords and function names do
not.

sqlglot is imported when the first rule is parsed, not when this package is imported. Importing
it loads ``importlib.metadata`` (sqlglot looks up dialect plug-ins), which loads the ``email``
package and, through it, ``socket``. Nothing here uses either, and keeping them out of the
package's import lets the layer test (tests/test_layers.py) check that importing a pure
package loads no network module.

Every tree handed on is at most `MAX_DEPTH` levels deep, so that compiling and evaluating it
recurses a bounded number of times; sqlglot's own parser gives up (RecursionError) on a few
dozen nested parentheses, which is turned into a `RuleError` as well.
"""

from __future__ import annotations

import re
from typing import Any, TypeAlias

from airlane.rules.errors import RuleError

__all__ = ["MAX_DEPTH", "Node", "is_node", "parse_expression", "parse_statement", "sql_of"]

Node: TypeAlias = Any
"""A sqlglot expression node. Typed loosely, and read by duck typing (``node.key``,
``node.args``): sqlglot renamed its base class between the supported releases (Expression,
then Expr), and this package does not import sqlglot until it parses."""

MAX_DEPTH = 64
"""Deepest expression tree accepted (a rule's SELECT counts as one level). Real rules nest a
handful of levels; the bound keeps compilation and per-row evaluation well inside Python's
recursion limit whatever the text."""

# sqlglot writes tokens into its messages as their repr; a rule author wants the text.
_TOKEN = re.compile(r"<Token token_type: TokenType\.(\w+), text: (.*?), line: .*?>")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_CLASS = re.compile(r"<class '(?:\w+\.)*(\w+)'>")


def is_node(value: object) -> bool:
    """Whether ``value`` is a sqlglot expression node (not a flag or a plain string)."""
    return hasattr(value, "key") and hasattr(value, "args") and hasattr(value, "arg_types")


def sql_of(node: Node) -> str:
    """The node as sqlglot writes it in its default dialect: how messages quote a rule."""
    return str(node.sql())


def parse_statement(sql: str) -> Node:
    """The one SELECT statement in ``sql``; `RuleError` for anything else or bad syntax."""
    tree = _parse(sql)
    if tree.key in ("block", "semicolon"):
        raise RuleError("a rule is one SELECT statement; this text holds several")
    if tree.key in ("union", "intersect", "except"):
        raise RuleError(f"{tree.key.upper()} is not supported: a rule is one SELECT")
    if tree.key != "select":
        kind = str(tree.key).upper()
        raise RuleError(f"a rule is a SELECT statement, not {kind}")
    check_depth(tree)
    return tree


def parse_expression(text: str) -> Node:
    """One scalar expression (``a.b * 2``); `RuleError` for a statement or bad syntax."""
    tree = _parse(text)
    if tree.key in ("select", "block", "union", "insert", "update", "delete", "create"):
        raise RuleError("an expression was expected, not a statement")
    check_depth(tree)
    return tree


def check_depth(tree: Node) -> None:
    """`RuleError` if ``tree`` is more than `MAX_DEPTH` levels deep (walked without
    recursion: the tree may be deep enough to break a recursive walk)."""
    stack: list[tuple[Node, int]] = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise RuleError(
                f"the rule nests expressions more than {MAX_DEPTH} levels deep; "
                "split long chains of operators or remove parentheses"
            )
        stack.extend((child, depth + 1) for child in node.iter_expressions())


def _parse(text: str) -> Node:
    import sqlglot  # deferred: see the module docstring
    from sqlglot.errors import ParseError, TokenError

    if not text.strip():
        raise RuleError("the rule is empty")
    try:
        tree = sqlglot.parse_one(text)
    except ParseError as error:
        raise _syntax_error(error) from None
    except TokenError as error:
        raise RuleError(f"syntax error: {_clean(str(error))} (an unclosed quote?)") from None
    except RecursionError:
        raise RuleError(
            "the rule nests parentheses or operators too deeply for the parser"
        ) from None
    if tree is None:
        raise RuleError("the rule is empty")
    return tree


def _syntax_error(error: Any) -> RuleError:
    details = getattr(error, "errors", None) or []
    first = details[0] if details else {}
    description = _clean(str(first.get("description") or error))
    line, column = first.get("line"), first.get("col")
    if isinstance(line, int) and isinstance(column, int):
        near = _clean(str(first.get("highlight") or ""))
        where = f" near {near!r}" if near else ""
        return RuleError(
            f"syntax error at line {line}, column {column}{where}: {description}",
            line=line,
            column=column,
        )
    return RuleError(f"syntax error: {description}")


def _clean(message: str) -> str:
    def token(match: re.Match[str]) -> str:
        kind, text = match.group(1), match.group(2)
        return "the end of the rule" if kind == "SENTINEL" else repr(text)

    message = _CLASS.sub(lambda match: match.group(1), _ANSI.sub("", message))
    return _TOKEN.sub(token, message).split("\n")[0].strip()
