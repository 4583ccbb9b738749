"""Prometheus metrics of the HTTP transport and the hub behind it (``GET /metrics``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from airlane.core import Event
from airlane.hub import HubStats

__all__ = ["HttpMetrics"]

# Delivery lag buckets (seconds): sub-millisecond resolution where the targets are.
_LAG_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)


class _HubCollector(Collector):
    def __init__(self, stats: Callable[[], HubStats], generations: Callable[[], int]) -> None:
        self._stats = stats
        self._generations = generations

    def collect(self) -> Iterator[Metric]:
        stats = self._stats()
        yield GaugeMetricFamily("airlane_streams", "Streams held by the hub", stats.streams)
        yield GaugeMetricFamily("airlane_subscribers", "Cursors open on the hub", stats.subscribers)
        yield GaugeMetricFamily(
            "airlane_generations_running", "Producers running", self._generations()
        )
        yield GaugeMetricFamily(
            "airlane_retained_bytes", "Bytes of retained events", stats.retained_bytes
        )
        yield CounterMetricFamily(
            "airlane_events_appended", "Events appended to streams", stats.events_appended
        )
        yield CounterMetricFamily(
            "airlane_events_delivered", "Frames handed to subscribers", stats.events_delivered
        )


class HttpMetrics:
    """Counters owned by one HTTP application, in a registry of its own."""

    def __init__(self, stats: Callable[[], HubStats], generations: Callable[[], int]) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_HubCollector(stats, generations))
        self.requests = Counter(
            "airlane_http_requests",
            "HTTP requests by route and status",
            ["route", "status"],
            registry=self.registry,
        )
        self.bytes_sent = Counter(
            "airlane_stream_bytes_sent", "Streaming payload bytes written", registry=self.registry
        )
        self.connections = Gauge(
            "airlane_stream_connections",
            "Open streaming connections",
            ["transport"],
            registry=self.registry,
        )
        self.lag = Histogram(
            "airlane_delivery_lag_seconds",
            "From the hub accepting an event to a transport writing it",
            buckets=_LAG_BUCKETS,
            registry=self.registry,
        )

    def count_sent(self, size: int) -> None:
        """``size`` more bytes went out on a stream."""
        self.bytes_sent.inc(size)

    def observe_written(self, batch: list[Event], now_ns: int) -> None:
        """Record the delivery lag of the oldest event of a written batch."""
        if batch and batch[0].ts_ns:
            self.lag.observe(max(0, now_ns - batch[0].ts_ns) / 1e9)

    def render(self) -> bytes:
        """The exposition text."""
        return generate_latest(self.registry)
