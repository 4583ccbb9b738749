"""The gateway's default listening address, in a module of its own: ``airlane serve`` listens
there, and the commands and clients that talk to a gateway default to it without importing
the server."""

from __future__ import annotations

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT"]

DEFAULT_HOST = "127.0.0.1"
"""Loopback: a gateway is reachable from elsewhere only when asked (``--host``)."""
DEFAULT_PORT = 8420
"""The HTTP port; AIRC/TCP and gRPC default to the next two."""
