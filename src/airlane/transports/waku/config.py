"""`WakuConfig`: the Waku service node's listener, network and limits (``[waku]`` in the
configuration file; docs/waku.md)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from airlane.wire.errors import DecodeError
from airlane.wire.libp2p import Multiaddr
from airlane.wire.waku import ContentTopic

__all__ = ["RLN_CLUSTERS", "LogRoute", "WakuConfig"]

RLN_CLUSTERS = frozenset({1})
"""Clusters whose every shard demands RLN proofs: cluster 1 is The Waku Network."""
_PREFIX = re.compile(r"[A-Za-z0-9._:-]{1,64}")
_LOG = re.compile(r"[A-Za-z0-9._-]{1,200}")


@dataclass(frozen=True, slots=True)
class LogRoute:
    """A content topic kept in an event log instead of a stream (``[[waku.logs]]``), both
    ways: Waku messages are appended as records, records appended by anyone are Waku
    messages."""

    content_topic: str
    log: str

    def __post_init__(self) -> None:
        try:
            ContentTopic.parse(self.content_topic)
        except DecodeError as exc:
            raise ValueError(f"[[waku.logs]] content_topic: {exc}") from None
        if _LOG.fullmatch(self.log) is None:
            raise ValueError(f"[[waku.logs]] log {self.log!r}: 1 to 200 of A-Z a-z 0-9 . _ -")


@dataclass(frozen=True, slots=True)
class WakuConfig:
    """How the Waku service node runs."""

    enabled: bool = False
    """Start the node with ``airlane serve`` (``--waku`` also turns it on)."""
    host: str | None = None
    """Where its listeners bind; None: the server's host."""
    port: int = 8645
    """The WebSocket listener js-waku dials (``/ip4/<host>/tcp/<port>/ws``); 0: any free port."""
    tcp_port: int | None = None
    """A plain TCP listener for other nodes; None: none (they dial the WebSocket one)."""
    key_file: str | None = None
    """Where the node keeps its private key, so its peer id survives restarts; None:
    ``.airlane/waku/node.key`` under the working directory."""
    key_type: str = "secp256k1"
    """The key a new node makes (``secp256k1``, as nwaku's, which peer exchange records need;
    or ``ed25519``). A key file that exists keeps its own type."""
    cluster_id: int = 0
    """The Waku cluster served (js-waku's ``networkConfig.clusterId``)."""
    shards: tuple[int, ...] = (0, 1, 2, 3, 4, 5, 6, 7)
    """The shards of the cluster served; pubsub topics ``/waku/2/rs/<cluster>/<shard>``."""
    shards_in_cluster: int = 8
    """The cluster's shard count for autosharding (a content topic's shard when a request
    names no pubsub topic)."""
    rln_shards: tuple[int, ...] = ()
    """Shards that take only RLN-proven messages. This node cannot verify RLN proofs (no
    verifier library for Python), so a push to one is refused with that reason, and a cluster
    that is RLN-only throughout (`RLN_CLUSTERS`) is refused at start."""
    stream_prefix: str = "waku"
    """A content topic ``/app/1/chat/proto`` is the Airlane stream ``<prefix>/app/1/chat/proto``
    (and back)."""
    principal: str = "waku@default"
    """Whom the node acts as toward the gateway (``NAME@TENANT``)."""
    max_payload: int = 150 * 1024
    """The largest message payload accepted (the Waku network's own limit)."""
    max_peers: int = 1000
    """Connections held at once; more are closed at once."""
    max_streams: int = 64
    """Streams one connection may have open."""
    stream_buffer: int = 1 << 20
    """Bytes buffered per stream that its handler has not read; past it the stream is reset."""
    max_topics_per_peer: int = 100
    """Content topics one peer may subscribe to through filter."""
    subscription_ttl_s: float = 300.0
    """A filter subscription lapses this long after its last subscribe or ping."""
    push_queue: int = 1024
    """Messages queued for one filter subscriber; past it the oldest are dropped (and
    counted): filter is best effort, the store has them."""
    store_page: int = 20
    """Messages per store page when a query names no limit."""
    store_max_page: int = 100
    """The largest store page."""
    handshake_timeout_s: float = 10.0
    request_timeout_s: float = 30.0
    """How long a request stream may take to send its request."""
    logs: tuple[LogRoute, ...] = ()
    """Content topics kept in event logs (``[[waku.logs]]``); every other one is a stream."""
    relay: bool = True
    """Relay messages with other Waku nodes (``/vac/waku/relay/2.0.0``)."""
    max_relay_topics: int = 1000
    """Content topics relay follows at once (each holds a reader of its stream); a light push
    to a new one past it is answered 503."""
    relay_topic_idle_s: float = 600.0
    """A followed content topic with no new message for this long is let go, so its stream
    can expire as an idle stream does (``[streams] idle_ttl_s``); a new message has it
    followed again from where it was let go."""
    peers: tuple[str, ...] = ()
    """Nodes to connect to at start, relay with, and stay connected with (multiaddrs with
    ``/p2p/``: ``/ip4/10.0.0.2/tcp/8645/ws/p2p/12D3KooW...``, or ``.../tcp/60000/p2p/...``
    for a node's TCP listener)."""

    def __post_init__(self) -> None:
        if self.key_type not in ("secp256k1", "ed25519"):
            raise ValueError("[waku] key_type is secp256k1 or ed25519")
        if not 0 <= self.cluster_id < 1 << 16:
            raise ValueError("[waku] cluster_id is 0 to 65535")
        if not self.shards or any(not 0 <= shard < 1024 for shard in self.shards):
            raise ValueError("[waku] shards is a non-empty list of 0 to 1023")
        if not 1 <= self.shards_in_cluster <= 1024:
            raise ValueError("[waku] shards_in_cluster is 1 to 1024")
        if self.cluster_id in RLN_CLUSTERS:
            raise ValueError(
                f"[waku] cluster {self.cluster_id} (The Waku Network) takes only messages with "
                "RLN proofs, and this node cannot verify them (no RLN verifier for Python); "
                "choose another cluster_id"
            )
        if not set(self.rln_shards) <= set(self.shards):
            raise ValueError("[waku] rln_shards must be among shards")
        if _PREFIX.fullmatch(self.stream_prefix) is None:
            raise ValueError("[waku] stream_prefix: 1 to 64 of A-Z a-z 0-9 . _ : -")
        if self.max_payload < 1 or self.max_payload > 1 << 20:
            raise ValueError("[waku] max_payload is 1 byte to 1 MiB")
        for peer in self.peers:
            try:
                address = Multiaddr.parse(peer)
            except DecodeError as exc:
                raise ValueError(f"[waku] peer {peer!r}: {exc}") from None
            if address.peer_id() is None:
                raise ValueError(f"[waku] peer {peer!r} needs its /p2p/<peer id>")
        topics = [route.content_topic for route in self.logs]
        if len(set(topics)) != len(topics):
            raise ValueError("[[waku.logs]]: a content topic is routed to one log only")
        if self.max_relay_topics < 1:
            raise ValueError("[waku] max_relay_topics is at least 1")
        if not self.relay_topic_idle_s > 0:
            raise ValueError("[waku] relay_topic_idle_s is above 0")
        if not 1 <= self.store_page <= self.store_max_page:
            raise ValueError("[waku] store_page is 1 to store_max_page")
