"""The orphan policy: what a stream does when its last subscriber leaves.

Cancel is not disconnect (docs/streams.md). A disconnect only removes a cursor; when no
cursor is left, the policy decides between keeping the producer running for a later resume
(bounded by ``keep_s``), cancelling after a grace period, or cancelling at once.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["DEFAULT_GRACE_S", "DEFAULT_KEEP_S", "OrphanMode", "OrphanPolicy", "OrphanTracker"]

DEFAULT_GRACE_S = 30.0
"""Long enough for a client on a flaky network to reconnect and resume."""
DEFAULT_KEEP_S = 600.0
"""Upper bound on generating for nobody in ``keep`` mode."""


class OrphanMode(enum.StrEnum):
    """The three answers to "nobody is listening"."""

    KEEP = "keep"
    """Keep generating so the result can be fetched later (at most ``keep_s``)."""
    GRACE = "grace"
    """Cancel unless somebody subscribes again within ``grace_s``."""
    CANCEL = "cancel"
    """Cancel as soon as the last subscriber leaves."""


@dataclass(frozen=True, slots=True)
class OrphanPolicy:
    """A stream's orphan policy."""

    mode: OrphanMode = OrphanMode.GRACE
    """Which behaviour applies."""
    grace_s: float = DEFAULT_GRACE_S
    """Grace period in ``grace`` mode."""
    keep_s: float = DEFAULT_KEEP_S
    """How long ``keep`` mode generates without subscribers before cancelling."""

    def delay_s(self) -> float:
        """Seconds from becoming orphaned to cancellation."""
        if self.mode is OrphanMode.CANCEL:
            return 0.0
        if self.mode is OrphanMode.GRACE:
            return self.grace_s
        return self.keep_s


class OrphanTracker:
    """Counts a stream's subscribers and keeps the orphan deadline (seconds, passed in)."""

    __slots__ = ("deadline", "policy", "subscribers")

    def __init__(self, policy: OrphanPolicy, now: float) -> None:
        self.policy = policy
        self.subscribers = 0
        # A stream nobody has subscribed to yet is an orphan from the start; the policy's
        # delay is the window in which its creator must come back for it.
        self.deadline: float | None = now + policy.delay_s()

    def subscribe(self) -> None:
        """A cursor was added: the stream is no longer an orphan."""
        self.subscribers += 1
        self.deadline = None

    def unsubscribe(self, now: float) -> float | None:
        """A cursor was removed; return the new cancellation deadline, if now orphaned."""
        self.subscribers = max(0, self.subscribers - 1)
        if self.subscribers == 0:
            self.deadline = now + self.policy.delay_s()
        return self.deadline

    def expired(self, now: float) -> bool:
        """True if the stream has been orphaned for longer than the policy allows."""
        return self.deadline is not None and now >= self.deadline
