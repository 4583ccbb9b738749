"""`reserve_fd_table`: grow the process's file-descriptor table once, at start-up.

Linux keeps a process's open files in a table that starts with room for 64 descriptors and
doubles whenever a new descriptor does not fit (64, 128, 256, ... up to the ``RLIMIT_NOFILE``
soft limit); it never shrinks. When the process has more than one thread (a gateway does: gRPC
starts its own, as do executors), each doubling waits for an RCU grace period
(``expand_fdtable`` calls ``synchronize_rcu``) before the ``accept`` or ``socket`` call that
needed it returns: 8-11 ms measured here, during which the event loop serves nobody. A
gateway taking 500 connections in 150 ms crosses 256 and 512 on the way and stalls twice,
which every stream then running feels as delivery lag (the second VM's paced runs, see
docs/performance-journal.md, "Connection storms").

Growing the table to its working size before the first connection moves those waits to
start-up, where they cost nothing. The price is the table itself: about 8 bytes per slot
(512 KiB for 65,536 slots), which is why the size is bounded rather than the soft limit's
(often 1,048,576 or more).
"""

from __future__ import annotations

import contextlib
import logging
import os

__all__ = ["DEFAULT_RESERVED_FDS", "reserve_fd_table"]

log = logging.getLogger("airlane.server.fdtable")

DEFAULT_RESERVED_FDS = 65_536
"""Descriptors ``airlane serve`` makes room for at start (its ``reserved_fds`` setting)."""


def reserve_fd_table(count: int) -> int:
    """Grow this process's descriptor table to hold ``count`` descriptors (at most the soft
    ``RLIMIT_NOFILE``) by duplicating one descriptor to the top slot and closing it again.

    Returns the number of slots now reserved: the table holds at least that many; 0 when
    nothing was done (``count`` below 1, or a platform without ``fcntl``/``resource``).
    Never raises for a limit it cannot reach: a descriptor table that grows later still
    works, only with the stalls this module's docstring describes.
    """
    if count < 1:
        return 0
    try:
        import fcntl
        import resource
    except ImportError:  # pragma: no cover - Windows has neither, nor this table
        return 0
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY:
        count = min(count, soft)
    # fcntl(F_DUPFD, n) gives the lowest free descriptor >= n; asking for the last slot makes
    # the kernel size the table for it (rounded up to a power of two).
    top = count - 1
    try:
        source = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:  # no descriptor left at all
        log.debug("could not reserve %d descriptor slots: %s", count, exc)
        return 0
    try:
        duplicate = fcntl.fcntl(source, fcntl.F_DUPFD_CLOEXEC, top)
    except OSError as exc:  # EMFILE: every slot from top up is taken; EINVAL: over the limit
        log.debug("could not reserve %d descriptor slots: %s", count, exc)
        return 0
    finally:
        os.close(source)
    with contextlib.suppress(OSError):
        os.close(duplicate)
    return count
