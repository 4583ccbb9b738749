"""The service layer: what every transport calls, and the only thing it calls.

`Gateway` (in `service`) authorizes every call through the security gate itself, runs
producers, and knows nothing of wires; its services `EventLogs` (`logs`), `Schemas`
(`schemas`), `SharedRooms` (`rooms`) and `Artifacts` (`artifacts`) do the same for theirs.
Beside them:

- `chat_request`: an OpenAI chat body -> a `GenerationRequest` (every wire parses it here);
- `eventsourcing`: the node's event logs and schema registry, wired together;
- `arbiter`: a model as the arbiter of semantic merge conflicts.

The types a transport handles in and out of these calls are re-exported here, so that a
transport imports the service layer and nothing below it (``tests/test_layers.py``).
"""

from airlane.backends.base import GenerationRequest, LoadTestSpec
from airlane.eventlog import Delivery, GroupInfo, LogInfo, NewEvent, Record
from airlane.gateway.artifacts import ArtifactFile, Artifacts
from airlane.gateway.chat_request import ChatRequest, InvalidChatRequest
from airlane.gateway.logs import MAX_SETTLE_TOKENS, EventLogs, parse_new_event
from airlane.gateway.rooms import JoinedRoom, SharedRooms
from airlane.gateway.schemas import Schemas, version_to_dict
from airlane.gateway.service import (
    DEFAULT_MAX_GENERATIONS,
    LOADTEST_MODEL,
    LOADTEST_ORPHAN,
    Chat,
    Gateway,
    GatewayConfig,
    new_generation_id,
    orphan_policy_from,
)
from airlane.hub import HubStats, Subscription
from airlane.registry import Compatibility, Incompatibility, Schema, SchemaVersion
from airlane.security import Principal, RequestFacts, principal_named
from airlane.security.tls import PeerIdentity, ServerTls
from airlane.security.xfcc import ForwardedIdentity
from airlane.sync.yjs import YPeer, YRoom

__all__ = [
    "DEFAULT_MAX_GENERATIONS",
    "LOADTEST_MODEL",
    "LOADTEST_ORPHAN",
    "MAX_SETTLE_TOKENS",
    "ArtifactFile",
    "Artifacts",
    "Chat",
    "ChatRequest",
    "Compatibility",
    "Delivery",
    "EventLogs",
    "ForwardedIdentity",
    "Gateway",
    "GatewayConfig",
    "GenerationRequest",
    "GroupInfo",
    "HubStats",
    "Incompatibility",
    "InvalidChatRequest",
    "JoinedRoom",
    "LoadTestSpec",
    "LogInfo",
    "NewEvent",
    "PeerIdentity",
    "Principal",
    "Record",
    "RequestFacts",
    "Schema",
    "SchemaVersion",
    "Schemas",
    "ServerTls",
    "SharedRooms",
    "Subscription",
    "YPeer",
    "YRoom",
    "new_generation_id",
    "orphan_policy_from",
    "parse_new_event",
    "principal_named",
    "version_to_dict",
]
