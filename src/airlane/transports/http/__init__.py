"""The HTTP transport: OpenAI-compatible API, streams API over SSE, and WebSocket."""

from airlane.transports.http.app import AirlaneApp, create_app
from airlane.transports.http.config import HttpConfig

__all__ = ["AirlaneApp", "HttpConfig", "create_app"]
