"""`scratch_dir`: the temporary directory of one ``airlane serve --workers``, and the
removal of those whose supervisor is gone.

The supervisor keeps what its workers share in a temporary directory (the load board, the
hand-over sockets, the broker's ports file) and removes it when it stops. Killed outright
(SIGKILL, the OOM killer) it cannot: its workers and broker follow it
(`airlane.server.tether`), the directory stays. So each directory holds a ``lock`` file that
its supervisor keeps locked (``flock``) for as long as it lives; the kernel lets the lock go
with the process, however it ends. A starting supervisor removes each ``airlane-workers-*``
directory of its user whose lock it can take: nobody is behind it any more. A lock says more
than a pid would: a pid may be reused, or belong to another pid namespace sharing the same
``/tmp``. A directory gets its name only once its lock is held (it is made under another name
and renamed), so one being made is never taken for one left behind.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["PREFIX", "scratch_dir", "sweep_abandoned"]

log = logging.getLogger("airlane.workers")

PREFIX = "airlane-workers-"
"""The names of supervisors' directories in the temporary directory."""
_MAKING = ".airlane-making-"
"""The name a directory has until its lock is held."""


@contextlib.contextmanager
def scratch_dir() -> Iterator[Path]:
    """A new directory of `PREFIX` in the temporary directory, locked while the block runs
    and removed after it; those that supervisors killed outright left are removed first."""
    sweep_abandoned()
    making = Path(tempfile.mkdtemp(prefix=_MAKING))
    lock = -1
    try:
        lock = os.open(making / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(lock, fcntl.LOCK_EX)  # new and unnamed: nobody else can hold it
        path = making.with_name(PREFIX + making.name.removeprefix(_MAKING))
        making.rename(path)
        making = path
        yield path
    finally:
        shutil.rmtree(making, ignore_errors=True)
        if lock >= 0:
            os.close(lock)


def sweep_abandoned(parent: Path | None = None) -> list[Path]:
    """Remove the supervisors' directories in ``parent`` (the temporary directory) that
    this user owns and nobody holds the lock of; the ones removed."""
    parent = Path(tempfile.gettempdir()) if parent is None else parent
    removed: list[Path] = []
    uid = os.getuid()
    for path in parent.glob(PREFIX + "*"):
        try:
            if path.is_symlink() or not path.is_dir() or path.stat().st_uid != uid:
                continue
            fd = os.open(path / "lock", os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            continue  # gone meanwhile, not ours, or without a lock (made before locks)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            continue  # its supervisor lives
        else:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
            log.info("removed %s, left by a supervisor that was killed", path)
        finally:
            os.close(fd)
    return removed
