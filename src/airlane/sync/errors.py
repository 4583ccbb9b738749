"""What can go wrong in the pure sync layer, and whose fault it is.

Exceptions::

    SyncError                 base of everything raised by airlane.sync (not airlane.sync.yjs);
                              an `airlane.core.errors.AirlaneError`
    ├── RemoteSyncError       a peer sent something this replica refuses; state is unchanged
    │   ├── ClockDriftError   a stamp too far ahead of local wall time (hlc.HybridClock)
    │   └── MalformedError    a stamp, op, delta, edit or snapshot that does not decode
    └── LocalSyncError        the caller used the API wrongly (also a ValueError)
        └── TaskGraphError    a task graph with a cycle or an edge naming an unknown step

A transport turns a `RemoteSyncError` into an error frame for the peer; a `LocalSyncError` is
a bug in the calling code and should surface as one.
"""

from __future__ import annotations

from collections.abc import Sequence

from airlane.core.errors import AirlaneError, ErrorCode

__all__ = [
    "ClockDriftError",
    "LocalSyncError",
    "MalformedError",
    "RemoteSyncError",
    "SyncError",
    "TaskGraphError",
]


class SyncError(AirlaneError):
    """Base class of the errors raised by `airlane.sync`."""

    code = ErrorCode.INTERNAL_ERROR


class RemoteSyncError(SyncError):
    """A peer sent a stamp, operation or state this replica refuses. Nothing was applied."""

    code = ErrorCode.INVALID_SYNC_DATA


class ClockDriftError(RemoteSyncError):
    """A remote stamp is further ahead of local wall time than the clock tolerates.

    Accepting it would drag every later local stamp ahead with it (and let that peer's writes
    win every last-writer-wins race), so the clock refuses it and stays where it was.
    """

    code = ErrorCode.CLOCK_DRIFT

    def __init__(self, remote_wall_ms: int, local_wall_ms: int, max_drift_ms: int) -> None:
        self.remote_wall_ms = remote_wall_ms
        """Wall time of the refused stamp, in ms."""
        self.local_wall_ms = local_wall_ms
        """Local wall time when it arrived, in ms."""
        self.max_drift_ms = max_drift_ms
        """The tolerance it exceeded, in ms."""
        ahead = remote_wall_ms - local_wall_ms
        super().__init__(
            f"remote stamp is {ahead} ms ahead of local wall time (limit {max_drift_ms} ms)"
        )


class MalformedError(RemoteSyncError, ValueError):
    """Encoded sync data (stamp, op, delta, edit, snapshot) that does not decode."""


class LocalSyncError(SyncError, ValueError):
    """The calling code used the sync API wrongly (a bad argument, a broken precondition)."""


class TaskGraphError(LocalSyncError):
    """A task graph that cannot be validated: a cycle, or edges naming unknown steps."""

    def __init__(self, message: str, *, cycle: Sequence[str] = (), unknown: Sequence[str] = ()):
        self.cycle = tuple(cycle)
        """One cycle found, as step names in order (the first repeated at the end)."""
        self.unknown = tuple(unknown)
        """Every step name an edge uses that has no recorded clock."""
        super().__init__(message)
