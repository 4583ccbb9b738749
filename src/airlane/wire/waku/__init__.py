"""Waku v2 messages and the protocols a service node answers, sans-I/O (over
`airlane.wire.libp2p`).

- `message`: ``WakuMessage``, its deterministic hash, content topics, sharding.
- `protocols`: filter, light push, store, metadata and peer exchange messages.
- `relay`: gossipsub RPCs as Waku relay uses them.
"""

from airlane.wire.waku.message import (
    ContentTopic,
    PayloadTooLarge,
    WakuMessage,
    auto_shard,
    parse_shard_topic,
    shard_topic,
)
from airlane.wire.waku.protocols import (
    FILTER_PUSH,
    FILTER_SUBSCRIBE,
    LIGHTPUSH_V2,
    LIGHTPUSH_V3,
    METADATA,
    PEER_EXCHANGE,
    STORE,
    FilterRequest,
    FilterResponse,
    LightPushRequest,
    LightPushResponse,
    MessagePush,
    Metadata,
    PeerExchangeQuery,
    PeerExchangeResponse,
    Status,
    StoredMessage,
    StoreQuery,
    StoreResponse,
)
from airlane.wire.waku.relay import RELAY_PROTOCOL, RelayMessage, RelayRpc

__all__ = [
    "FILTER_PUSH",
    "FILTER_SUBSCRIBE",
    "LIGHTPUSH_V2",
    "LIGHTPUSH_V3",
    "METADATA",
    "PEER_EXCHANGE",
    "RELAY_PROTOCOL",
    "STORE",
    "ContentTopic",
    "FilterRequest",
    "FilterResponse",
    "LightPushRequest",
    "LightPushResponse",
    "MessagePush",
    "Metadata",
    "PayloadTooLarge",
    "PeerExchangeQuery",
    "PeerExchangeResponse",
    "RelayMessage",
    "RelayRpc",
    "Status",
    "StoreQuery",
    "StoreResponse",
    "StoredMessage",
    "WakuMessage",
    "auto_shard",
    "parse_shard_topic",
    "shard_topic",
]
