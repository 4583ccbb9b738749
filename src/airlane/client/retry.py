"""`RetryPolicy`: how a client reconnects after a dropped connection.

Pure: the delay for an attempt is computed from the attempt number and a random source passed
in, so the schedule is testable without sleeping. Delays grow exponentially up to a cap, with
"equal jitter" (half fixed, half random) so that many clients dropped at once by one gateway
restart do not reconnect in lockstep, while no delay collapses to zero.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

__all__ = [
    "DEFAULT_BASE_DELAY_S",
    "DEFAULT_MAX_DELAY_S",
    "DEFAULT_MAX_RETRIES",
    "RetryPolicy",
]

DEFAULT_MAX_RETRIES = 8
"""Consecutive failed reconnections before giving up: with the delays below, 12 s of trying
on average (16 s at most), enough to ride out a gateway restart."""

DEFAULT_BASE_DELAY_S = 0.1
"""Delay before the first retry that follows a failure (jittered)."""

DEFAULT_MAX_DELAY_S = 5.0
"""Cap on any single delay."""


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Bounded exponential backoff with jitter.

    A reconnection right after a connection that delivered events is immediate (the gateway
    was fine a moment ago: connection recycling, a proxy timeout); only consecutive attempts
    that deliver nothing back off and count against ``max_retries``.
    """

    max_retries: int = DEFAULT_MAX_RETRIES
    """Consecutive attempts without progress before the client gives up; 0 never retries."""
    base_delay_s: float = DEFAULT_BASE_DELAY_S
    """Delay of the first backed-off attempt, doubled for each further one."""
    max_delay_s: float = DEFAULT_MAX_DELAY_S
    """Upper bound on one delay."""

    def __post_init__(self) -> None:
        if self.max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, not {self.max_retries}")
        if not 0 <= self.base_delay_s <= self.max_delay_s:
            raise ValueError("need 0 <= base_delay_s <= max_delay_s")

    def delay(self, failures: int, rng: random.Random | None = None) -> float:
        """Seconds to wait before the next attempt, after ``failures`` consecutive failures
        (0: the last connection made progress, reconnect at once)."""
        if failures <= 0:
            return 0.0
        ceiling = min(self.max_delay_s, self.base_delay_s * 2.0 ** min(failures - 1, 62))
        return ceiling / 2 + (rng or random).uniform(0, ceiling / 2)

    def exhausted(self, failures: int) -> bool:
        """True if ``failures`` consecutive failures use up the budget."""
        return failures > self.max_retries
