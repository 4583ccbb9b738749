"""The server: configuration, composition and the process that runs a gateway.

- `config`: `ServerConfig` and `load_config` (flags and a TOML file);
- `compose`: the composition root, configuration -> hub + backend + gateway -> HTTP app;
- `run`: `serve`, the listeners (HTTP, AIRC/TCP, gRPC) and the process around them;
- `address`: the default listening address (clients default to it without the server);
- `fdtable`, `gcpacer`: process tuning (the descriptor table, the garbage collector).

The names below are imported on first use (`airlane.runtime.lazy`), so that importing
`airlane.server.address` does not load the server.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airlane.runtime.lazy import lazy_exports

if TYPE_CHECKING:
    from airlane.server.address import DEFAULT_HOST, DEFAULT_PORT
    from airlane.server.compose import build_app, build_event_sourcing, build_hub
    from airlane.server.config import DEFAULT_TCP_KEEPALIVE_S, ServerConfig, load_config
    from airlane.server.run import (
        ListenerError,
        Listening,
        StartupError,
        airc_port,
        bind_socket,
        grpc_port,
        rsocket_port,
        serve,
    )

_HOMES = {
    "airlane.server.address": ("DEFAULT_HOST", "DEFAULT_PORT"),
    "airlane.server.compose": ("build_app", "build_event_sourcing", "build_hub"),
    "airlane.server.config": ("DEFAULT_TCP_KEEPALIVE_S", "ServerConfig", "load_config"),
    "airlane.server.run": (
        "ListenerError",
        "Listening",
        "StartupError",
        "airc_port",
        "bind_socket",
        "grpc_port",
        "rsocket_port",
        "serve",
    ),
}

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "DEFAULT_TCP_KEEPALIVE_S",
    "ListenerError",
    "Listening",
    "ServerConfig",
    "StartupError",
    "airc_port",
    "bind_socket",
    "build_app",
    "build_event_sourcing",
    "build_hub",
    "grpc_port",
    "load_config",
    "rsocket_port",
    "serve",
]

__getattr__, __dir__ = lazy_exports(__name__, _HOMES, __all__)
