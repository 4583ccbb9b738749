"""`MeteredSubscription`: a reader whose deliveries are charged to its principal's bytes quota.

Only made where ``[quotas]`` limits bytes delivered (`Quotas.counts_bytes`): otherwise a
reader is the hub's own subscription, at no cost. Each batch handed out is charged what its
events hold (`delivered_bytes`: what retention counts, so the same on every wire). A reader in
debt is slowed, never cut: `poll` hands out nothing and `next_batch` waits until the buckets
have refilled. It never calls back (`listen` says no), so every wire reads it through
`next_batch`, the path that can wait.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from airlane.core import Event, Kind, Position
from airlane.core.events import EVENT_OVERHEAD_BYTES
from airlane.gateway.quotas import Quotas
from airlane.hub import Subscription
from airlane.security import Principal

__all__ = ["MeteredSubscription", "delivered_bytes"]

MAX_NAP_S = 1.0
"""Longest wait before a reader in debt looks at the buckets again (its principal's other
readers spend from them too)."""


def delivered_bytes(events: list[Event]) -> int:
    """What ``events`` hold, as a reader's bytes quota counts it: `Event.size`, and for a
    snapshot (made by the log, its text not counted by ``size``) the text it carries."""
    total = 0
    for event in events:
        total += event.size
        if event.kind is Kind.SNAPSHOT and event.data:
            total += sum(len(text) for text in event.data.get("text", {}).values())
            for call in event.data.get("tool_calls", ()):
                total += len(call.get("arguments", "")) + EVENT_OVERHEAD_BYTES
    return total


class MeteredSubscription(Subscription):
    """``inner``, its deliveries charged to ``principal`` (see the module docstring)."""

    def __init__(self, inner: Subscription, quotas: Quotas, principal: Principal) -> None:
        self._inner = inner
        self._quotas = quotas
        self._principal = principal
        self.stream_id = inner.stream_id
        self.subscriber = inner.subscriber

    @property
    def position(self) -> Position:
        return self._inner.position

    @property
    def finished(self) -> bool:
        return self._inner.finished

    @property
    def exhausted(self) -> bool:
        return self._inner.exhausted

    @property
    def over(self) -> bool:
        return self._inner.over

    @property
    def live_from(self) -> int:
        return self._inner.live_from

    def keep_deltas_apart(self) -> None:
        self._inner.keep_deltas_apart()

    def poll(self, limit: int = 64) -> list[Event]:
        if self._quotas.bytes_wait(self._principal):
            return []
        return self._charged(self._inner.poll(limit))

    async def next_batch(self, limit: int = 64) -> list[Event]:
        # Refilling is time itself: nothing to wait on but the clock. noqa: ASYNC110 for that.
        while wait := self._quotas.bytes_wait(self._principal):  # noqa: ASYNC110
            await asyncio.sleep(min(wait, MAX_NAP_S))
        return self._charged(await self._inner.next_batch(limit))

    def listen(self, callback: Callable[[], object] | None) -> bool:
        if callback is None:
            self._inner.listen(None)
        return False

    def mark_written(self, events: list[Event], now_ns: int) -> None:
        self._inner.mark_written(events, now_ns)

    async def aclose(self) -> None:
        await self._inner.aclose()

    def _charged(self, batch: list[Event]) -> list[Event]:
        if batch:
            self._quotas.charge_bytes(self._principal, delivered_bytes(batch))
        return batch
