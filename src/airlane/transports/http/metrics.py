"""Prometheus metrics of the HTTP transport and the hub behind it (``GET /metrics``).

The per-write counters (bytes, delivery lag) are plain integers updated on the hot path and
turned into metric families only when ``/metrics`` is scraped: prometheus-client's own
counters take a lock per increment, which costs more than the write they count.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from airlane.core import Event
from airlane.gateway import HubStats
from airlane.runtime.admission import Admission
from airlane.runtime.lane_flows import ShapingCounters
from airlane.runtime.worker_metrics import WorkerMetrics

__all__ = ["HttpMetrics"]

# Delivery lag buckets (seconds): sub-millisecond resolution where the targets are.
_LAG_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0)
_LAG_BUCKETS_NS = tuple(int(b * 1e9) for b in _LAG_BUCKETS)


class HttpMetrics(Collector):
    """Counters owned by one HTTP application, in a registry of its own."""

    def __init__(self, stats: Callable[[], HubStats], generations: Callable[[], int]) -> None:
        self._stats = stats
        self._generations = generations
        self.bytes_sent = 0
        """Streaming payload bytes written (SSE and WebSocket)."""
        self.connections: dict[str, int] = {"sse": 0, "ws": 0, "webtransport": 0, "webrtc": 0}
        """Open streaming connections by transport."""
        self.webrtc_pairs: dict[str, int] = {}
        """WebRTC peer connections established, by the candidate pair ICE chose
        (``host/udp-host``, ``srflx/udp-relay``...): a bounded label set."""
        self.webrtc_restarts: dict[str, int] = {"switched": 0, "failed": 0}
        """WebRTC ICE restarts, by outcome."""
        self.webrtc_dropped = 0
        """Messages the real-time channels (``airlane.rt``) dropped for a peer that was behind."""
        self.shaping: ShapingCounters | None = None
        """The ``airlane shaping`` classifier's per-lane counters, read at each scrape."""
        self.workers: WorkerMetrics | None = None
        """Set in a worker of ``airlane serve --workers``: a scrape shows every worker's."""
        self._lag_counts = [0] * (len(_LAG_BUCKETS_NS) + 1)
        self._lag_sum_ns = 0
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)
        self.requests = Counter(
            "airlane_http_requests",
            "HTTP requests by route and status",
            ["route", "status"],
            registry=self.registry,
        )
        self._request_children: dict[tuple[str, str], Any] = {}

    def count_request(self, route: str, status: str) -> None:
        """One more request answered on ``route`` with ``status`` (both bounded label sets)."""
        # The labelled child, kept: `Counter.labels` validates and looks it up under a lock,
        # ~50 bytecodes a request, and the label pairs are few (routes x statuses).
        child = self._request_children.get((route, status))
        if child is None:
            child = self._request_children[route, status] = self.requests.labels(route, status)
        child.inc()

    def count_webrtc_drop(self) -> None:
        """One message a real-time channel dropped (its peer was behind)."""
        self.webrtc_dropped += 1

    def count_sent(self, size: int) -> None:
        """``size`` more bytes went out on a stream."""
        self.bytes_sent += size

    def observe_written(
        self, batch: list[Event], now_ns: int, size: int = 0, live_from: int = 0
    ) -> None:
        """Record the delivery lag of the oldest event of a written batch that reached its
        reader live (seq after ``live_from``, `Subscription.live_from`: history replayed to a
        reader that resumed or came late waited for the reader, not for the gateway), and
        count ``size`` bytes sent (one call per batch where the writer knows both)."""
        self.bytes_sent += size
        if batch:
            first = batch[0]
            ts_ns = first.ts_ns
            if live_from and first.seq <= live_from:  # history first: the oldest live one
                ts_ns = next((event.ts_ns for event in batch if event.seq > live_from), 0)
            if ts_ns:
                lag = now_ns - ts_ns
                if lag < 0:  # noqa: PLR1730 - a comparison is cheaper than max() here
                    lag = 0
                self._lag_counts[bisect_left(_LAG_BUCKETS_NS, lag)] += 1
                self._lag_sum_ns += lag

    def lag_counts(self) -> list[int]:
        """The delivery-lag histogram's counts per bucket so far (a copy; the last bucket is
        past the largest bound)."""
        return list(self._lag_counts)

    @staticmethod
    def lag_quantile(counts: list[int], q: float) -> float | None:
        """The delivery lag (ms) below which a fraction ``q`` of the writes in ``counts`` (a
        difference of two `lag_counts`) fell: the upper bound of the bucket holding that
        write (the largest bound for writes past it); None without writes."""
        total = sum(counts)
        if total == 0:
            return None
        rank, seen = q * total, 0
        for bound, count in zip(_LAG_BUCKETS, counts, strict=False):
            seen += count
            if seen >= rank:
                return bound * 1000
        return _LAG_BUCKETS[-1] * 1000

    def collect(self) -> Iterator[Metric]:
        """The metric families, built at scrape time."""
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
        yield CounterMetricFamily(
            "airlane_stream_bytes_sent", "Streaming payload bytes written", self.bytes_sent
        )
        connections = GaugeMetricFamily(
            "airlane_stream_connections", "Open streaming connections", labels=["transport"]
        )
        for transport, count in self.connections.items():
            connections.add_metric([transport], count)
        yield connections
        pairs = CounterMetricFamily(
            "airlane_webrtc_connections",
            "WebRTC peer connections established, by the candidate pair ICE chose",
            labels=["pair"],
        )
        for pair, count in self.webrtc_pairs.items():
            pairs.add_metric([pair], count)
        yield pairs
        restarts = CounterMetricFamily(
            "airlane_webrtc_ice_restarts",
            "WebRTC ICE restarts: switched to the new path, or failed (the old path stayed)",
            labels=["outcome"],
        )
        for outcome, count in self.webrtc_restarts.items():
            restarts.add_metric([outcome], count)
        yield restarts
        yield CounterMetricFamily(
            "airlane_webrtc_realtime_dropped",
            "Messages the real-time channels dropped for a peer that was behind",
            value=self.webrtc_dropped,
        )
        yield self._lag_family()
        yield from _admission_families()
        if self.shaping is not None:
            yield from _shaping_families(self.shaping)

    def _lag_family(self) -> Metric:
        cumulative, buckets = 0, []
        for bound, count in zip(_LAG_BUCKETS, self._lag_counts, strict=False):
            cumulative += count
            buckets.append((repr(bound), cumulative))
        buckets.append(("+Inf", cumulative + self._lag_counts[-1]))
        return HistogramMetricFamily(
            "airlane_delivery_lag_seconds",
            "From the hub accepting an event to a transport writing it",
            buckets=buckets,
            sum_value=self._lag_sum_ns / 1e9,
        )

    def render(self) -> bytes:
        """The exposition text (a worker's: every worker's, each sample labelled)."""
        own = generate_latest(self.registry)
        return own if self.workers is None else self.workers.merged(own)

    def render_own(self) -> bytes:
        """This process's exposition text alone."""
        return generate_latest(self.registry)


