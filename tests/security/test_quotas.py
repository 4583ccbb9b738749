"""Quotas: requests per principal and per tenant, generations at once per tenant, generated
tokens and bytes delivered; over a limit is ``quota_exceeded`` with when to retry, on the
client's own wire, never a dropped connection (a reader over its bytes is slowed, not cut)."""

from __future__ import annotations

import time
from pathlib import Path

import grpc
import httpx
import orjson
import pytest
from websockets.asyncio.client import connect

from airlane.artifacts.packer import pack
from airlane.backends import SyntheticBackend
from airlane.core import Event
from airlane.eventlog import NewEvent
from airlane.gateway import Gateway
from airlane.gateway.quotas import QuotaConfig, QuotaExceeded, Quotas
from airlane.hub import MemoryHub
from airlane.security import Principal
from airlane.v1 import service_pb2
from tests.artifacts.support import checkpoint
from tests.grpc_transport.conftest import airlane_stub
from tests.servers import ServerProcess, run_server

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


def test_a_principal_has_limits_of_its_own_inside_its_tenant() -> None:
    now = [0.0]
    quotas = Quotas(
        QuotaConfig(principal_concurrent_streams=1, concurrent_streams=3, tokens_per_min=60,
                    tokens_burst=10),
        clock=lambda: now[0],
    )  # fmt: skip
    ann_first = quotas.start_stream(ANN)
    with pytest.raises(QuotaExceeded, match="ann has 1 generations running"):
        quotas.start_stream(ANN)
    al_first = quotas.start_stream(AL)  # the tenant still has room: al is not ann
    ann_first()
    ann_first()  # a second release changes nothing
    quotas.charge_tokens(ANN, 12)  # ann owes 2 tokens; al owes nothing
    with pytest.raises(QuotaExceeded, match="ann has generated its 60 tokens/min") as caught:
        quotas.start_stream(ANN)
    assert caught.value.retry_after_s == pytest.approx(3.0)
    al_first()
    quotas.start_stream(AL)()
    now[0] = 3.0
    quotas.start_stream(ANN)()


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


def test_bytes_delivered_per_principal_and_per_tenant() -> None:
    now = [0.0]
    quotas = Quotas(
        QuotaConfig(bytes_per_s=1000, bytes_burst=2000, tenant_bytes_per_s=1500,
                    tenant_bytes_burst=3000),
        clock=lambda: now[0],
    )  # fmt: skip
    quotas.check_bytes(ANN)
    quotas.charge_bytes(ANN, 2500)  # one batch may take a bucket into debt
    assert quotas.bytes_wait(ANN) == pytest.approx(0.501)  # 500 owed, then one byte
    with pytest.raises(QuotaExceeded, match="ann \\(or tenant team\\)") as caught:
        quotas.check_bytes(ANN)
    assert caught.value.retry_after_s == pytest.approx(0.501)
    quotas.check_bytes(AL)  # al's own bucket is whole, the tenant's holds 500
    quotas.charge_bytes(AL, 600)
    with pytest.raises(QuotaExceeded):
        quotas.check_bytes(AL)  # now the tenant's is in debt too
    quotas.check_bytes(Principal("bo", tenant="other"))
    now[0] = 2.0
    quotas.check_bytes(ANN)
    quotas.check_bytes(AL)


async def test_a_reader_over_its_bytes_is_slowed_not_cut() -> None:
    hub = MemoryHub()
    await hub.start()
    quotas = Quotas(QuotaConfig(bytes_per_s=200_000, bytes_burst=50_000))
    gateway = Gateway(hub, SyntheticBackend(), quotas=quotas)
    await gateway.create_named(ANN, "big")
    for n in range(8):
        await gateway.publish(ANN, "big", Event.delta(str(n) * 25_000))
    await gateway.publish(ANN, "big", Event.done())
    started = time.monotonic()
    async with await gateway.subscribe(ANN, "big") as subscription:
        assert not subscription.listen(lambda: None)  # read through next_batch, which waits
        events: list[Event] = []
        while batch := await subscription.next_batch(limit=1):
            events.append(batch[0])
    took = time.monotonic() - started
    assert "".join(e.text for e in events) == "".join(str(n) * 25_000 for n in range(8))
    # 200 KB past a 50 KB burst at 200 KB/s: at least the 150 KB it owed, i.e. 0.75 s.
    assert took >= 0.6, took
    await gateway.aclose()


async def test_log_records_read_are_bytes_delivered() -> None:
    now = [0.0]
    quotas = Quotas(QuotaConfig(bytes_per_s=1000, bytes_burst=1000), clock=lambda: now[0])
    gateway = Gateway(MemoryHub(), SyntheticBackend(), quotas=quotas)
    await gateway.start()
    await gateway.logs.create(ANN, "audit")
    record = NewEvent("note", orjson.dumps({"blob": "x" * 1500}))
    await gateway.logs.append(ANN, "audit", [record])
    assert len(await gateway.logs.read(ANN, "audit")) == 1  # 1.5 KB: 500 bytes of debt
    with pytest.raises(QuotaExceeded):
        await gateway.logs.read(ANN, "audit")
    now[0] = 1.0
    assert len(await gateway.logs.read(ANN, "audit")) == 1
    await gateway.aclose()


