"""A sink that pauses its feed after the first batch, from within the sink, as the gateway
does when the hub's store falls behind (`airlane.gateway.feeding`)."""

from __future__ import annotations

from airlane.backends.base import Feed
from airlane.core import Event


class PausingSink:
    """Keeps every batch; pauses ``feed`` once the first came."""

    def __init__(self, feed: Feed) -> None:
        self.feed = feed
        self.batches: list[list[Event]] = []

    def __call__(self, batch: list[Event]) -> None:
        self.batches.append(batch)
        if len(self.batches) == 1:
            self.feed.pause()

    @property
    def events(self) -> list[Event]:
        return [event for batch in self.batches for event in batch]
