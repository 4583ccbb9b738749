"""The model arbiter: a semantic conflict settled by the gateway's backend, and every replica
converging on its decision; a failing backend leaves it to the deterministic fallback."""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator

from airlane.backends.base import BackendError, GenerationRequest
from airlane.backends.synthetic import SyntheticBackend, SyntheticConfig
from airlane.core import Event
from airlane.gateway import Gateway
from airlane.gateway.arbiter import ask_backend, resolve_with_backend
from airlane.hub import MemoryHub
from airlane.sync.hlc import HybridClock
from airlane.sync.semantic import ArbitrationRequest, SemanticMap


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def conflicted() -> tuple[SemanticMap, SemanticMap]:
    """Two replicas that each wrote the title while apart, then exchanged edits."""
    ios, web = SemanticMap(HybridClock("ios")), SemanticMap(HybridClock("web"))
    a = ios.edit("title", "Quarterly plan", now_ms())
    b = web.edit("title", "Plan for the next quarter, with budget", now_ms())
    ios.apply(b, now_ms())
    web.apply(a, now_ms())
    assert ios.conflicts() == web.conflicts() == ["title"]
    return ios, web


async def test_the_backend_settles_a_conflict_and_replicas_converge():
    backend = SyntheticBackend(SyntheticConfig(speed=0, default_max_tokens=12))
    ios, web = conflicted()
    request = ArbitrationRequest("title", ("Quarterly plan", "Plan for the next quarter"))
    answer = await ask_backend(backend, request, model="m")
    assert answer  # the synthetic model's deterministic text
    decisions = await resolve_with_backend(ios, backend, now_ms(), model="m")
    assert len(decisions) == 1 and ios.conflicts() == []
    merged = ios.value("title")
    assert merged and merged not in ("Quarterly plan", "Plan for the next quarter, with budget")
    for decision in decisions:  # the other replica receives the decision like any edit
        web.apply(decision, now_ms())
    assert web.value("title") == merged and web.conflicts() == []


class Broken:
    """A backend whose model call fails."""

    name = "broken"

    def stream(self, request: GenerationRequest) -> AsyncGenerator[list[Event], None]:
        async def fail() -> AsyncGenerator[list[Event], None]:
            raise BackendError("upstream refused", code="upstream_error")
            yield []  # pragma: no cover

        return fail()

    async def aclose(self) -> None:
        pass


async def test_a_failing_backend_falls_back_to_last_writer_wins():
    ios, _ = conflicted()
    decisions = await resolve_with_backend(ios, Broken(), now_ms(), model="m")  # type: ignore[arg-type]
    assert len(decisions) == 1
    assert ios.value("title") == "Plan for the next quarter, with budget"  # the latest write


async def test_the_gateway_settles_conflicts_with_its_own_backend():
    # What the docs promise: a gateway's model settles a room's conflicts, without the caller
    # reaching into the gateway for its backend.
    backend = SyntheticBackend(SyntheticConfig(speed=0, default_max_tokens=12))
    gateway = Gateway(MemoryHub(), backend)
    ios, web = conflicted()
    decisions = await gateway.resolve_conflicts(ios, now_ms(), model="m")
    assert len(decisions) == 1 and ios.conflicts() == []
    for decision in decisions:
        web.apply(decision, now_ms())
    assert web.value("title") == ios.value("title") and web.conflicts() == []
    await gateway.aclose()
