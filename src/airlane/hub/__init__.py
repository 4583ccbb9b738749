"""Hubs: where streams live. `MemoryHub` is the embedded default; `airlane.hub.jetstream`
shares streams between gateway nodes through NATS JetStream."""

from airlane.hub.base import (
    EventTooLarge,
    Hub,
    HubError,
    HubFull,
    HubStats,
    HubUnavailable,
    InvalidResume,
    InvalidStreamId,
    StreamEnded,
    StreamExists,
    StreamInfo,
    StreamNotFound,
    Subscription,
)
from airlane.hub.memory import MemoryHub, MemoryHubConfig

__all__ = [
    "EventTooLarge",
    "Hub",
    "HubError",
    "HubFull",
    "HubStats",
    "HubUnavailable",
    "InvalidResume",
    "InvalidStreamId",
    "MemoryHub",
    "MemoryHubConfig",
    "StreamEnded",
    "StreamExists",
    "StreamInfo",
    "StreamNotFound",
    "Subscription",
]
