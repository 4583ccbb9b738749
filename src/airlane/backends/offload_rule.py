"""The edge-or-cloud offload rule, and the latency estimates it runs on (pure: time is passed
in).

A generation runs at the edge when

    (cloud latency - edge latency) x weight - sync cost > 0

(the seed's rule): the time the edge saves, weighted by how much this request cares about
latency, must outweigh the cost of syncing state to run it there. The latencies are rolling
estimates (`LatencyEstimate`: an exponentially weighted mean of the time to the first batch of
real requests, starting from a configured prior). The weight and the sync cost come with each
request (or the configured defaults).

`OffloadRouter.decide` applies the rule, with two exceptions that keep the estimates honest and
the service up: every ``explore_every``-th request goes to the side the rule did not pick (a
side never chosen would never be measured again), and a side that failed within
``cooldown_s`` is skipped while the other is healthy. Each `Decision` carries its inputs, so
the usage ledger can say why a request ran where it did.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["Decision", "LatencyEstimate", "OffloadConfig", "OffloadRouter", "Side"]

Side = Literal["edge", "cloud"]


@dataclass(frozen=True, slots=True)
class OffloadConfig:
    """``[offload]``: the two sides and the rule's defaults."""

    edge_url: str | None = None
    """The edge backend: an OpenAI-compatible base URL, or ``synthetic``."""
    cloud_url: str | None = None
    """The cloud backend: an OpenAI-compatible base URL, or ``synthetic``."""
    edge_api_key: str | None = None
    cloud_api_key: str | None = None
    edge_model: str | None = None
    """Model name forced on edge requests (None: the client's)."""
    cloud_model: str | None = None
    weight: float = 1.0
    """How much a request values a millisecond saved, unless it says (``offload_weight``)."""
    sync_cost_ms: float = 0.0
    """What running at the edge costs in state sync, in milliseconds' worth, unless the
    request says (``offload_sync_cost_ms``)."""
    smoothing: float = 0.2
    """Weight of the newest sample in the rolling estimates (0 < s <= 1)."""
    edge_prior_ms: float = 50.0
    """The edge's estimate before any request measured it."""
    cloud_prior_ms: float = 400.0
    """The cloud's estimate before any request measured it."""
    explore_every: int = 50
    """Every this-many requests, one goes to the side the rule did not pick (0: never)."""
    cooldown_s: float = 30.0
    """A side that failed is skipped this long (while the other one is healthy)."""

    def __post_init__(self) -> None:
        if (self.edge_url is None) != (self.cloud_url is None):
            raise ValueError("[offload] needs both edge_url and cloud_url (or neither)")
        if not 0 < self.smoothing <= 1:
            raise ValueError("[offload] smoothing is above 0 and at most 1")
        if self.weight < 0 or self.sync_cost_ms < 0:
            raise ValueError("[offload] weight and sync_cost_ms are not negative")
        if self.explore_every < 0 or self.cooldown_s < 0:
            raise ValueError("[offload] explore_every and cooldown_s are not negative")

    @property
    def enabled(self) -> bool:
        """Whether generations are routed between two backends."""
        return self.edge_url is not None


class LatencyEstimate:
    """An exponentially weighted mean of latencies in milliseconds, from a prior."""

    __slots__ = ("ms", "samples", "smoothing")

    def __init__(self, prior_ms: float, smoothing: float) -> None:
        self.ms = prior_ms
        self.samples = 0
        self.smoothing = smoothing

    def observe(self, ms: float) -> None:
        """Fold in one measured latency (the first replaces the prior outright)."""
        self.ms = ms if self.samples == 0 else self.ms + self.smoothing * (ms - self.ms)
        self.samples += 1


@dataclass(frozen=True, slots=True)
class Decision:
    """Where one request runs, and why."""

    side: Side
    reason: Literal["rule", "explore", "cooldown"]
    edge_ms: float
    cloud_ms: float
    weight: float
    sync_cost_ms: float

    @property
    def score(self) -> float:
        """``(cloud - edge) x weight - sync cost``: positive means the edge."""
        return (self.cloud_ms - self.edge_ms) * self.weight - self.sync_cost_ms

    def to_dict(self, ran_on: Side | None = None, fell_back: bool = False) -> dict[str, Any]:
        """The decision as the usage ledger reports it (``ran_on``: where it finally ran)."""
        return {
            "side": ran_on or self.side,
            "chosen": self.side,
            "reason": self.reason,
            "fell_back": fell_back,
            "edge_ms": round(self.edge_ms, 3),
            "cloud_ms": round(self.cloud_ms, 3),
            "weight": self.weight,
            "sync_cost_ms": self.sync_cost_ms,
            "score": round(self.score, 3),
        }


def other(side: Side) -> Side:
    """The side that is not ``side``."""
    return "cloud" if side == "edge" else "edge"


class OffloadRouter:
    """The rule with its estimates; see the module docstring."""

    def __init__(self, config: OffloadConfig) -> None:
        self.config = config
        self.estimates: dict[Side, LatencyEstimate] = {
            "edge": LatencyEstimate(config.edge_prior_ms, config.smoothing),
            "cloud": LatencyEstimate(config.cloud_prior_ms, config.smoothing),
        }
        self._failed_at: dict[Side, float] = {}
        self._requests = 0

    def decide(
        self, now: float, weight: float | None = None, sync_cost_ms: float | None = None
    ) -> Decision:
        """Where the next request runs."""
        config = self.config
        weight = config.weight if weight is None else weight
        sync_cost = config.sync_cost_ms if sync_cost_ms is None else sync_cost_ms
        edge, cloud = self.estimates["edge"].ms, self.estimates["cloud"].ms
        self._requests += 1
        side: Side = "edge" if (cloud - edge) * weight - sync_cost > 0 else "cloud"
        reason: Literal["rule", "explore", "cooldown"] = "rule"
        if self.cooling(side, now) and not self.cooling(other(side), now):
            side, reason = other(side), "cooldown"
        elif (
            config.explore_every
            and self._requests % config.explore_every == 0
            and not self.cooling(other(side), now)
        ):
            side, reason = other(side), "explore"
        return Decision(side, reason, edge, cloud, weight, sync_cost)

    def cooling(self, side: Side, now: float) -> bool:
        """Whether ``side`` failed within ``cooldown_s``."""
        failed = self._failed_at.get(side)
        return failed is not None and now - failed < self.config.cooldown_s

    def observe(self, side: Side, latency_ms: float) -> None:
        """A request on ``side`` produced its first batch after ``latency_ms``."""
        self.estimates[side].observe(latency_ms)
        self._failed_at.pop(side, None)

    def failed(self, side: Side, now: float) -> None:
        """A request on ``side`` failed before producing anything."""
        self._failed_at[side] = now
