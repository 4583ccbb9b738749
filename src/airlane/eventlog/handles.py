"""`GroupHandles`: consumer group handles a gateway node keeps open for remote members.

An HTTP or gRPC member fetches again and again; joining its group anew each time would cost
broker round trips, so the handles stay open, one per (log, group), least recently used out.
A handle older than `RECHECK_S` is joined again at its next use (one round trip): another
node may have deleted the group and created it with other settings meanwhile, which the
handle would otherwise go on serving as if it were the old one.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from airlane.eventlog.base import ConsumerGroup, EventLog

__all__ = ["MAX_GROUP_HANDLES", "RECHECK_S", "GroupHandles"]

MAX_GROUP_HANDLES = 256
"""Consumer group handles a node keeps open for HTTP members (least recently used first out)."""
RECHECK_S = 2.0
"""Seconds a handle is used as it is; after that its next use checks the group again."""


class GroupHandles:
    """Open consumer group handles, one per (log, group), bounded: joining a group costs
    broker round trips, and an HTTP member fetches again and again."""

    def __init__(
        self,
        limit: int = MAX_GROUP_HANDLES,
        *,
        recheck_s: float = RECHECK_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.limit = limit
        self.recheck_s = recheck_s
        self._clock = clock
        # (log, group) -> (the settings it was joined with, when, the handle)
        self._handles: OrderedDict[tuple[str, str], tuple[dict[str, Any], float, ConsumerGroup]] = (
            OrderedDict()
        )

    async def get(
        self, logs: EventLog, log: str, group: str, settings: dict[str, Any]
    ) -> ConsumerGroup:
        """The handle for ``(log, group)``, joined (again) if new, older than ``recheck_s``,
        or if ``settings`` asks for something the open handle was not joined with. That join
        checks them against the group's own; on a conflict
        (`airlane.eventlog.GroupSettingsConflict`) the open handle stays as it was."""
        key = (log, group)
        held = self._handles.get(key)
        now = self._clock()
        if (
            held is not None
            and now - held[1] < self.recheck_s
            and all(held[0].get(k) == v for k, v in settings.items())
        ):
            self._handles.move_to_end(key)
            return held[2]
        handle = await logs.consumer_group(log, group, **settings)
        current = self._handles.get(key)  # a concurrent join may have replaced ``held``
        if current is not None:
            await current[2].aclose()
        self._handles[key] = (settings, now, handle)
        self._handles.move_to_end(key)
        while len(self._handles) > self.limit:
            _, (_, _, oldest) = self._handles.popitem(last=False)
            await oldest.aclose()
        return handle

    async def drop(self, log: str, group: str, handle: ConsumerGroup) -> None:
        """Close ``handle`` (one that failed) and let it go, unless another has taken its
        place meanwhile (a concurrent fetch that already joined afresh keeps its own)."""
        key = (log, group)
        held = self._handles.get(key)
        if held is not None and held[2] is handle:
            del self._handles[key]
        await handle.aclose()

    async def forget(self, log: str, group: str | None = None) -> None:
        """Close the handles of a deleted group (or of every group of a deleted log)."""
        for key in [k for k in self._handles if k[0] == log and group in (None, k[1])]:
            _, _, handle = self._handles.pop(key)
            await handle.aclose()

    async def aclose(self) -> None:
        """Close every handle."""
        while self._handles:
            _, (_, _, handle) = self._handles.popitem()
            await handle.aclose()
