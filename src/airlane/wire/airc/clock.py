r"""NTP-style clock offset between two AIRC peers, from four wrapping timestamps.

Each peer stamps frames with microseconds since its own session start, in a u32 that wraps
every ~71.6 minutes. One round trip gives four timestamps (RFC 5905 section 8)::

    client   t1 ----------------------------> t4
                 \                          /
    server        t2 ------------------> t3

- t1: the client sends (the ``TimeRequest`` / ``GenRequest`` frame's header timestamp),
- t2: the server receives it (``receive_ts``), on the server's clock,
- t3: the server sends its answer (that frame's header timestamp),
- t4: the client receives the answer, on the client's clock.

Then, with ``offset`` = server clock minus client clock::

    offset = ((t2 - t1) + (t3 - t4)) / 2
    delay  = (t4 - t1) - (t3 - t2)

``delay`` is the round trip minus the server's hold time. The offset is exact when the two
one-way delays are equal; otherwise it is off by half their difference, and that difference
is at most ``delay``. So the sample with the smallest delay bounds the error most tightly,
which is why `ClockEstimator` reports the offset of the minimum-delay sample of a recent
window rather than an average (NTP's clock filter does the same).

Every difference is taken with `serial_diff`, so the results are right across the 2**32
wrap as long as each difference is under 2**31 us (~35.8 minutes) in size.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from airlane.wire.airc.serial import serial_diff

__all__ = ["DEFAULT_WINDOW", "ClockEstimator", "ClockSample", "clock_sample"]

DEFAULT_WINDOW = 8
"""Samples `ClockEstimator` keeps by default, as NTP's clock filter does: enough to catch
one quiet round trip in a burst of congested ones, few enough to follow drift."""


@dataclass(frozen=True, slots=True)
class ClockSample:
    """One round trip's estimate."""

    offset_us: float
    """Server clock minus client clock, in microseconds (a multiple of 0.5)."""
    delay_us: int
    """Round-trip network delay, excluding the server's hold time; the offset's error is at
    most half of it. Negative only if a clock or a timestamp is wrong."""


def clock_sample(t1: int, t2: int, t3: int, t4: int) -> ClockSample:
    """The offset and delay of one exchange (see the module docstring for t1..t4).

    The timestamps are u32 microseconds on two independent wrapping clocks (t1 and t4 on the
    client's, t2 and t3 on the server's); values outside the u32 range are taken mod 2**32.
    """
    offset = (serial_diff(t2, t1) + serial_diff(t3, t4)) / 2
    delay = serial_diff(t4, t1) - serial_diff(t3, t2)
    return ClockSample(offset_us=offset, delay_us=delay)


class ClockEstimator:
    """The current clock offset: the minimum-delay sample among the last ``window``.

    Samples with a negative delay are impossible on honest clocks (the answer would arrive
    before the request left); they are dropped and counted in `rejected` rather than raised,
    since they come from the peer and from the network, not from a bug here.
    """

    def __init__(self, window: int = DEFAULT_WINDOW) -> None:
        if window < 1:
            raise ValueError(f"window must be at least 1, got {window}")
        self._size = window
        self._window: deque[ClockSample] = deque(maxlen=window)
        self.rejected = 0
        """Samples dropped for a negative delay."""

    def add(self, sample: ClockSample) -> bool:
        """Keep ``sample`` (evicting the oldest beyond the window); False if it was rejected."""
        if sample.delay_us < 0:
            self.rejected += 1
            return False
        self._window.append(sample)
        return True

    @property
    def window(self) -> int:
        """How many recent samples are considered."""
        return self._size

    @property
    def samples(self) -> int:
        """Samples held now (at most `window`)."""
        return len(self._window)

    @property
    def best(self) -> ClockSample | None:
        """The minimum-delay sample held (the newest among equals), or None if none is."""
        if not self._window:
            return None
        # min() keeps the first of equal keys; scanning newest first prefers fresh samples.
        return min(reversed(self._window), key=lambda sample: sample.delay_us)

    @property
    def offset_us(self) -> float | None:
        """Server clock minus client clock in microseconds, or None before any sample."""
        best = self.best
        return None if best is None else best.offset_us

    @property
    def delay_us(self) -> int | None:
        """The delay of the sample behind `offset_us` (its error bound is half this)."""
        best = self.best
        return None if best is None else best.delay_us
