"""``[rules]``: where rules are kept and the bounds they run within."""

from __future__ import annotations

from dataclasses import dataclass

from airlane.rules import DEFAULT_MAX_GROUPS, DEFAULT_MAX_WINDOW_ROWS

__all__ = ["RulesConfig"]


@dataclass(frozen=True, slots=True)
class RulesConfig:
    """The rule service's settings (``[rules]`` in the configuration file)."""

    dir: str | None = None
    """Where each rule's definition and state are kept (one file per rule); None: in memory
    only. ``airlane serve`` keeps them in ``.airlane/rules`` unless told otherwise."""
    max_rules: int = 100
    """Rules one node runs, all tenants together."""
    max_groups: int = DEFAULT_MAX_GROUPS
    """Groups per window (`airlane.rules.RuleRunner`)."""
    max_window_rows: int = DEFAULT_MAX_WINDOW_ROWS
    """Rows a sliding window keeps."""
    max_pending: int = 1000
    """Rows one rule holds for approval; a row past that is rejected (and counted)."""
    output_retention: int = 100_000
    """Rows a rule's output log keeps."""
    input_retention: int = 100_000
    """Messages a topic filter rule's input log keeps."""
    late_s: float = 0.5
    """How long after a window's end a rule that has read everything waits for rows stored
    before that end (still on their way) before it closes the window."""
    ack_wait_s: float = 30.0
    """How long a rule has to save a batch it read before its source sends it again."""
    max_test_messages: int = 10_000
    """Messages one ``rules test`` call may feed."""

    def __post_init__(self) -> None:
        for name in ("max_rules", "max_groups", "max_window_rows", "max_pending"):
            if getattr(self, name) < 1:
                raise ValueError(f"[rules] {name} must be at least 1")
        for name in ("output_retention", "input_retention", "max_test_messages"):
            if getattr(self, name) < 1:
                raise ValueError(f"[rules] {name} must be at least 1")
        if not self.late_s >= 0:
            raise ValueError("[rules] late_s must be 0 or more")
        if not self.ack_wait_s > 0:
            raise ValueError("[rules] ack_wait_s must be above 0")
