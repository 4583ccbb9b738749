"""The offload router end to end: an Airlane gateway routes each generation to an edge or a
cloud backend (two more real gateways, each an OpenAI-compatible server with its own time to
first token), read with the official ``openai`` SDK. The usage ledger says where each ran and
why; killing the edge makes the next request fall back to the cloud, then the edge cools
down."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import openai

from tests.servers import ServerProcess, run_server

EDGE = "[synthetic]\nttft_ms = 5.0\nitl_ms = 1.0\nitl_jitter_ms = 0.0\n"
CLOUD = "[synthetic]\nttft_ms = 250.0\nitl_ms = 1.0\nitl_jitter_ms = 0.0\n"
SOLO = ("--airc-port", "-1", "--grpc-port", "-1", "--http3-port", "-1", "--rsocket-port", "-1")


@contextlib.contextmanager
def offload(
    edge: ServerProcess, cloud: ServerProcess, edge_ms: float = 100.0, cloud_ms: float = 100.0
) -> Iterator[ServerProcess]:
    config = f"""
[offload]
edge_url = "{edge.url}/v1"
cloud_url = "{cloud.url}/v1"
edge_prior_ms = {edge_ms}
cloud_prior_ms = {cloud_ms}
explore_every = 0
cooldown_s = 60.0
"""
    with run_server(*SOLO, config=config) as router:
        yield router


async def routing(router: ServerProcess, metadata: dict[str, str] | None = None) -> dict[str, Any]:
    client = openai.AsyncOpenAI(base_url=f"{router.url}/v1", api_key="unused", max_retries=0)
    async with client:
        stream = await client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "hello"}],
            max_tokens=8,
            stream=True,
            stream_options={"include_usage": True},
            **({"metadata": metadata} if metadata else {}),
        )
        text, usage = "", None
        async for chunk in stream:
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
            if chunk.usage is not None:
                usage = chunk.usage
    assert text, "no tokens came through"
    assert usage is not None
    return dict(usage.model_extra or {})["routing"]


async def test_requests_run_where_the_rule_says_and_the_ledger_says_why() -> None:
    with (
        run_server(*SOLO, config=EDGE) as edge,
        run_server(*SOLO, config=CLOUD) as cloud,
        offload(edge, cloud) as router,
    ):
        # Equal priors: score 0, the cloud; it measures ~250 ms. The edge is then tried
        # by the rule (cloud estimate 250 > edge prior 100) and measures a few ms.
        first = await routing(router)
        assert (first["side"], first["reason"]) == ("cloud", "rule")
        second = await routing(router)
        assert second["side"] == "edge" and second["cloud_ms"] > 150
        third = await routing(router)
        assert third["side"] == "edge" and third["edge_ms"] < 150
        # A request that does not value latency, or whose state is costly to sync, goes
        # to the cloud; the keys are Airlane's, not forwarded.
        assert (await routing(router, {"offload_weight": "0"}))["side"] == "cloud"
        heavy = await routing(router, {"offload_sync_cost_ms": "100000"})
        assert heavy["side"] == "cloud" and heavy["sync_cost_ms"] == 100000
        assert heavy["score"] < 0


async def test_a_dead_edge_falls_back_to_the_cloud_and_cools_down() -> None:
    with (
        run_server(*SOLO, config=EDGE) as edge,
        run_server(*SOLO, config=CLOUD) as cloud,
        offload(edge, cloud, edge_ms=5.0, cloud_ms=500.0) as router,
    ):
        assert (await routing(router))["side"] == "edge"
        edge.kill()
        fallback = await routing(router)
        assert fallback["chosen"] == "edge" and fallback["side"] == "cloud"
        assert fallback["fell_back"] is True
        after = await routing(router)
        assert (after["side"], after["reason"]) == ("cloud", "cooldown")


async def test_a_bad_weight_is_a_clear_error() -> None:
    with (
        run_server(*SOLO, config=EDGE) as edge,
        run_server(*SOLO, config=CLOUD) as cloud,
        offload(edge, cloud) as router,
    ):
        client = openai.AsyncOpenAI(base_url=f"{router.url}/v1", api_key="x", max_retries=0)
        async with client:
            stream = await client.chat.completions.create(
                model="m",
                messages=[{"role": "user", "content": "hello"}],
                stream=True,
                metadata={"offload_weight": "fast"},
            )
            try:
                async for _ in stream:
                    pass
            except openai.APIError as exc:
                assert "offload_weight" in str(exc)
            else:
                raise AssertionError("no error for a weight that is not a number")
