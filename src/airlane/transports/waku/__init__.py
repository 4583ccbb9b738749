"""The Waku v2 service node: js-waku light nodes (and other Waku nodes) connect to Airlane
over libp2p, and their content topics are Airlane streams (docs/waku.md).

- `node.WakuNode`: listeners, connections, lifecycle.
- `connection.PeerConnection`: one libp2p connection (Noise, mplex, per-stream protocols).
- `service`: the protocol handlers (identify, ping, metadata, filter, light push, store,
  peer exchange).
- `filter.FilterService`: filter subscriptions and pushes.
- `bridge.WakuBridge`: Waku messages as stream events and back; the store reads streams.
- `relay.RelayService`: relay (gossipsub) with other nodes.
- `feeds.TopicFeed`: one content topic's stream read live.
- `metrics.WakuMetrics`: ``airlane_waku_*`` on ``/metrics``.
- `client.LightClient`: a light node in Python (light push, filter, store).
- `config.WakuConfig`: ``[waku]``.

The libp2p and Waku formats themselves are sans-I/O, in `airlane.wire.libp2p` and
`airlane.wire.waku`.
"""

from airlane.transports.waku.bridge import Refused, WakuBridge
from airlane.transports.waku.client import LightClient, RequestFailed
from airlane.transports.waku.config import WakuConfig
from airlane.transports.waku.filter import FilterService, FilterStats
from airlane.transports.waku.metrics import WakuMetrics
from airlane.transports.waku.node import NodeStats, WakuNode, load_identity

__all__ = [
    "FilterService",
    "FilterStats",
    "LightClient",
    "NodeStats",
    "Refused",
    "RequestFailed",
    "WakuBridge",
    "WakuConfig",
    "WakuMetrics",
    "WakuNode",
    "load_identity",
]
