"""Airlane: the real-time communication layer for AI-native systems.

The names most programs need are re-exported here; each subpackage documents the rest.

They are imported on first use (PEP 562): ``from airlane import Gateway`` loads the gateway
and what it needs, while a program that imports only part of Airlane (``airlane.client``,
``airlane.core``, the event-log CLI) does not pay for the server stack. Importing the whole of
it takes about half a second.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airlane.runtime.lazy import lazy_exports

if TYPE_CHECKING:
    from airlane.backends import (
        Backend,
        BackendError,
        GenerationRequest,
        OpenAIUpstreamBackend,
        SyntheticBackend,
        SyntheticConfig,
    )
    from airlane.core import (
        AirlaneError,
        Channel,
        ErrorCode,
        Event,
        Kind,
        Lane,
        OrphanMode,
        OrphanPolicy,
        Position,
        Retention,
    )
    from airlane.gateway import Gateway, GatewayConfig
    from airlane.hub import Hub, MemoryHub
    from airlane.security import ApiKeyPolicy, Principal
    from airlane.transports.http import AirlaneApp, HttpConfig, create_app

__version__ = "0.1.0"

_HOMES = {
    "airlane.backends": (
        "Backend",
        "BackendError",
        "GenerationRequest",
        "OpenAIUpstreamBackend",
        "SyntheticBackend",
        "SyntheticConfig",
    ),
    "airlane.core": (
        "AirlaneError",
        "Channel",
        "ErrorCode",
        "Event",
        "Kind",
        "Lane",
        "OrphanMode",
        "OrphanPolicy",
        "Position",
        "Retention",
    ),
    "airlane.gateway": ("Gateway", "GatewayConfig"),
    "airlane.hub": ("Hub", "MemoryHub"),
    "airlane.security": ("ApiKeyPolicy", "Principal"),
    "airlane.transports.http": ("AirlaneApp", "HttpConfig", "create_app"),
}

__all__ = [
    "AirlaneApp",
    "AirlaneError",
    "ApiKeyPolicy",
    "Backend",
    "BackendError",
    "Channel",
    "ErrorCode",
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


__getattr__, __dir__ = lazy_exports(__name__, _HOMES, __all__)
