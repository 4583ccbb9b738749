"""`GcTurns`: the workers of one machine take turns at their full garbage-collector passes.

The workers of ``airlane serve --workers`` fill up together (the kernel spreads connections
evenly), so their pacers (`airlane.server.gcpacer`) find a full pass due at about the same
time. Passes that overlap share the cores: measured with six workers of 17,000 connections
each on two cores, a pass took 1.0-1.3 s of CPU and 1.7-5.2 s of time, and every stream of
a worker waits while its pass runs. One pass at a time is as much CPU in all, in pauses
closer to the CPU time.

A turn is an exclusive ``flock`` on one file in the supervisor's directory, taken without
waiting: a worker whose pass is due and finds the lock held tries again at its next tick.
The kernel drops a lock with the process that held it, so a worker killed mid-pass does not
keep the others from collecting.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

__all__ = ["GcTurns", "turns_path"]


def turns_path(directory: Path) -> Path:
    """The lock file of the workers sharing ``directory``."""
    return directory / "gc.turn"


class GcTurns:
    """One process's handle on the shared turn; see the module docstring."""

    def __init__(self, path: Path) -> None:
        """Open the lock file (creating it), so that a directory that cannot hold it fails
        here, at start, rather than at the first pass."""
        self.path = path
        self._fd: int | None = self._open()
        self.holding = False
        """True between a `take` that succeeded and `give_back`."""

    def _open(self) -> int:
        return os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)

    def take(self) -> bool:
        """Take the turn if no other process holds it; True if this one holds it now. After
        `close` the file is opened again (a pacer stopped and started again takes turns as
        before); False if it cannot be."""
        if self.holding:
            return True
        if self._fd is None:
            try:
                self._fd = self._open()
            except OSError:
                return False
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        self.holding = True
        return True

    def give_back(self) -> None:
        """Let the next process take the turn (nothing if this one does not hold it)."""
        if self.holding and self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        self.holding = False

    def close(self) -> None:
        """Give the turn back and close the file (until the next `take`)."""
        self.give_back()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
