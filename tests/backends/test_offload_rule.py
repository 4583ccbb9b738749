"""The offload rule on its own: ``(cloud - edge) x weight - sync cost > 0`` runs at the edge;
rolling estimates; exploration; a failed side cools down."""

from __future__ import annotations

import pytest

from airlane.backends.offload_rule import LatencyEstimate, OffloadConfig, OffloadRouter

EDGE_CLOUD = {"edge_url": "synthetic", "cloud_url": "synthetic"}


def router(**settings: float) -> OffloadRouter:
    return OffloadRouter(OffloadConfig(**EDGE_CLOUD, explore_every=0, **settings))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("edge", "cloud", "weight", "sync", "side"),
    [
        (50, 400, 1.0, 0, "edge"),  # 350 ms saved
        (50, 400, 1.0, 349, "edge"),
        (50, 400, 1.0, 350, "cloud"),  # saving exactly the sync cost is not worth it
        (50, 400, 0.0, 0, "cloud"),  # a request that does not care about latency
        (50, 400, 0.5, 200, "cloud"),  # 175 < 200
        (500, 400, 1.0, 0, "cloud"),  # the edge is slower
    ],
)
def test_the_seed_rule(edge: float, cloud: float, weight: float, sync: float, side: str) -> None:
    decision = router(edge_prior_ms=edge, cloud_prior_ms=cloud).decide(0.0, weight, sync)
    assert decision.side == side and decision.reason == "rule"
    assert decision.score == (cloud - edge) * weight - sync
    assert decision.to_dict()["chosen"] == side


def test_estimates_replace_the_prior_then_move_smoothly() -> None:
    estimate = LatencyEstimate(400.0, 0.5)
    estimate.observe(100.0)
    assert estimate.ms == 100.0
    estimate.observe(200.0)
    assert estimate.ms == 150.0


def test_measured_latencies_change_the_decision() -> None:
    r = router(edge_prior_ms=50, cloud_prior_ms=400)
    assert r.decide(0.0).side == "edge"
    r.observe("edge", 900.0)  # the edge turns out slow
    assert r.decide(0.0).side == "cloud"


def test_every_nth_request_explores_the_other_side() -> None:
    r = OffloadRouter(OffloadConfig(**EDGE_CLOUD, explore_every=4))  # type: ignore[arg-type]
    sides = [r.decide(0.0) for _ in range(8)]
    assert [d.side for d in sides] == ["edge", "edge", "edge", "cloud"] * 2
    assert sides[3].reason == "explore"


def test_a_failed_side_cools_down_unless_both_did() -> None:
    r = router(cooldown_s=30.0)
    r.failed("edge", now=100.0)
    decision = r.decide(110.0)
    assert (decision.side, decision.reason) == ("cloud", "cooldown")
    assert r.decide(131.0).side == "edge"  # cooled down
    r.failed("edge", now=200.0)
    r.failed("cloud", now=200.0)
    assert r.decide(201.0).side == "edge"  # both failing: the rule decides
    r.observe("edge", 40.0)  # a success clears the failure
    assert not r.cooling("edge", 202.0)


def test_config_mistakes() -> None:
    with pytest.raises(ValueError, match="both"):
        OffloadConfig(edge_url="synthetic")
    with pytest.raises(ValueError, match="smoothing"):
        OffloadConfig(**EDGE_CLOUD, smoothing=0)  # type: ignore[arg-type]
    assert not OffloadConfig().enabled


def test_the_edge_page_offload_example_loads(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from pathlib import Path

    from airlane.server.config import load_config

    page = (Path(__file__).resolve().parents[2] / "docs" / "edge.md").read_text()
    block = next(b for b in page.split("```toml\n")[1:] if b.startswith("[offload]"))
    path = tmp_path / "offload.toml"
    path.write_text(block.split("```", 1)[0])
    offload = load_config(path).offload
    assert offload.enabled and offload.cloud_api_key == "sk-..."
    assert offload.explore_every == 50
