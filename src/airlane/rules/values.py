"""Values and NULL: what every operator and function does with the values it is given.

Rows are JSON, so a value is NULL (``None``), a boolean, a number (``int`` or ``float``), a
string, a list or an object (``dict``). These are its *kinds*; a boolean is not a number.

Nothing a row holds makes an expression raise. An operator or function given a value of a kind
it does not take returns NULL, and NULL spreads:

- a missing field, or a path through something that is not an object (``a.b`` where ``a`` is
  a number), is NULL;
- arithmetic (``+ - * / %``) takes numbers; anything else, NULL included, gives NULL, and so
  do division or ``%`` by zero and a result that is not a finite number. ``/`` always divides
  exactly (``5 / 2`` is 2.5); ``%`` takes the sign of the dividend, as in SQL (``-7 % 3`` is
  -1). Strings are joined with ``||`` or ``concat``, never ``+``;
- ``=`` and ``<>`` compare two values of the same kind (lists and objects deeply; 1 and 1.0 are
  equal); ``<``, ``<=``, ``>``, ``>=`` order two numbers or two strings (by code point). Any
  other pair, NULL included, compares as NULL: ``1 = '1'`` is NULL, not false;
- AND, OR and NOT use SQL's three-valued logic over booleans (``false AND NULL`` is false,
  ``true OR NULL`` is true); a value that is not a boolean counts as NULL there, so
  ``WHERE 1`` keeps no row. WHERE and HAVING keep a row only when the condition is true;
- ``x IN (...)`` is true when one item equals ``x``, NULL when none does but a comparison was
  NULL, false otherwise; ``BETWEEN`` is ``>=`` AND ``<=``; LIKE and ILIKE take strings.

CAST converts or gives NULL: to ``int`` (a number is truncated toward zero; a string is read
as a number first; true is 1), ``float``, ``string`` (numbers in Python's shortest form,
booleans as ``true``/``false``, lists and objects as compact JSON) and ``bool`` (a number is
true when not zero; the strings ``true``/``false``/``1``/``0`` in any case).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from functools import lru_cache
from typing import Any

__all__ = [
    "arithmetic",
    "compare",
    "equal",
    "is_number",
    "kind",
    "like",
    "logical_and",
    "logical_not",
    "logical_or",
    "round_half_away",
    "to_bool",
    "to_float",
    "to_int",
    "to_string",
    "truth",
]

NULL = "null"
BOOLEAN = "boolean"
NUMBER = "number"
STRING = "string"
LIST = "list"
OBJECT = "object"

_KINDS: dict[type, str] = {
    type(None): NULL,
    bool: BOOLEAN,
    int: NUMBER,
    float: NUMBER,
    str: STRING,
    list: LIST,
    tuple: LIST,
    dict: OBJECT,
}


def kind(value: object) -> str:
    """The JSON kind of ``value``: null, boolean, number, string, list or object (a value of
    another Python type, which JSON never produces, is named by its type)."""
    found = _KINDS.get(type(value))
    if found is not None:
        return found
    # Subclasses (an IntEnum, an OrderedDict) are rare: looked up the slow way.
    for python_type, name in reversed(_KINDS.items()):
        if isinstance(value, python_type):
            return name
    return type(value).__name__


def is_number(value: object) -> bool:
    """Whether ``value`` is a number (an int or float, not a boolean)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def truth(value: object) -> bool | None:
    """``value`` as a truth value: a boolean is itself; anything else is unknown (None)."""
    return value if isinstance(value, bool) else None


def logical_and(left: object, right: object) -> bool | None:
    """SQL AND over `truth` values: false wins over NULL, NULL over true."""
    a, b = truth(left), truth(right)
    if a is False or b is False:
        return False
    return None if a is None or b is None else True


def logical_or(left: object, right: object) -> bool | None:
    """SQL OR over `truth` values: true wins over NULL, NULL over false."""
    a, b = truth(left), truth(right)
    if a is True or b is True:
        return True
    return None if a is None or b is None else False


def logical_not(value: object) -> bool | None:
    """SQL NOT: NULL stays NULL."""
    a = truth(value)
    return None if a is None else not a


def equal(left: object, right: object) -> bool | None:
    """``left = right``: NULL unless both are of one kind."""
    if left is None or right is None:
        return None
    if kind(left) != kind(right):
        return None
    try:
        return bool(left == right)
    except RecursionError:  # lists or objects nested deeper than Python compares
        return None


_ORDER: dict[str, Callable[[Any, Any], bool]] = {
    "lt": lambda a, b: a < b,
    "lte": lambda a, b: a <= b,
    "gt": lambda a, b: a > b,
    "gte": lambda a, b: a >= b,
}


