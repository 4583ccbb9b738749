"""`AuthGuard`: failed authentications are rate-limited per client address, on every wire.

Each address has a bucket of `AuthGuardConfig.burst` failures that refills at
``per_min`` a minute. A refused credential (a wrong key or token, a refused certificate
identity) spends one; while the bucket is empty, every authentication from that address is
refused at once with ``too_many_requests`` (HTTP 429 with ``Retry-After``, WebSocket close
4429, gRPC ``RESOURCE_EXHAUSTED``, an AIRC ``ERROR``), the right key included: guessing
costs time, and what a guesser sends is never checked against the keys. Counted on
``/metrics`` (`airlane_auth_failures_total`, `airlane_auth_refused_total`).

Addresses are kept in a bounded table (`MAX_ADDRESSES`, least recently used dropped first).
Clients behind one NAT share an address, and so a budget: the defaults leave room for many.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from airlane.core.errors import AirlaneError, ErrorCode
from airlane.gateway.buckets import TokenBuckets

__all__ = ["MAX_ADDRESSES", "AuthGuard", "AuthGuardConfig"]

MAX_ADDRESSES = 100_000
"""Client addresses whose failures are remembered."""


@dataclass(frozen=True, slots=True)
class AuthGuardConfig:
    """``[auth_guard]``: how many failed authentications an address may make."""

    per_min: float = 60.0
    """Failures an address may make per minute, on average (0: no limit)."""
    burst: int = 60
    """Failures an address may make at once."""

    def __post_init__(self) -> None:
        if self.per_min < 0 or self.burst < 1:
            raise ValueError("[auth_guard] per_min must be 0 (off) or more, burst 1 or more")


class AuthGuard(Collector):
    """Failed authentications per client address (see the module docstring)."""

    def __init__(
        self, config: AuthGuardConfig | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.config = config or AuthGuardConfig()
        self._on = self.config.per_min > 0
        self._buckets = TokenBuckets(
            self.config.per_min / 60.0, self.config.burst, clock, MAX_ADDRESSES
        )
        self.failures = 0
        self.refused = 0

    def check(self, address: str | None) -> None:
        """Refuse an authentication from ``address`` while its failures are spent."""
        if address is None or not self._on:
            return
        balance = self._buckets.balance(address)
        if balance < 1.0:
            self.refused += 1
            wait = self._buckets.wait(balance)
            raise AirlaneError(
                f"too many failed authentications from {address}; retry in {wait:.0f} s",
                code=ErrorCode.TOO_MANY_REQUESTS,
                retry_after_s=wait,
            )

    def failed(self, address: str | None) -> None:
        """Count a failed authentication from ``address``."""
        self.failures += 1
        if address is not None and self._on:
            self._buckets.spend(address)

    def collect(self) -> Iterator[Metric]:
        """The counters, for ``/metrics``."""
        yield CounterMetricFamily(
            "airlane_auth_failures", "Failed authentications, every wire.", value=self.failures
        )
        yield CounterMetricFamily(
            "airlane_auth_refused",
            "Authentications refused unchecked: the address's failures were spent.",
            value=self.refused,
        )
