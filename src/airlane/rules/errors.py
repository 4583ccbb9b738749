"""The rule engine's errors: two `airlane.core.errors.AirlaneError` subclasses, each also a
`ValueError`, and each somebody else's fault.

Exceptions::

    AirlaneError
    ├── BadRequest
    │   └── RuleError       the rule's SQL is wrong: syntax, an unknown function, an aggregate
    │                       in WHERE, a bad window... (invalid_request, param "sql")
    └── SnapshotError       a snapshot handed to `RuleRunner.restore` is malformed, too large
                            for the runner's bounds, or was taken of another rule
                            (internal_error: snapshots are Airlane's own stored state)

A `RuleError` is the rule author's fault and says what to change; it is raised by
`compile_rule` and `compile_expression`, never while rows flow. Data never raises: a row whose
values do not fit an expression (a string where a number was expected, a missing field, a
division by zero) makes that expression NULL (see `airlane.rules.values`). Misuse of the API by
the calling code (a clock reading that is not a finite number, a row that is not a mapping)
raises the built-in `TypeError` or `ValueError`.
"""

from __future__ import annotations

from airlane.core.errors import AirlaneError, BadRequest

__all__ = ["RuleError", "SnapshotError"]


class RuleError(BadRequest, ValueError):
    """The rule's SQL cannot be run; ``str()`` says what is wrong and, where the parser knows
    it, where (``line`` and ``column``, 1-based)."""

    def __init__(self, message: str, *, line: int | None = None, column: int | None = None):
        super().__init__(message, param="sql")
        self.line = line
        """Line of the offending text (1-based), when known."""
        self.column = column
        """Column of the offending text (1-based), when known."""


class SnapshotError(AirlaneError, ValueError):
    """A snapshot cannot be restored: it is not what `RuleRunner.snapshot` writes, it was taken
    of another rule, or it holds more than the restoring runner's bounds allow."""
