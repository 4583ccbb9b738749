"""The scalar functions a rule may call, by name, and what each does with NULL.

- ``abs(x)``: absolute value of a number.
- ``round(x)``, ``round(x, n)``: ``x`` rounded to ``n`` decimals (0 by default, giving an
  int); halves go away from zero.
- ``floor(x)``, ``ceil(x)``: the int at or below, at or above ``x``.
- ``sqrt(x)``: square root; NULL for a negative number.
- ``lower(s)``, ``upper(s)``: ``s`` in lower or upper case.
- ``length(v)``: characters in a string, items in a list or object.
- ``concat(a, ...)``: the arguments' text joined (numbers and booleans as CAST to string
  writes them); NULL if any argument is NULL, like ``a || b``.
- ``coalesce(a, ...)``: the first argument that is not NULL (``ifnull(a, b)`` and
  ``nvl(a, b)`` are read as coalesce too).
- ``topic_level(n)``: the ``n``-th level of the row's MQTT topic, counting from 1
  (``topic_level(2)`` of ``sensor/pump-7/vibration`` is ``'pump-7'``); NULL past the last
  level, or when the row has no topic.

A number is an int or a float, never a boolean. Every function returns NULL when given a value
of a kind it does not take (``abs('x')``, ``lower(3)``): data never raises.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from airlane.rules.values import is_number, round_half_away, to_string

__all__ = ["SCALAR_FUNCTIONS", "ScalarFunction", "topic_level"]


@dataclass(frozen=True, slots=True)
class ScalarFunction:
    """A function of the rule language: its arity and its implementation over values."""

    name: str
    """Lower-case name, as a rule author writes it."""
    min_args: int
    """Fewest arguments it takes."""
    max_args: int | None
    """Most arguments it takes; None for any number."""
    apply: Callable[..., Any]
    """The implementation: argument values in, a value (or None) out; never raises."""


def _numeric(function: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def apply(value: Any) -> Any:
        if not is_number(value):
            return None
        try:
            return function(value)
        except (ArithmeticError, ValueError):  # floor of a huge float, sqrt of a negative
            return None

    return apply


def _round(value: Any, digits: Any = 0) -> Any:
    if not isinstance(digits, int) or isinstance(digits, bool):
        return None
    return round_half_away(value, digits)


def _text(function: Callable[[str], Any]) -> Callable[[Any], Any]:
    return lambda value: function(value) if isinstance(value, str) else None


def _length(value: Any) -> int | None:
    return len(value) if isinstance(value, str | list | dict) else None


def _concat(*values: Any) -> str | None:
    texts: list[str] = []
    for value in values:
        text = to_string(value)
        if text is None:
            return None
        texts.append(text)
    return "".join(texts)


def _coalesce(*values: Any) -> Any:
    return next((value for value in values if value is not None), None)


def topic_level(topic: object, level: object) -> str | None:
    """Level ``level`` (1-based) of ``topic``; NULL when out of range or not a topic."""
    if not isinstance(topic, str) or not isinstance(level, int) or isinstance(level, bool):
        return None
    levels = topic.split("/")
    return levels[level - 1] if 1 <= level <= len(levels) else None


SCALAR_FUNCTIONS: dict[str, ScalarFunction] = {
    function.name: function
    for function in (
        ScalarFunction("abs", 1, 1, _numeric(abs)),
        ScalarFunction("round", 1, 2, _round),
        ScalarFunction("floor", 1, 1, _numeric(math.floor)),
        ScalarFunction("ceil", 1, 1, _numeric(math.ceil)),
        ScalarFunction("sqrt", 1, 1, _numeric(math.sqrt)),
        ScalarFunction("lower", 1, 1, _text(str.lower)),
        ScalarFunction("upper", 1, 1, _text(str.upper)),
        ScalarFunction("length", 1, 1, _length),
        ScalarFunction("concat", 1, None, _concat),
        ScalarFunction("coalesce", 1, None, _coalesce),
    )
}
"""The functions over values, by lower-case name. ``topic_level`` is not here: it reads the
row's topic, not its arguments alone, and is compiled with the columns."""
