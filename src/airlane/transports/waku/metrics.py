"""`WakuMetrics`: the Waku node's counters on ``/metrics`` (registered by the composition root
when the node runs)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from airlane.transports.waku.node import WakuNode

__all__ = ["WakuMetrics"]


class WakuMetrics(Collector):
    """Connections, filter pushes, light pushes and relay traffic of one node."""

    def __init__(self, node: WakuNode) -> None:
        self.node = node

    def collect(self) -> Iterator[Metric]:
        """The samples, read from the node's counters now."""
        node = self.node
        stats, filtering = node.stats, node.filter.stats
        yield GaugeMetricFamily(
            "airlane_waku_peers", "Waku connections open now", value=node.open_connections
        )
        yield CounterMetricFamily(
            "airlane_waku_connections",
            "Waku connections that completed the libp2p handshake",
            value=stats.connections,
        )
        yield CounterMetricFamily(
            "airlane_waku_refused_connections",
            "Waku connections closed at once: max_peers reached",
            value=stats.refused_connections,
        )
        yield CounterMetricFamily(
            "airlane_waku_light_pushes",
            "Messages light nodes pushed that were stored",
            value=stats.pushed_in,
        )
        yield GaugeMetricFamily(
            "airlane_waku_filter_subscribers",
            "Peers with filter subscriptions",
            value=filtering.subscribers,
        )
        yield CounterMetricFamily(
            "airlane_waku_filter_pushed", "Messages pushed to filter subscribers",
            value=filtering.pushed,
        )  # fmt: skip
        yield CounterMetricFamily(
            "airlane_waku_filter_dropped",
            "Filter pushes dropped: a subscriber's queue was full or it was away",
            value=filtering.dropped,
        )
        relay = node.relay
        if relay is None:
            return
        yield GaugeMetricFamily(
            "airlane_waku_relay_peers", "Peers this node relays with", value=relay.peer_count
        )
        messages = CounterMetricFamily(
            "airlane_waku_relay_messages", "Relayed messages by what became of them",
            labels=["outcome"],
        )  # fmt: skip
        relay_stats = relay.stats
        for outcome, value in (
            ("in", relay_stats.relayed_in),
            ("out", relay_stats.relayed_out),
            ("duplicate", relay_stats.duplicates),
            ("refused", relay_stats.refused),
            ("dropped", relay_stats.dropped),
        ):
            messages.add_metric([outcome], value)
        yield messages
