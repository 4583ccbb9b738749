"""`OffloadBackend`: each generation to the edge backend or the cloud one, by the offload rule
(`airlane.backends.offload_rule`), falling back to the other side when the chosen one fails.

A request may carry its own weight and sync cost in its OpenAI ``metadata`` (strings, as the
API wants them): ``offload_weight`` and ``offload_sync_cost_ms``; both keys are removed before
the request goes on. The time from the request to its first batch of events is the latency
sample of the side it ran on.

Fallback: when the chosen side ends the stream with an ``error`` before anything else (it
could not be reached, timed out, answered 5xx or 429, broke the protocol), the request runs on
the other side, and the failed side is skipped for ``cooldown_s``. A failure after tokens went
out is the stream's error: those tokens cannot be taken back.

The decision and its inputs go into the usage ledger as ``routing``
(``{"side", "chosen", "reason", "fell_back", "edge_ms", "cloud_ms", "weight", "sync_cost_ms",
"score"}``), carried by the terminal event to every reader.
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncGenerator
from dataclasses import replace
from typing import Any

from airlane.backends.base import Backend, GenerationRequest
from airlane.backends.offload_rule import Decision, OffloadRouter, Side, other
from airlane.core.events import Event, Kind

__all__ = ["FALLBACK_CODES", "OffloadBackend"]

FALLBACK_CODES = frozenset(
    {
        "backend_error",
        "upstream_unavailable",
        "upstream_timeout",
        "upstream_connection_error",
        "upstream_protocol_error",
        "upstream_error",
    }
)
"""Error codes of a first event after which the other side is tried (and ``upstream_http_error``
with a 5xx or 429 status)."""

WEIGHT_KEY = "offload_weight"
SYNC_COST_KEY = "offload_sync_cost_ms"


class OffloadBackend:
    """Routes each generation to ``edge`` or ``cloud``; see the module docstring."""

    name = "offload"

    def __init__(self, edge: Backend, cloud: Backend, router: OffloadRouter) -> None:
        self.sides: dict[Side, Backend] = {"edge": edge, "cloud": cloud}
        self.router = router

    async def aclose(self) -> None:
        """Close both sides."""
        for backend in self.sides.values():
            await backend.aclose()

    async def stream(self, request: GenerationRequest) -> AsyncGenerator[list[Event], None]:
        """The events of the side the rule picks (or the other, if it fails first)."""
        try:
            request, weight, sync_cost = _own_parameters(request)
        except ValueError as exc:
            yield [Event.error(str(exc), code="invalid_parameter", param="metadata")]
            return
        decision = self.router.decide(time.monotonic(), weight, sync_cost)
        side = decision.side
        for fell_back in (False, True):
            produced = False
            started = time.monotonic()
            events = self.sides[side].stream(request)
            try:
                async for batch in events:
                    if not produced:
                        if not fell_back and _failed_first(batch):
                            self.router.failed(side, time.monotonic())
                            break
                        produced = True
                        self.router.observe(side, (time.monotonic() - started) * 1000)
                    _mark(batch, decision, side, fell_back)
                    yield batch
            finally:
                await events.aclose()
            if produced:
                return
            side = other(side)


def _own_parameters(
    request: GenerationRequest,
) -> tuple[GenerationRequest, float | None, float | None]:
    """The request without Airlane's metadata keys, and their values."""
    metadata = request.extra.get("metadata")
    if not isinstance(metadata, dict) or not (WEIGHT_KEY in metadata or SYNC_COST_KEY in metadata):
        return request, None, None
    rest = {k: v for k, v in metadata.items() if k not in (WEIGHT_KEY, SYNC_COST_KEY)}
    weight = _number(metadata.get(WEIGHT_KEY), WEIGHT_KEY)
    sync_cost = _number(metadata.get(SYNC_COST_KEY), SYNC_COST_KEY)
    extra: dict[str, Any] = dict(request.extra)
    if rest:
        extra["metadata"] = rest
    else:
        del extra["metadata"]
    return replace(request, extra=extra), weight, sync_cost


def _number(value: object, key: str) -> float | None:
    if value is None:
        return None
    try:
        number = float(str(value))
    except ValueError:
        raise ValueError(f"metadata {key} must be a number, not {value!r}") from None
    if not math.isfinite(number) or number < 0:
        raise ValueError(f"metadata {key} must be a number of 0 or more, not {value!r}")
    return number


def _failed_first(batch: list[Event]) -> bool:
    """Whether a side's first batch is only an error the other side may not have."""
    if len(batch) != 1 or batch[0].kind is not Kind.ERROR:
        return False
    data = batch[0].data or {}
    code = data.get("code")
    if code in FALLBACK_CODES:
        return True
    status = data.get("status")
    return (
        code == "upstream_http_error"
        and isinstance(status, int)
        and (status >= 500 or status == 429)
    )


def _mark(batch: list[Event], decision: Decision, side: Side, fell_back: bool) -> None:
    """Put the routing on the terminal event, for the usage ledger."""
    last = batch[-1]
    if last.terminal:
        last.data = {**(last.data or {}), "routing": decision.to_dict(side, fell_back)}
