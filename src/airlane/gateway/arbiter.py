"""A model as the arbiter of semantic merge conflicts (`airlane.sync.semantic`).

`SemanticMap.resolve` is pure and synchronous; a model is reached through the gateway's
backend, asynchronously. `resolve_with_backend` runs the resolution in a worker thread whose
`ModelArbiter` asks the backend on the event loop and waits for the answer, so the map's own
logic stays pure. A backend that fails, times out or answers nothing usable leaves the decision
to the deterministic fallback (`LWWArbiter`): a conflict is always settled.

Run it on one replica (a model's answer is not deterministic); the decision edits it returns go
to the other replicas like any edit, and every replica converges on them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging

from airlane.backends.base import Backend, BackendError, GenerationRequest
from airlane.core import Channel, Kind
from airlane.sync.semantic import ArbitrationRequest, Edit, ModelArbiter, SemanticMap

__all__ = ["ARBITER_PROMPT", "ask_backend", "resolve_with_backend"]

log = logging.getLogger("airlane.gateway.arbiter")

ARBITER_PROMPT = (
    "Several people edited the field {key!r} at the same time. Merge their versions into one "
    "text that keeps what each meant. Answer with the merged text only."
)
"""The system message the model gets."""
DEFAULT_TIMEOUT_S = 60.0
DEFAULT_MAX_TOKENS = 512


async def ask_backend(
    backend: Backend,
    request: ArbitrationRequest,
    *,
    model: str,
    max_tokens: int = DEFAULT_MAX_TOKENS,
) -> str | None:
    """The model's merge of ``request``'s candidates (None if it said nothing)."""
    versions = "\n\n".join(
        f"Version {number}:\n{text}" for number, text in enumerate(request.candidates, 1)
    )
    generation = GenerationRequest(
        model=model,
        messages=[
            {"role": "system", "content": ARBITER_PROMPT.format(key=request.key)},
            {"role": "user", "content": versions},
        ],
        max_tokens=max_tokens,
        temperature=0.0,
    )
    parts: list[str] = []
    async for batch in backend.stream(generation):
        parts.extend(
            event.text
            for event in batch
            if event.kind is Kind.DELTA and event.channel is Channel.CONTENT
        )
    text = "".join(parts).strip()
    return text or None


async def resolve_with_backend(
    semantic: SemanticMap,
    backend: Backend,
    now_ms: int,
    *,
    model: str,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    max_tokens: int = DEFAULT_MAX_TOKENS,
) -> list[Edit]:
    """Settle ``semantic``'s conflicts with the model behind ``backend``; returns the decision
    edits (already applied to ``semantic``) to send to the other replicas. The caller must not
    touch ``semantic`` until this returns (it is changed in a worker thread)."""
    loop = asyncio.get_running_loop()

    def ask(request: ArbitrationRequest) -> str | None:
        future = asyncio.run_coroutine_threadsafe(
            ask_backend(backend, request, model=model, max_tokens=max_tokens), loop
        )
        try:
            return future.result(timeout_s)
        except (BackendError, concurrent.futures.TimeoutError, OSError) as exc:
            future.cancel()
            log.warning("the model arbiter gave no answer for %r: %s", request.key, exc)
            return None  # the fallback decides

    return await asyncio.to_thread(semantic.resolve, now_ms, ModelArbiter(ask))