def _shaping_families(shaping: ShapingCounters) -> Iterator[Metric]:
    """Packets and bytes the classifier sorted into each lane, per direction (nothing where it
    is not attached): the host's, whichever process sent them."""
    counts = shaping.read()
    if not counts:
        return
    packets = CounterMetricFamily(
        "airlane_shaping_packets",
        "Packets the shaping classifier sorted, by direction and lane",
        labels=["direction", "lane"],
    )
    size = CounterMetricFamily(
        "airlane_shaping_bytes",
        "Bytes the shaping classifier sorted, by direction and lane",
        labels=["direction", "lane"],
    )
    for (direction, lane), (count, total) in counts.items():
        packets.add_metric([direction, lane], count)
        size.add_metric([direction, lane], total)
    yield packets
    yield size


def _admission_families() -> Iterator[Metric]:
    """The admission of new streams on the loop serving the scrape (`airlane.runtime.admission`)."""
    try:
        admission = Admission.for_loop()
    except RuntimeError:  # scraped from outside an event loop: nothing to report
        return
    yield CounterMetricFamily(
        "airlane_admission_deferred",
        "Requests whose set-up waited while paced work was due",
        admission.deferred,
    )
    yield GaugeMetricFamily(
        "airlane_admission_waiting", "Requests waiting to be set up", admission.waiting
    )
    yield CounterMetricFamily(
        "airlane_admission_refused",
        "Requests refused as overloaded: their set-up waited too long, or too many waited",
        admission.refused,
    )
