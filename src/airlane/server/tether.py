"""`tethered`: child processes that end when the process that started them dies, however
it dies.

``airlane serve --workers`` starts its workers and a broker in sessions of their own (a
terminal's Ctrl-C must reach the supervisor alone, which stops them in order). Killed with
SIGKILL, the supervisor stops nothing: its children would go on serving the port and
holding the broker's store, and the next ``airlane serve`` there would share both with
them. On Linux each child asks, between ``fork`` and ``exec``, to be sent SIGTERM when its
parent dies (``PR_SET_PDEATHSIG``), and ends at once where the parent died before it asked.
Elsewhere children are started as they always were.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable

__all__ = ["tethered"]

_PR_SET_PDEATHSIG = 1


def tethered() -> Callable[[], None] | None:
    """A ``preexec_fn`` that ties a child to this process's life (SIGTERM when it dies);
    None where the system has no such thing."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()
    sigterm = int(signal.SIGTERM)

    def tie() -> None:
        # Runs in the child between fork and exec: two calls, nothing that could wait.
        prctl(_PR_SET_PDEATHSIG, sigterm, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the request: none will come
            os._exit(1)

    return tie
