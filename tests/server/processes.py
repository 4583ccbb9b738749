"""Looking at a supervisor's children while it kills and starts them again."""

from __future__ import annotations

import psutil


def worker_pids(supervisor: psutil.Process) -> set[int]:
    """The process ids of the supervisor's live workers.

    A worker just killed is a zombie until the supervisor reaps it, and one reaped between
    listing and looking is gone: neither is a worker any more, and psutil raises for both
    when asked for its command line.
    """
    pids = set()
    for child in supervisor.children():
        try:
            alive = child.status() != psutil.STATUS_ZOMBIE
            if alive and "airlane.server.worker" in child.cmdline():
                pids.add(child.pid)
        except (psutil.ZombieProcess, psutil.NoSuchProcess):
            continue
    return pids
