"""Hubs: where streams live. `MemoryHub` is the embedded default."""

from airlane.hub.base import (
    Hub,
    HubError,
    HubFull,
    HubStats,
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
    "Hub",
    "HubError",
    "HubFull",
    "HubStats",
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
