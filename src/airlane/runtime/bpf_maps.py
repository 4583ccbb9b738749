"""Pinned BPF maps from Python: open one by its path, and look up, update and delete elements.

Just the ``bpf(2)`` commands Airlane needs (``BPF_OBJ_GET``, ``BPF_MAP_LOOKUP_ELEM``,
``BPF_MAP_UPDATE_ELEM``, ``BPF_MAP_DELETE_ELEM``, ``BPF_MAP_GET_NEXT_KEY``) through `ctypes`,
so the gateway can read and feed the maps of ``airlane shaping``'s classifier without a BPF
library. Linux only; every failure is an `OSError` with the kernel's errno.
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform
from pathlib import Path

__all__ = ["PinnedMap", "possible_cpus"]

_SYSCALL = {"x86_64": 321, "aarch64": 280, "armv7l": 386, "riscv64": 280}
_OBJ_GET, _LOOKUP, _UPDATE, _DELETE, _NEXT_KEY = 7, 1, 2, 3, 4
_ATTR_SIZE = 128  # zero-filled: the kernel checks that unused bytes are zero

_libc = ctypes.CDLL(None, use_errno=True)


@functools.cache
def _buffer_type(size: int) -> type[ctypes.Array[ctypes.c_char]]:
    # ctypes makes a new array type per `c_char * n` it is asked for, and a type is a
    # reference cycle: made per call, each would be garbage for the collector (the gateway
    # paces its collector and tests that it finds nothing). A few sizes, kept for good.
    return ctypes.c_char * size


def _buffer(content: bytes | int) -> ctypes.Array[ctypes.c_char]:
    """A zeroed buffer of ``content`` bytes, or one holding ``content``."""
    if isinstance(content, int):
        return _buffer_type(content)()
    buffer = _buffer_type(len(content))()
    ctypes.memmove(buffer, content, len(content))
    return buffer


def _bpf(command: int, attr: ctypes.Array[ctypes.c_char]) -> int:
    number = _SYSCALL.get(platform.machine())
    if number is None:
        raise OSError(f"bpf(2) is not known on {platform.machine()}")
    result = int(_libc.syscall(number, command, ctypes.byref(attr), _ATTR_SIZE))
    if result < 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))
    return result


def _put(attr: ctypes.Array[ctypes.c_char], offset: int, value: int, size: int) -> None:
    ctypes.memmove(ctypes.addressof(attr) + offset, value.to_bytes(size, "little"), size)


def possible_cpus() -> int:
    """How many CPUs a per-CPU map holds a value for (``/sys/devices/system/cpu/possible``)."""
    text = Path("/sys/devices/system/cpu/possible").read_text().strip()
    count = 0
    for part in text.split(","):
        low, _, high = part.partition("-")
        count += int(high or low) - int(low) + 1
    return count


class PinnedMap:
    """A BPF map pinned at ``path``; keys and values are the caller's bytes."""

    def __init__(self, path: Path | str, value_size: int, *, per_cpu: bool = False) -> None:
        self.path = Path(path)
        self.value_size = value_size
        """Bytes of one value (for a per-CPU map: of one CPU's value)."""
        self.per_cpu = per_cpu
        attr = _buffer(_ATTR_SIZE)
        name = _buffer(os.fsencode(self.path) + b"\0")
        _put(attr, 0, ctypes.addressof(name), 8)
        self.fd = _bpf(_OBJ_GET, attr)

    def close(self) -> None:
        """Close the map's descriptor (the pinned map stays)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> PinnedMap:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def lookup(self, key: bytes) -> bytes | None:
        """The value at ``key`` (for a per-CPU map: every CPU's, each padded to 8 bytes), or
        None if there is none."""
        size = self._value_bytes()
        value = _buffer(size)
        try:
            self._element(_LOOKUP, key, value)
        except FileNotFoundError:
            return None
        return value.raw

    def update(self, key: bytes, value: bytes) -> None:
        """Set ``key`` to ``value`` (created or replaced)."""
        self._element(_UPDATE, key, _buffer(value))

    def delete(self, key: bytes) -> bool:
        """Remove ``key``; False if it was not there."""
        try:
            self._element(_DELETE, key, None)
        except FileNotFoundError:
            return False
        return True

    def keys(self, key_size: int, limit: int = 1 << 20) -> list[bytes]:
        """The map's keys (at most ``limit``; a hash map changing meanwhile may skip some)."""
        found: list[bytes] = []
        previous: ctypes.Array[ctypes.c_char] | None = None
        while len(found) < limit:
            attr = _buffer(_ATTR_SIZE)
            following = _buffer(key_size)
            _put(attr, 0, self.fd, 4)
            if previous is not None:  # none: the first key
                _put(attr, 8, ctypes.addressof(previous), 8)
            _put(attr, 16, ctypes.addressof(following), 8)
            try:
                _bpf(_NEXT_KEY, attr)
            except FileNotFoundError:
                break
            found.append(following.raw)
            previous = following
        return found

    def _value_bytes(self) -> int:
        if not self.per_cpu:
            return self.value_size
        return (self.value_size + 7) // 8 * 8 * possible_cpus()

    def _element(self, command: int, key: bytes, value: ctypes.Array[ctypes.c_char] | None) -> None:
        attr = _buffer(_ATTR_SIZE)
        key_buffer = _buffer(key)
        _put(attr, 0, self.fd, 4)
        _put(attr, 8, ctypes.addressof(key_buffer), 8)
        if value is not None:
            _put(attr, 16, ctypes.addressof(value), 8)
        _bpf(command, attr)
