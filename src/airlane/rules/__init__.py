"""A streaming SQL rule engine in the manner of eKuiper, sans-I/O.

A rule is one SELECT over one source::

    SELECT deviceId, avg(vibration) AS avg_v, count(*) AS n
    FROM sensors
    WHERE vibration > 0
    GROUP BY deviceId, TUMBLINGWINDOW(ss, 10)
    HAVING avg(vibration) > 3.5

`compile_rule` turns its text into a `RulePlan` (or a `RuleError` saying what to change);
a `RuleRunner` runs the plan over rows, JSON objects with their topic, QoS and time, and
returns output rows: at once for a rule without a window, when a window closes otherwise.
Nothing here reads a clock or does I/O: the caller passes ``now`` in, asks `get_timer` when to
call back, and keeps `snapshot` data to `restore` a runner after a restart.

Where the semantics are written down, for the user documentation to quote:

- `airlane.rules.plan`: what a rule may say, how output rows are named, what is refused;
- `airlane.rules.expressions`: the columns a row offers (payload paths, ``topic``, ``qos``,
  ``ts``, ``payload``, ``topic_level(n)``);
- `airlane.rules.values`: NULL, types and operators (data never raises: it gives NULL);
- `airlane.rules.functions` and `airlane.rules.aggregates`: the functions;
- `airlane.rules.windows`: tumbling, hopping and sliding windows, and their units;
- `airlane.rules.engine`: when output comes out, late rows, bounds, snapshots.
"""

from __future__ import annotations

from airlane.rules.engine import (
    DEFAULT_MAX_GROUPS,
    DEFAULT_MAX_WINDOW_ROWS,
    RuleRunner,
    RuleStats,
)
from airlane.rules.errors import RuleError, SnapshotError
from airlane.rules.expressions import CompiledExpression, Row, compile_expression
from airlane.rules.plan import (
    MAX_GROUP_KEYS,
    MAX_PROJECTIONS,
    MAX_SQL_CHARS,
    Projection,
    RulePlan,
    Source,
    SourceKind,
    compile_rule,
)
from airlane.rules.windows import WINDOW_END, WINDOW_START, WindowKind, WindowSpec

__all__ = [
    "DEFAULT_MAX_GROUPS",
    "DEFAULT_MAX_WINDOW_ROWS",
    "MAX_GROUP_KEYS",
    "MAX_PROJECTIONS",
    "MAX_SQL_CHARS",
    "WINDOW_END",
    "WINDOW_START",
    "CompiledExpression",
    "Projection",
    "Row",
    "RuleError",
    "RulePlan",
    "RuleRunner",
    "RuleStats",
    "SnapshotError",
    "Source",
    "SourceKind",
    "WindowKind",
    "WindowSpec",
    "compile_expression",
    "compile_rule",
]
