"""Serial-number arithmetic on 32-bit counters (RFC 1982).

AIRC timestamps are microseconds in a u32, so they wrap every 2**32 us (about 71.6 minutes),
and sequence numbers wrap after 2**32 frames. Plain ``<`` on such values is wrong across the
wrap; these helpers compare and subtract them as points on a circle, which is right as long as
the two values are less than 2**31 apart.
"""

from __future__ import annotations

__all__ = ["SERIAL_BITS", "serial_add", "serial_diff", "serial_lt"]

SERIAL_BITS = 32
_MODULO = 1 << SERIAL_BITS
_HALF = 1 << (SERIAL_BITS - 1)
_MASK = _MODULO - 1


def serial_diff(a: int, b: int) -> int:
    """``a - b`` as a signed distance in ``[-2**31, 2**31)``."""
    return ((a - b + _HALF) & _MASK) - _HALF


def serial_lt(a: int, b: int) -> bool:
    """True if ``a`` comes before ``b``."""
    return serial_diff(a, b) < 0


def serial_add(a: int, n: int) -> int:
    """``a + n`` wrapped into 32 bits (``n`` may be negative)."""
    return (a + n) & _MASK
