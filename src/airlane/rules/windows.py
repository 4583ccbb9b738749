"""Windows: the rows an aggregate is computed over, and when its result comes out.

A rule that aggregates names one window in its GROUP BY, as eKuiper writes them: a unit, then
whole numbers of that unit. Units: ``ms`` (milliseconds), ``ss`` (seconds), ``mi`` (minutes),
``hh`` (hours).

``TUMBLINGWINDOW(unit, size)``
    Back-to-back windows ``[k*size, (k+1)*size)``, aligned to time 0 (with Unix times, to the
    epoch: ``TUMBLINGWINDOW(mi, 1)`` closes on every whole minute). Each row is in one.
``HOPPINGWINDOW(unit, size, hop)``
    Windows of ``size`` that start every ``hop``: ``[k*hop, k*hop + size)``, aligned to time 0.
    They overlap when ``hop < size``; each row is in ``size / hop`` of them (rounded up, at
    most `MAX_WINDOWS_PER_ROW`). ``hop`` may not exceed ``size``: rows between windows would
    belong to none.
``SLIDINGWINDOW(unit, size)``
    One window per arriving row: the rows of its group whose time is in ``(ts - size, ts]``.

A tumbling or hopping window is emitted when the clock reaches its end; a sliding window when
its row arrives (`airlane.rules.engine` says how). Each output row carries ``window_start`` and
``window_end``, in seconds (for a sliding window, ``ts - size`` and ``ts``).

Times are held as whole milliseconds (`to_ms`), so window boundaries are exact whatever binary
fraction a time in seconds has; a time's sub-millisecond part does not move it across one.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from airlane.rules.errors import RuleError
from airlane.rules.syntax import Node, sql_of

__all__ = [
    "MAX_WINDOWS_PER_ROW",
    "MAX_WINDOW_MS",
    "UNITS_MS",
    "WINDOW_COLUMNS",
    "WINDOW_END",
    "WINDOW_FUNCTIONS",
    "WINDOW_START",
    "WindowKind",
    "WindowSpec",
    "is_window_call",
    "to_ms",
    "window_from_call",
]

WINDOW_START = "window_start"
"""Column (and output field) holding the window's start, in seconds."""
WINDOW_END = "window_end"
"""Column (and output field) holding the window's end, in seconds."""
WINDOW_COLUMNS = (WINDOW_START, WINDOW_END)
"""Both window columns, in the order they are added to an output row."""

UNITS_MS = {"ms": 1, "ss": 1_000, "mi": 60_000, "hh": 3_600_000}
"""Milliseconds per window unit."""
MAX_WINDOW_MS = 7 * 24 * 3_600_000
"""Longest window: a week. A longer one holds its groups' state, or a sliding window's rows,
for longer than a process is expected to run between restarts."""
MAX_WINDOWS_PER_ROW = 100
"""Most hopping windows one row may join (``size / hop``): each holds its own state per group,
so the ratio multiplies a rule's memory and the work per row."""


class WindowKind(enum.Enum):
    """The three kinds of window."""

    TUMBLING = "tumbling"
    HOPPING = "hopping"
    SLIDING = "sliding"


WINDOW_FUNCTIONS = {
    "tumblingwindow": WindowKind.TUMBLING,
    "hoppingwindow": WindowKind.HOPPING,
    "slidingwindow": WindowKind.SLIDING,
}
"""The window functions of GROUP BY, by lower-case name."""
_OTHER_EKUIPER_WINDOWS = frozenset({"countwindow", "sessionwindow", "statewindow"})


