"""`GroupHandles`: consumer group handles a gateway node keeps open for remote members.

An HTTP or gRPC member fetches again and again; joining its group anew each time would cost
broker round trips, so the handles stay open, one per (log, group), least recently used out.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from airlane.eventlog.base import ConsumerGroup, EventLog

__all__ = ["MAX_GROUP_HANDLES", "GroupHandles"]

MAX_GROUP_HANDLES = 256
"""Consumer group handles a node keeps open for HTTP members (least recently used first out)."""


class GroupHandles:
    """Open consumer group handles, one per (log, group), bounded: joining a group costs
    broker round trips, and an HTTP member fetches again and again."""

    def __init__(self, limit: int = MAX_GROUP_HANDLES) -> None:
        self.limit = limit
        self._handles: OrderedDict[tuple[str, str], tuple[dict[str, Any], ConsumerGroup]] = (
            OrderedDict()
        )

    async def get(
        self, logs: EventLog, log: str, group: str, settings: dict[str, Any]
    ) -> ConsumerGroup:
        """The handle for ``(log, group)``, joined (again) if new or if ``settings`` asks for
        something the open handle was not joined with. That join checks them against the
        group's own; on a conflict (`airlane.eventlog.GroupSettingsConflict`) the open handle
        stays as it was."""
        key = (log, group)
        held = self._handles.get(key)
        if held is not None and all(held[0].get(k) == v for k, v in settings.items()):
            self._handles.move_to_end(key)
            return held[1]
        handle = await logs.consumer_group(log, group, **settings)
        if held is not None:
            await held[1].aclose()
        self._handles[key] = (settings, handle)
        self._handles.move_to_end(key)
        while len(self._handles) > self.limit:
            _, (_, oldest) = self._handles.popitem(last=False)
            await oldest.aclose()
        return handle

    async def drop(self, log: str, group: str, handle: ConsumerGroup) -> None:
        """Close ``handle`` (one that failed) and let it go, unless another has taken its
        place meanwhile (a concurrent fetch that already joined afresh keeps its own)."""
        key = (log, group)
        held = self._handles.get(key)
        if held is not None and held[1] is handle:
            del self._handles[key]
        await handle.aclose()

    async def forget(self, log: str, group: str | None = None) -> None:
        """Close the handles of a deleted group (or of every group of a deleted log)."""
        for key in [k for k in self._handles if k[0] == log and group in (None, k[1])]:
            _, handle = self._handles.pop(key)
            await handle.aclose()

    async def aclose(self) -> None:
        """Close every handle."""
        while self._handles:
            _, (_, handle) = self._handles.popitem()
            await handle.aclose()
