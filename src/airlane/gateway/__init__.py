"""The service layer: what every transport calls.

`Gateway` (in `service`) is the only way a transport acts: it authorizes every call through the
security gate itself, runs producers, and knows nothing of wires. Beside it:

- `chat_request`: an OpenAI chat body -> a `GenerationRequest` (every wire parses it here);
- `eventsourcing`: the node's event logs and schema registry, wired together;
- `arbiter`: a model as the arbiter of semantic merge conflicts.
"""

from airlane.gateway.service import (
    DEFAULT_MAX_GENERATIONS,
    Gateway,
    GatewayConfig,
    new_generation_id,
    orphan_policy_from,
)

__all__ = [
    "DEFAULT_MAX_GENERATIONS",
    "Gateway",
    "GatewayConfig",
    "new_generation_id",
    "orphan_policy_from",
]