@dataclass(frozen=True, slots=True)
class WindowSpec:
    """One window of a rule, its lengths in whole milliseconds."""

    kind: WindowKind
    """Tumbling, hopping or sliding."""
    size_ms: int
    """Length of each window."""
    hop_ms: int
    """Distance between the starts of consecutive windows: ``size_ms`` for a tumbling
    window; for a sliding window, which starts one window per row, also ``size_ms``."""

    def __post_init__(self) -> None:
        if not 1 <= self.size_ms <= MAX_WINDOW_MS:
            raise ValueError(f"a window lasts 1 ms to {MAX_WINDOW_MS} ms, not {self.size_ms}")
        if not 1 <= self.hop_ms <= self.size_ms:
            raise ValueError(f"a window's hop is 1 ms to its size, not {self.hop_ms}")
        if self.kind is not WindowKind.HOPPING and self.hop_ms != self.size_ms:
            raise ValueError("only a hopping window has a hop apart from its size")
        if math.ceil(self.size_ms / self.hop_ms) > MAX_WINDOWS_PER_ROW:
            raise ValueError(f"size / hop is at most {MAX_WINDOWS_PER_ROW}")

    @property
    def size_s(self) -> float:
        """Length of each window, in seconds."""
        return self.size_ms / 1000

    def starts_ms(self, ts_ms: int) -> range:
        """Starts of the tumbling or hopping windows holding time ``ts_ms``, earliest first."""
        last = ts_ms // self.hop_ms * self.hop_ms
        # Window [s, s + size) holds ts exactly when ts - size < s <= ts: counting back from
        # the last start, ceil((size - (ts - last)) / hop) starts qualify.
        count = -(-(self.size_ms - (ts_ms - last)) // self.hop_ms)
        return range(last - (count - 1) * self.hop_ms, last + 1, self.hop_ms)


def to_ms(seconds: float) -> int:
    """``seconds`` as whole milliseconds, rounded down; first rounded to the microsecond so
    that 4.35 (4349.999... ms in binary) is 4350 ms, as written."""
    return math.floor(round(seconds * 1000.0, 3))


def is_window_call(node: Node) -> bool:
    """Whether ``node`` calls a window function (eKuiper's, supported or not)."""
    if node.key != "anonymous":
        return False
    name = str(node.name).lower()
    return name in WINDOW_FUNCTIONS or name in _OTHER_EKUIPER_WINDOWS


def window_from_call(node: Node) -> WindowSpec:
    """The window a GROUP BY window call names; `RuleError` saying what is wrong with it."""
    name = str(node.name).lower()
    kind = WINDOW_FUNCTIONS.get(name)
    if kind is None:
        raise RuleError(
            f"{str(node.name).upper()} is not supported; "
            "use TUMBLINGWINDOW, HOPPINGWINDOW or SLIDINGWINDOW"
        )
    arguments = list(node.expressions)
    wanted = 3 if kind is WindowKind.HOPPING else 2
    usage = "(unit, size, hop)" if kind is WindowKind.HOPPING else "(unit, size)"
    if len(arguments) != wanted:
        raise RuleError(f"{name.upper()} takes {usage}, not {sql_of(node)}")
    unit = _unit(arguments[0], node)
    size_ms = _length(arguments[1], unit, "size", node)
    hop_ms = _length(arguments[2], unit, "hop", node) if kind is WindowKind.HOPPING else size_ms
    if size_ms > MAX_WINDOW_MS:
        raise RuleError(f"{sql_of(node)}: a window lasts at most a week (168 hh)")
    if hop_ms > size_ms:
        raise RuleError(f"{sql_of(node)}: the hop may not exceed the size")
    if math.ceil(size_ms / hop_ms) > MAX_WINDOWS_PER_ROW:
        raise RuleError(
            f"{sql_of(node)}: size / hop is at most {MAX_WINDOWS_PER_ROW} "
            "(every row is added to that many windows)"
        )
    return WindowSpec(kind, size_ms, hop_ms)


def _unit(argument: Node, call: Node) -> int:
    if argument.key == "column" and len(argument.parts) == 1:
        text = str(argument.name)
    elif argument.key == "literal" and argument.is_string:
        text = str(argument.this)
    else:
        text = sql_of(argument)
    factor = UNITS_MS.get(text.lower())
    if factor is None:
        raise RuleError(f"{sql_of(call)}: unknown window unit {text!r}; use ms, ss, mi or hh")
    return factor


def _length(argument: Node, unit_ms: int, what: str, call: Node) -> int:
    count: int | None = None
    if argument.key == "literal" and not argument.is_string:
        try:
            count = int(str(argument.this))
        except ValueError:
            count = None
    if count is None or count <= 0:
        raise RuleError(
            f"{sql_of(call)}: the window {what} must be a positive whole number of units, "
            f"not {sql_of(argument)}"
        )
    return count * unit_ms