async def test_bytes_over_quota_are_refused_on_every_wire_and_another_tenant_reads_on() -> None:
    config = "[quotas]\nbytes_per_s = 100000\nbytes_burst = 100000\n"
    alice, bob = {"authorization": "Bearer sk-a"}, {"authorization": "Bearer sk-b"}
    keys = ["--api-key", "alice@acme=sk-a", "--api-key", "bob@beta=sk-b"]
    with run_server(*keys, config=config) as gateway:
        async with httpx.AsyncClient(base_url=gateway.url, timeout=20) as http:
            for who in (alice, bob):
                for n in range(3):  # 300 KB each: three times the burst
                    event = {"kind": "delta", "text": str(n) * 100_000}
                    answer = await http.post("/v1/streams/big/events", json=event, headers=who)
                    assert answer.status_code == 200, answer.text
                await http.post("/v1/streams/big/events", json={"kind": "done"}, headers=who)
            started = time.monotonic()
            async with http.stream("GET", "/v1/streams/big/events", headers=alice) as reading:
                # The first batch (all 300 KB) took alice 200 KB into debt: while she repays
                # it, her next events wait and anything new she asks to read is refused.
                chunks = reading.aiter_bytes()
                body = await anext(chunks)
                refused = await http.get("/v1/streams/big/events", headers=alice)
                assert refused.status_code == 429, refused.status_code
                assert refused.json()["error"]["code"] == "quota_exceeded"
                assert int(refused.headers["retry-after"]) >= 1
                await refused_on_other_wires(gateway, alice)
                for who in (bob, alice):  # another tenant reads on; a snapshot is no read
                    answer = await http.get("/v1/streams/big/snapshot", headers=who)
                    assert answer.status_code == 200, answer.status_code
                async for chunk in chunks:
                    body += chunk
            took = time.monotonic() - started
            text = body.decode()
            assert text.count("2" * 100_000) == 1 and '"kind":"done"' in text, "cut short"
            assert took >= 1.5, took  # 200 KB owed at 100 KB/s before the end went out
            answer = await http.get("/v1/streams/big/events", headers=bob)
            assert answer.status_code == 200, answer.status_code


async def refused_on_other_wires(gateway: ServerProcess, alice: dict[str, str]) -> None:
    """While ``alice`` is in debt: a WebSocket subscription is an error reply (the socket stays
    open), a gRPC one ``RESOURCE_EXHAUSTED``."""
    url = gateway.url.replace("http", "ws", 1) + "/v1/ws"
    async with connect(url, subprotocols=["airlane.v1.json"], additional_headers=alice) as ws:
        await ws.send(orjson.dumps({"op": "subscribe", "stream": "big"}).decode())
        reply = orjson.loads(await ws.recv())
        assert reply["op"] == "error" and reply["code"] == "quota_exceeded", reply
        await ws.send(orjson.dumps({"op": "ping"}).decode())  # the socket stays open
        assert orjson.loads(await ws.recv())["op"] == "pong"
    assert gateway.grpc is not None
    async with grpc.aio.insecure_channel(gateway.grpc) as channel:
        call = airlane_stub(channel).Subscribe(
            service_pb2.SubscribeRequest(stream_id="big"), metadata=tuple(alice.items())
        )
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            async for _ in call:
                pytest.fail("a reader in debt was handed events")
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


def test_artifact_bytes_served_are_bytes_delivered(tmp_path: Path) -> None:
    store = tmp_path / "store"
    pack([checkpoint(tmp_path / "a.safetensors", seed=1, layers=2, hidden=256)], store,
         name="base", version="1")  # fmt: skip
    config = "[quotas]\nbytes_per_s = 100000\nbytes_burst = 100000\n"
    with (
        run_server("--artifacts", str(store), "--api-key", "ann=sk-a", config=config) as gateway,
        httpx.Client(base_url=gateway.url, timeout=20) as http,
    ):
        http.headers["authorization"] = "Bearer sk-a"
        manifest = http.get("/v1/artifacts/base/1/manifest.json")
        assert manifest.status_code == 200, manifest.text
        path = manifest.json()["files"][0]["path"]
        ranged = http.get(f"/v1/artifacts/base/1/{path}", headers={"range": "bytes=0-99"})
        assert ranged.status_code == 206  # 100 bytes: the range is what is charged
        whole = http.get(f"/v1/artifacts/base/1/{path}")
        assert whole.status_code == 200 and len(whole.content) > 4_000_000  # whole, in debt
        refused = http.get(f"/v1/artifacts/base/1/{path}", headers={"range": "bytes=0-9"})
        assert refused.status_code == 429, refused.status_code
        assert int(refused.headers["retry-after"]) >= 1
