"""`TokenBuckets`: token buckets by key, in a bounded table (what the quotas and the failed
authentication guard spend)."""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable

__all__ = ["TokenBuckets"]


class TokenBuckets:
    """``rate`` tokens a second per key, ``burst`` at most (0: one second's worth). At most
    ``max_keys`` keys are kept, the least recently spent dropped first (which only forgets
    a spender's debt)."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float], max_keys: int) -> None:
        self.rate = rate
        self.burst = float(burst or max(1, math.ceil(rate)))
        self._clock = clock
        self._max_keys = max_keys
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def balance(self, key: str) -> float:
        """``key``'s tokens now (below 0 while it repays a debt)."""
        found = self._buckets.get(key)
        if found is None:
            return self.burst
        tokens, then = found
        return min(self.burst, tokens + (self._clock() - then) * self.rate)

    def wait(self, balance: float) -> float:
        """Seconds until a bucket at ``balance`` holds one token."""
        return (1.0 - balance) / self.rate

    def spend(self, key: str, amount: float = 1.0) -> None:
        """Take ``amount`` tokens from ``key``'s bucket, into debt if need be."""
        balance = self.balance(key)
        self._buckets.pop(key, None)
        self._buckets[key] = (balance - amount, self._clock())
        while len(self._buckets) > self._max_keys:
            self._buckets.popitem(last=False)

    def take(self, key: str) -> float:
        """Spend one token of ``key``'s bucket: 0.0 if there was one, else the seconds until
        there is (nothing spent)."""
        balance = self.balance(key)
        if balance < 1.0:
            return self.wait(balance)
        self.spend(key)
        return 0.0
