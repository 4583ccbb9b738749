"""Aggregate functions as incremental accumulators with small JSON state.

Each aggregate folds one value per row into a *state*: a JSON value of fixed size (a number,
a pair, the value kept), never the rows themselves. That state is what a window holds per
group and what a snapshot writes (`airlane.rules.engine`).

- ``count(*)``: rows; ``count(x)``: rows where ``x`` is not NULL.
- ``sum(x)``, ``avg(x)``: over the numbers among ``x``; NULL when there were none.
- ``min(x)``, ``max(x)``: over numbers or strings, whichever kind the first non-NULL ``x`` of
  the group was; values of other kinds are skipped.
- ``first(x)``, ``last(x)``: the first and last non-NULL ``x`` in arrival order.

Like every function here, aggregates skip what they cannot use (NULL, a string in a sum)
instead of failing the rule.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from airlane.rules.values import is_number

__all__ = ["AGGREGATE_FUNCTIONS", "AggregateFunction"]


@dataclass(frozen=True, slots=True)
class AggregateFunction:
    """An aggregate: a state that starts at ``initial`` and folds one value per row."""

    name: str
    """Lower-case name, as a rule author writes it."""
    initial: Any
    """The state of a group that has seen no row (JSON; immutable)."""
    add: Callable[[Any, Any], Any]
    """``add(state, value)``: the state after one more row whose argument is ``value``."""
    result: Callable[[Any], Any]
    """The aggregate's value for a state."""
    valid: Callable[[Any], bool]
    """Whether a value read back from a snapshot is a state of this aggregate."""


def _count(state: int, value: Any) -> int:
    return state if value is None else state + 1


def _sum(state: Any, value: Any) -> Any:
    if not is_number(value):
        return state
    total = value if state is None else state + value
    # A float sum that overflowed stays NULL from there on rather than infinite.
    return total if not isinstance(total, float) or math.isfinite(total) else state


def _average(state: Any, value: Any) -> Any:
    if not is_number(value):
        return state
    total = state[0] + value
    if isinstance(total, float) and not math.isfinite(total):
        return state
    return [total, state[1] + 1]


def _mean(state: Any) -> float | None:
    total, count = state
    if not count:
        return None
    try:
        return float(total / count)
    except OverflowError:  # an int sum too large for a float
        return None


def _extreme(better: Callable[[Any, Any], bool]) -> Callable[[Any, Any], Any]:
    def add(state: Any, value: Any) -> Any:
        if not (is_number(value) or isinstance(value, str)):
            return state
        if state is None:
            return value
        if is_number(state) != is_number(value):
            return state  # another kind than the group's first value: skipped
        return value if better(value, state) else state

    return add


def _first(state: Any, value: Any) -> Any:
    return value if state is None else state


def _last(state: Any, value: Any) -> Any:
    return state if value is None else value


def _is_count(state: Any) -> bool:
    return isinstance(state, int) and not isinstance(state, bool) and state >= 0


def _is_average(state: Any) -> bool:
    return (
        isinstance(state, list | tuple)
        and len(state) == 2
        and is_number(state[0])
        and _is_count(state[1])
    )


def _identity(state: Any) -> Any:
    return state


def _anything(state: Any) -> bool:
    return True


AGGREGATE_FUNCTIONS: dict[str, AggregateFunction] = {
    function.name: function
    for function in (
        AggregateFunction("count", 0, _count, _identity, _is_count),
        AggregateFunction("sum", None, _sum, _identity, lambda s: s is None or is_number(s)),
        AggregateFunction("avg", (0, 0), _average, _mean, _is_average),
        AggregateFunction(
            "min",
            None,
            _extreme(lambda a, b: a < b),
            _identity,
            lambda s: s is None or is_number(s) or isinstance(s, str),
        ),
        AggregateFunction(
            "max",
            None,
            _extreme(lambda a, b: a > b),
            _identity,
            lambda s: s is None or is_number(s) or isinstance(s, str),
        ),
        AggregateFunction("first", None, _first, _identity, _anything),
        AggregateFunction("last", None, _last, _identity, _anything),
    )
}
"""The aggregates, by lower-case name (which is also sqlglot's key for their nodes)."""
