"""What every HTTP handler is given: the gateway, the configuration and the metrics."""

from __future__ import annotations

from dataclasses import dataclass

from airlane.gateway import Gateway
from airlane.transports.http.config import HttpConfig
from airlane.transports.http.metrics import HttpMetrics

__all__ = ["AppContext"]


@dataclass(slots=True)
class AppContext:
    """Shared state of one HTTP application."""

    gateway: Gateway
    config: HttpConfig
    metrics: HttpMetrics
