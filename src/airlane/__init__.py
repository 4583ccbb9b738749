"""Airlane: the real-time communication layer for AI-native systems.

The names most programs need are re-exported here; each subpackage documents the rest.
"""

from airlane.backends import (
    Backend,
    BackendError,
    GenerationRequest,
    OpenAIUpstreamBackend,
    SyntheticBackend,
    SyntheticConfig,
)
from airlane.core import Channel, Event, Kind, Lane, OrphanMode, OrphanPolicy, Position, Retention
from airlane.gateway import Gateway, GatewayConfig
from airlane.hub import Hub, MemoryHub
from airlane.security import ApiKeyPolicy, Principal
from airlane.transports.http import AirlaneApp, HttpConfig, create_app

__version__ = "0.1.0"

__all__ = [
    "AirlaneApp",
    "ApiKeyPolicy",
    "Backend",
    "BackendError",
    "Channel",
    "Event",
    "Gateway",
    "GatewayConfig",
    "GenerationRequest",
    "HttpConfig",
    "Hub",
    "Kind",
    "Lane",
    "MemoryHub",
    "OpenAIUpstreamBackend",
    "OrphanMode",
    "OrphanPolicy",
    "Position",
    "Principal",
    "Retention",
    "SyntheticBackend",
    "SyntheticConfig",
    "__version__",
    "create_app",
]