def compare(op: str, left: object, right: object) -> bool | None:
    """``left <op> right`` for op in eq, neq, lt, lte, gt, gte; NULL across kinds."""
    if op == "eq":
        return equal(left, right)
    if op == "neq":
        same = equal(left, right)
        return None if same is None else not same
    if left is None or right is None:
        return None
    if is_number(left) and is_number(right):
        return _ORDER[op](left, right)
    if isinstance(left, str) and isinstance(right, str):
        return _ORDER[op](left, right)
    return None


def _divide(a: float, b: float) -> float | None:
    return None if b == 0 else a / b


def _modulo(a: float, b: float) -> float | None:
    if b == 0:
        return None
    # SQL's remainder takes the dividend's sign; Python's % takes the divisor's.
    remainder = abs(a) % abs(b)
    return -remainder if a < 0 else remainder


_ARITHMETIC: dict[str, Callable[[Any, Any], Any]] = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": _divide,
    "mod": _modulo,
}


def arithmetic(op: str, left: object, right: object) -> Any:
    """``left <op> right`` for op in add, sub, mul, div, mod: numbers only, NULL otherwise,
    NULL for a zero divisor or a result that is not a finite number."""
    if not (is_number(left) and is_number(right)):
        return None
    try:
        result = _ARITHMETIC[op](left, right)
    except (ArithmeticError, ValueError):  # float overflow, int too large for a float
        return None
    if isinstance(result, float) and not math.isfinite(result):
        return None
    return result


def to_int(value: object) -> int | None:
    """CAST(value AS int): truncates numbers, reads strings, true is 1; NULL otherwise."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if math.isfinite(value) else None
    if isinstance(value, str):
        text = value.strip()
        try:
            return int(text)
        except ValueError:
            number = to_float(text)
            return None if number is None else int(number)
    return None


def to_float(value: object) -> float | None:
    """CAST(value AS float): numbers, numeric strings, true is 1.0; NULL otherwise."""
    if isinstance(value, bool | int | float):
        try:
            result = float(value)
        except OverflowError:
            return None
    elif isinstance(value, str):
        try:
            result = float(value.strip())
        except ValueError:
            return None
    else:
        return None
    return result if math.isfinite(result) else None


def to_string(value: object) -> str | None:
    """CAST(value AS string): text of any value but NULL (see the module docstring)."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    try:
        if isinstance(value, int | float):
            return repr(value)
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        # An int past Python's 4300-digit conversion limit, an object with keys JSON cannot
        # have, a value nested deeper than the encoder goes.
        return None


_TRUE_WORDS = {"true": True, "1": True, "false": False, "0": False}


def to_bool(value: object) -> bool | None:
    """CAST(value AS bool): booleans, numbers (non-zero is true), true/false/1/0 strings."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return value != 0
    if isinstance(value, str):
        return _TRUE_WORDS.get(value.strip().lower())
    return None


def round_half_away(value: object, digits: int = 0) -> int | float | None:
    """SQL ROUND: halves go away from zero (2.5 -> 3, -2.5 -> -3), decided on the number as
    written (2.675 -> 2.68), not on its binary approximation. No digits gives an int."""
    if not is_number(value) or not -15 <= digits <= 15:
        return None
    try:
        exact = Decimal(repr(value)).quantize(Decimal(1).scaleb(-digits), ROUND_HALF_UP)
    except (InvalidOperation, ValueError):  # inf or nan, or too many digits for the context
        return None
    if digits == 0 or (digits < 0 and isinstance(value, int)):
        return int(exact)
    return float(exact)


def like(value: object, pattern: object, *, ignore_case: bool, escape: str | None) -> bool | None:
    """``value LIKE pattern``: ``%`` matches any run of characters, ``_`` any one; ``escape``
    makes the next character literal. NULL unless both are strings."""
    if not isinstance(value, str) or not isinstance(pattern, str):
        return None
    return like_regex(pattern, ignore_case, escape).fullmatch(value) is not None


@lru_cache(maxsize=256)
def like_regex(pattern: str, ignore_case: bool, escape: str | None) -> re.Pattern[str]:
    """The regular expression equivalent to a LIKE pattern; at most 256 are kept."""
    parts: list[str] = []
    literal_next = False
    for char in pattern:
        if literal_next:
            parts.append(re.escape(char))
            literal_next = False
        elif escape is not None and char == escape:
            literal_next = True
        elif char == "%":
            parts.append(".*")
        elif char == "_":
            parts.append(".")
        else:
            parts.append(re.escape(char))
    if literal_next:  # a trailing escape stands for itself
        parts.append(re.escape(escape or ""))
    flags = re.DOTALL | (re.IGNORECASE if ignore_case else 0)
    return re.compile("".join(parts), flags)
