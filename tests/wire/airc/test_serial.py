"""RFC 1982 serial-number arithmetic on u32.

Invariant: for any ``a`` and any ``|n| < 2**31``, ``serial_diff(serial_add(a, n), a) == n``
and ``serial_lt`` agrees with the sign of that difference, across the 2**32 wrap.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airlane.wire.airc.serial import SERIAL_BITS, serial_add, serial_diff, serial_lt

from ..chunking import PROPERTY

WRAP = 1 << 32
HALF = 1 << 31
u32 = st.integers(0, WRAP - 1)


def test_serial_bits() -> None:
    assert SERIAL_BITS == 32


@pytest.mark.parametrize(
    ("a", "b", "diff"),
    [
        (0, 0, 0),
        (5, 3, 2),
        (3, 5, -2),
        (0, WRAP - 1, 1),  # 0 comes right after 2**32 - 1
        (WRAP - 1, 0, -1),
        (10, WRAP - 10, 20),
        (WRAP - 10, 10, -20),
        (HALF - 1, 0, HALF - 1),  # the farthest "after"
        (HALF + 1, 0, -(HALF - 1)),  # one past it reads as before
    ],
)
def test_serial_diff(a: int, b: int, diff: int) -> None:
    assert serial_diff(a, b) == diff
    assert serial_lt(a, b) == (diff < 0)


# RFC 1982 section 5.2 works its examples in an 8-bit space; scaled by 2**24 they keep the
# same places on the 32-bit circle, so the same relations must hold.
SCALE = 1 << 24
RFC1982_GREATER = [
    (1, 0), (44, 0), (100, 0), (100, 44), (200, 100), (255, 200), (0, 255), (100, 255),
    (0, 200), (44, 200),
]  # fmt: skip


@pytest.mark.parametrize(("later", "earlier"), RFC1982_GREATER)
def test_rfc1982_comparisons(later: int, earlier: int) -> None:
    assert serial_lt(earlier * SCALE, later * SCALE)
    assert not serial_lt(later * SCALE, earlier * SCALE)
    assert serial_diff(later * SCALE, earlier * SCALE) == ((later - earlier) % 256) * SCALE


@pytest.mark.parametrize(("a", "n", "total"), [(255, 1, 0), (100, 100, 200), (200, 100, 44)])
def test_rfc1982_additions(a: int, n: int, total: int) -> None:
    assert serial_add(a * SCALE, n * SCALE) == total * SCALE


def test_half_way_is_undefined_but_consistent() -> None:
    # RFC 1982 leaves a and a + 2**31 uncomparable; serial_diff reads it as -2**31, so
    # neither "after" holds and the result stays in [-2**31, 2**31).
    assert serial_diff(HALF, 0) == -HALF
    assert serial_diff(0, HALF) == -HALF


@pytest.mark.parametrize(
    ("a", "n", "result"),
    [(0, 1, 1), (WRAP - 1, 1, 0), (WRAP - 1, 2, 1), (0, -1, WRAP - 1), (5, -10, WRAP - 5)],
)
def test_serial_add(a: int, n: int, result: int) -> None:
    assert serial_add(a, n) == result


@PROPERTY
@given(u32, st.integers(-(HALF - 1), HALF - 1))
def test_add_then_diff(a: int, n: int) -> None:
    b = serial_add(a, n)
    assert 0 <= b < WRAP
    assert serial_diff(b, a) == n
    assert serial_diff(a, b) == -n
    assert serial_lt(a, b) == (n > 0)
    assert serial_lt(b, a) == (n < 0)


@PROPERTY
@given(u32, u32)
def test_diff_range(a: int, b: int) -> None:
    diff = serial_diff(a, b)
    assert -HALF <= diff < HALF
    assert serial_add(b, diff) == a
