"""`RetryPolicy`: bounded, growing, jittered delays, computed without sleeping; a gateway's
``Retry-After`` sets the least delay."""

from __future__ import annotations

import random

import pytest

from airlane.client import RetryPolicy
from airlane.client.errors import GatewayOverloaded, RequestRejected, rejected
from airlane.client.sse import _backoff, _retry_after_s


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


def test_an_overloaded_refusal_is_typed_and_its_retry_after_sets_the_least_delay() -> None:
    refusal = rejected("busy", status=503, code="overloaded", retry_after_s=2.0)
    assert isinstance(refusal, GatewayOverloaded) and refusal.retry_after_s == 2.0
    assert type(rejected("limit", status=503, code="hub_full")) is RequestRejected
    assert (_retry_after_s("3"), _retry_after_s(" 3 "), _retry_after_s(None)) == (3.0, 3.0, None)
    assert _retry_after_s("Wed, 21 Oct 2026 07:28:00 GMT") is None
    policy = RetryPolicy(base_delay_s=0.01, max_delay_s=5.0)
    assert _backoff(policy, 1, refusal) == 2.0  # asked for more than the policy's delay
    assert _backoff(policy, 1, rejected("busy", code="overloaded", retry_after_s=60.0)) == 5.0
    assert _backoff(policy, 1, None) <= 0.01  # no hint: the policy's own delay
