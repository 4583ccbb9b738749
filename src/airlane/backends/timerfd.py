"""`TimerFd`: a Linux timer file descriptor on CLOCK_MONOTONIC, for precise wake-ups.

uvloop (libuv) keeps its timers in whole milliseconds and computes how long to wait in its
poll from a clock read at the start of a loop pass, so a timer set for a millisecond wakes the
loop up to another millisecond after it (measured: the pacer's sleepers woke 1.07 ms after
their deadlines at p50, `benchmarks/pacer_lateness.py`). A timerfd set to an absolute
CLOCK_MONOTONIC time in nanoseconds and watched with `loop.add_reader` makes the poll return
when the kernel's high-resolution timer expires. libc's ``timerfd_create`` and
``timerfd_settime`` are called through ctypes (``os.timerfd_*`` exist only from Python 3.13);
`TimerFd.open` returns None where there are none (not Linux), and callers fall back to the
loop's timers.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from typing import Any

__all__ = ["TimerFd"]

_CLOCK_MONOTONIC = 1
_TFD_NONBLOCK = os.O_NONBLOCK
_TFD_CLOEXEC = os.O_CLOEXEC
_TFD_TIMER_ABSTIME = 1


class _Timespec(ctypes.Structure):
    _fields_ = (("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long))


class _Itimerspec(ctypes.Structure):
    _fields_ = (("it_interval", _Timespec), ("it_value", _Timespec))


def _libc_functions() -> tuple[Any, Any] | None:
    """libc's ``timerfd_create`` and ``timerfd_settime``, typed; None without them."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        create, settime = libc.timerfd_create, libc.timerfd_settime
    except (OSError, AttributeError):
        return None
    create.argtypes, create.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    settime.argtypes = (
        ctypes.c_int,
        ctypes.c_int,
        ctypes.POINTER(_Itimerspec),
        ctypes.POINTER(_Itimerspec),
    )
    settime.restype = ctypes.c_int
    return create, settime


_FUNCTIONS = _libc_functions()


class TimerFd:
    """One timerfd: `set_ns` arms it for an absolute ``time.monotonic_ns()`` value; the file
    descriptor becomes readable when that time comes; `clear` consumes the expiry."""

    __slots__ = ("_fd", "_settime", "_spec")

    def __init__(self, fd: int, settime: Any) -> None:
        self._fd = fd
        self._settime = settime
        self._spec = _Itimerspec()  # reused: arming allocates nothing

    @classmethod
    def open(cls) -> TimerFd | None:
        """A new non-blocking, close-on-exec timerfd; None where the system has none."""
        if _FUNCTIONS is None:
            return None
        create, settime = _FUNCTIONS
        fd = create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
        return None if fd < 0 else cls(fd, settime)

    def fileno(self) -> int:
        """The file descriptor, for `loop.add_reader` (-1 once closed)."""
        return self._fd

    def set_ns(self, when_ns: int) -> None:
        """Expire once, at ``when_ns`` on CLOCK_MONOTONIC (at once if that is past).

        Raises:
            OSError: the kernel refused (a closed timer).
        """
        value = self._spec.it_value
        value.tv_sec, value.tv_nsec = divmod(max(when_ns, 1), 1_000_000_000)
        if self._settime(self._fd, _TFD_TIMER_ABSTIME, ctypes.byref(self._spec), None) < 0:
            errno = ctypes.get_errno()
            raise OSError(errno, os.strerror(errno))

    def clear(self) -> None:
        """Consume the expiry, so the descriptor stops being readable until the next one."""
        with contextlib.suppress(BlockingIOError, InterruptedError):
            os.read(self._fd, 8)

    def close(self) -> None:
        """Close the descriptor (idempotent)."""
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)
