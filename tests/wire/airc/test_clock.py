"""NTP-style clock offset from four wrapping timestamps.

Invariant: with equal one-way delays the offset is exact and the delay is the round trip
without the server's hold time, wherever the two u32 clocks stand relative to their wrap.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airlane.wire.airc.clock import ClockEstimator, ClockSample, clock_sample

from ..chunking import PROPERTY

WRAP = 1 << 32


def test_known_exchange() -> None:
    # The server's clock is 5000 us ahead; 2000 us each way; the server holds it 300 us.
    # t1 = 1000 (client)          t2 = 1000 + 2000 + 5000 = 8000 (server)
    # t3 = 8000 + 300 = 8300      t4 = 1000 + 2000 + 300 + 2000 = 5300 (client)
    # offset = ((8000 - 1000) + (8300 - 5300)) / 2 = (7000 + 3000) / 2 = 5000
    # delay  = (5300 - 1000) - (8300 - 8000) = 4300 - 300 = 4000
    assert clock_sample(1000, 8000, 8300, 5300) == ClockSample(offset_us=5000, delay_us=4000)


def test_asymmetric_delays_err_by_half_their_difference() -> None:
    # Same clocks, but 1000 us out and 3000 us back:
    # t2 = 1000 + 1000 + 5000 = 7000, t3 = 7300, t4 = 1000 + 1000 + 300 + 3000 = 5300
    # offset = (6000 + 2000) / 2 = 4000: off by (1000 - 3000) / 2, within delay / 2 = 2000.
    assert clock_sample(1000, 7000, 7300, 5300) == ClockSample(offset_us=4000, delay_us=4000)


def test_server_behind_and_half_microseconds() -> None:
    # The server's clock is about 10 ms behind and the round trip takes 1 us:
    # t2 - t1 = -9999, t3 - t4 = -10_000  ->  offset = -19_999 / 2 = -9999.5, delay = 1 - 0
    assert clock_sample(20_000, 10_001, 10_001, 20_001) == ClockSample(-9999.5, 1)


def test_wraparound_matches_unwrapped() -> None:
    # The known exchange shifted so t1 sits 500 us before the client clock wraps and the
    # server's clock has already wrapped: t2..t4 are small numbers again.
    shift = WRAP - 1500
    t1, t2, t3, t4 = ((t + shift) % WRAP for t in (1000, 8000, 8300, 5300))
    assert (t1, t2, t3, t4) == (WRAP - 500, 6500, 6800, 3800)
    assert clock_sample(t1, t2, t3, t4) == clock_sample(1000, 8000, 8300, 5300)


def test_wraparound_on_one_clock_only() -> None:
    # Client clock near its wrap, server clock far away: offset is a serial distance.
    t1 = WRAP - 100
    t4 = 1900  # client clock wrapped: 2000 us after t1
    t2, t3 = 1_000_000, 1_000_000  # no hold time
    sample = clock_sample(t1, t2, t3, t4)
    assert sample.delay_us == 2000
    assert sample.offset_us == 1_000_000 - (t1 + 1000 - WRAP)


@PROPERTY
@given(
    client_start=st.integers(0, WRAP - 1),
    offset=st.integers(-(2**30), 2**30),
    one_way=st.integers(0, 2**28),
    hold=st.integers(0, 2**28),
)
def test_symmetric_delays_give_the_exact_offset(
    client_start: int, offset: int, one_way: int, hold: int
) -> None:
    t1 = client_start % WRAP
    t2 = (client_start + one_way + offset) % WRAP
    t3 = (client_start + one_way + offset + hold) % WRAP
    t4 = (client_start + 2 * one_way + hold) % WRAP
    assert clock_sample(t1, t2, t3, t4) == ClockSample(offset_us=offset, delay_us=2 * one_way)


@PROPERTY
@given(st.lists(st.integers(0, 2**20), min_size=4, max_size=4), st.integers(0, WRAP - 1))
def test_shifting_both_clocks_changes_nothing(times: list[int], shift: int) -> None:
    t1, t2, t3, t4 = times
    shifted = ((t + shift) % WRAP for t in times)
    assert clock_sample(*shifted) == clock_sample(t1, t2, t3, t4)


def test_estimator_starts_empty() -> None:
    estimator = ClockEstimator()
    assert estimator.window == 8
    assert (estimator.samples, estimator.offset_us, estimator.delay_us) == (0, None, None)
    assert estimator.best is None


def test_estimator_picks_the_minimum_delay_sample() -> None:
    estimator = ClockEstimator()
    for sample in (ClockSample(100, 900), ClockSample(250.5, 300), ClockSample(-40, 700)):
        assert estimator.add(sample)
    assert estimator.offset_us == 250.5
    assert estimator.delay_us == 300
    assert estimator.samples == 3


def test_estimator_prefers_the_newest_of_equal_delays() -> None:
    estimator = ClockEstimator()
    estimator.add(ClockSample(1, 500))
    estimator.add(ClockSample(2, 500))
    assert estimator.offset_us == 2


def test_estimator_forgets_samples_beyond_its_window() -> None:
    estimator = ClockEstimator(window=2)
    estimator.add(ClockSample(1, 10))
    estimator.add(ClockSample(2, 50))
    estimator.add(ClockSample(3, 40))
    assert (estimator.samples, estimator.offset_us, estimator.delay_us) == (2, 3, 40)


def test_estimator_rejects_negative_delay() -> None:
    estimator = ClockEstimator()
    assert not estimator.add(ClockSample(1_000_000, -1))
    assert (estimator.rejected, estimator.samples, estimator.offset_us) == (1, 0, None)
    assert estimator.add(ClockSample(7, 0))
    assert not estimator.add(clock_sample(0, 0, 100, 50))  # answered before it was asked
    assert (estimator.rejected, estimator.samples, estimator.offset_us) == (2, 1, 7)


@pytest.mark.parametrize("window", [0, -1])
def test_estimator_window_must_be_positive(window: int) -> None:
    with pytest.raises(ValueError):
        ClockEstimator(window=window)


@PROPERTY
@given(
    st.integers(1, 10),
    st.lists(st.tuples(st.integers(-1000, 1000), st.integers(-5, 1000)), max_size=30),
)
def test_estimator_reports_the_best_recent_sample(window: int, raw: list[tuple[int, int]]) -> None:
    estimator = ClockEstimator(window)
    accepted = [ClockSample(offset, delay) for offset, delay in raw if delay >= 0]
    for offset, delay in raw:
        assert estimator.add(ClockSample(offset, delay)) == (delay >= 0)
    assert estimator.rejected == len(raw) - len(accepted)
    recent = accepted[-window:]
    assert estimator.samples == len(recent)
    if not recent:
        assert estimator.offset_us is None
        return
    best = min(sample.delay_us for sample in recent)
    assert estimator.delay_us == best
    newest_best = [s for s in recent if s.delay_us == best][-1]
    assert estimator.offset_us == newest_best.offset_us
