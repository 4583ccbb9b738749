"""Quotas: requests per principal and per tenant, generations at once per tenant; over a
limit is ``quota_exceeded`` with when to retry, on the client's own wire, never a dropped
connection."""

from __future__ import annotations

import grpc
import httpx
import pytest

from airlane.gateway.quotas import QuotaConfig, QuotaExceeded, Quotas
from airlane.security import Principal
from airlane.v1 import service_pb2
from tests.grpc_transport.conftest import airlane_stub
from tests.servers import run_server

ANN, AL = Principal("ann", tenant="team"), Principal("al", tenant="team")


def test_token_buckets_per_principal_and_per_tenant() -> None:
    now = [0.0]
    quotas = Quotas(
        QuotaConfig(requests_per_s=2, requests_burst=2, tenant_requests_per_s=3,
                    tenant_requests_burst=3),
        clock=lambda: now[0],
    )  # fmt: skip
    quotas.admit(ANN)
    quotas.admit(ANN)
    with pytest.raises(QuotaExceeded) as caught:
        quotas.admit(ANN)  # ann's burst is spent
    assert caught.value.retry_after_s == pytest.approx(0.5)
    assert "ann is over 2 requests/s" in str(caught.value)
    # The refused request spent nothing of the tenant's: al still has one of its three.
    quotas.admit(AL)
    with pytest.raises(QuotaExceeded, match="tenant team"):
        quotas.admit(AL)
    now[0] = 1.0  # a second later both buckets have refilled
    quotas.admit(ANN)
    assert quotas.refused == 2


def test_generations_at_once_per_tenant() -> None:
    quotas = Quotas(QuotaConfig(concurrent_streams=2))
    first, second = quotas.start_stream(ANN), quotas.start_stream(AL)
    with pytest.raises(QuotaExceeded, match="2 generations running"):
        quotas.start_stream(ANN)
    quotas.start_stream(Principal("bob", tenant="bob"))()  # another tenant is not counted
    first()
    first()  # ending twice frees one slot only
    quotas.start_stream(ANN)
    with pytest.raises(QuotaExceeded):
        quotas.start_stream(ANN)
    second()


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="requests_per_s"):
        QuotaConfig(requests_per_s=-1)


async def test_over_quota_is_429_with_retry_after_and_the_server_keeps_serving() -> None:
    config = "[quotas]\nrequests_per_s = 1\nrequests_burst = 3\n"
    key = {"authorization": "Bearer sk-a"}
    with run_server("--api-key", "alice=sk-a", config=config) as gateway:
        async with httpx.AsyncClient(base_url=gateway.url, timeout=20) as http:
            answers = [await http.get("/v1/streams/x", headers=key) for _ in range(4)]
            assert [a.status_code for a in answers] == [404, 404, 404, 429]
            refused = answers[-1]
            assert refused.json()["error"]["code"] == "quota_exceeded"
            assert int(refused.headers["retry-after"]) >= 1
            assert (await http.get("/healthz")).status_code == 200
        assert gateway.grpc is not None
        async with grpc.aio.insecure_channel(gateway.grpc) as channel:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await airlane_stub(channel).Info(
                    service_pb2.InfoRequest(stream_id="x"), metadata=tuple(key.items())
                )
        assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        trailers = dict(caught.value.trailing_metadata() or ())
        assert trailers.get("airlane-error-code") == "quota_exceeded"


async def test_a_tenant_over_its_generations_is_refused_until_one_ends() -> None:
    config = "[quotas]\nconcurrent_streams = 1\n[synthetic]\nttft_ms = 5.0\nitl_ms = 20.0\n"
    key = {"authorization": "Bearer sk-a"}
    body = {"model": "synthetic", "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 30}  # fmt: skip
    with run_server("--api-key", "alice=sk-a", config=config) as gateway:
        async with httpx.AsyncClient(base_url=gateway.url, timeout=20) as http:
            first = await http.post("/v1/streams", json=body, headers=key)
            assert first.status_code == 201, first.text
            second = await http.post("/v1/streams", json=body, headers=key)
            assert second.status_code == 429 and "generations" in second.text
            events = f"/v1/streams/{first.json()['id']}/events"
            async with http.stream("GET", events, headers=key) as response:
                await response.aread()  # the first one runs to its end
            third = await http.post("/v1/streams", json=body, headers=key)
            assert third.status_code == 201, third.text


def test_generated_tokens_per_tenant_are_charged_when_a_generation_ends() -> None:
    now = [0.0]
    quotas = Quotas(QuotaConfig(tenant_tokens_per_min=60, tenant_tokens_burst=20),
                    clock=lambda: now[0])  # fmt: skip
    quotas.start_stream(ANN)()  # the budget is whole: it starts
    quotas.charge_tokens(ANN, 25)  # it produced more than the burst: the tenant owes 5
    with pytest.raises(QuotaExceeded, match="tenant team has generated its 60 tokens/min") as no:
        quotas.start_stream(AL)
    assert no.value.retry_after_s == pytest.approx(6.0)  # 6 tokens back at one a second
    quotas.start_stream(Principal("bo", tenant="other"))  # another tenant is not concerned
    now[0] = 6.0
    quotas.start_stream(AL)


async def test_a_tenant_over_its_tokens_is_refused_and_the_running_one_is_not_cut() -> None:
    config = "[quotas]\ntenant_tokens_per_min = 6\ntenant_tokens_burst = 5\n"
    body = {"model": "synthetic", "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 30}  # fmt: skip
    keys = ["--api-key", "alice@acme=sk-a", "--api-key", "bob@beta=sk-b"]
    with run_server(*keys, config=config) as gateway:
        async with httpx.AsyncClient(base_url=gateway.url, timeout=20) as http:
            alice = {"authorization": "Bearer sk-a"}
            first = await http.post("/v1/chat/completions", json=body, headers=alice)
            assert first.status_code == 200, first.text
            produced = first.json()["usage"]["completion_tokens"]
            assert produced > 5  # all of it, past the budget of 5: never cut short
            refused = await http.post("/v1/chat/completions", json=body, headers=alice)
            assert refused.status_code == 429, refused.text
            assert refused.json()["error"]["code"] == "quota_exceeded"
            owed = produced - 5 + 1  # back to one token, at 6 a minute
            assert int(refused.headers["retry-after"]) >= owed * 10 - 1
            bob = {"authorization": "Bearer sk-b"}
            other = await http.post("/v1/chat/completions", json=body, headers=bob)
            assert other.status_code == 200, other.text
