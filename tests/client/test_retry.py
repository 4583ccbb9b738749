"""`RetryPolicy`: bounded, growing, jittered delays, computed without sleeping."""

from __future__ import annotations

import random

import pytest

from airlane.client import RetryPolicy


def test_progress_means_reconnect_at_once() -> None:
    assert RetryPolicy().delay(0) == 0.0


def test_delays_grow_to_the_cap_with_jitter() -> None:
    policy = RetryPolicy(max_retries=10, base_delay_s=0.1, max_delay_s=1.0)
    rng = random.Random(7)
    for failures in range(1, 12):
        ceiling = min(1.0, 0.1 * 2 ** (failures - 1))
        delays = {policy.delay(failures, rng) for _ in range(20)}
        assert all(ceiling / 2 <= d <= ceiling for d in delays)
        assert len(delays) > 1, "jittered"


def test_the_budget_counts_consecutive_failures() -> None:
    policy = RetryPolicy(max_retries=2)
    assert [policy.exhausted(n) for n in range(4)] == [False, False, False, True]


def test_invalid_policies_are_refused() -> None:
    with pytest.raises(ValueError):
        RetryPolicy(max_retries=-1)
    with pytest.raises(ValueError):
        RetryPolicy(base_delay_s=2.0, max_delay_s=1.0)
