"""What every HTTP handler is given: the gateway, the configuration and the metrics."""

from __future__ import annotations

from dataclasses import dataclass

from airlane.gateway import Gateway
from airlane.transports.http.asgi import Receive, Request, Send
from airlane.transports.http.config import HttpConfig
from airlane.transports.http.metrics import HttpMetrics
from airlane.transports.http.sse_pump import SSEPump

__all__ = ["AppContext"]


@dataclass(slots=True)
class AppContext:
    """Shared state of one HTTP application."""

    gateway: Gateway
    config: HttpConfig
    metrics: HttpMetrics

    def sse_pump(self, request: Request, receive: Receive, send: Send) -> SSEPump:
        """An SSE response for ``request`` with this app's heartbeat, batching, metrics and
        the compression negotiated for the client."""
        return SSEPump(
            send,
            receive,
            ping_s=self.config.sse_ping_s,
            batch_limit=self.config.batch_limit,
            metrics=self.metrics,
            compression=request.compression(),
        )
