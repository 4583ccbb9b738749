"""The admission's wait is bounded: a request still waiting after ``max_wait_s``, or one that
arrives while ``max_waiting`` wait already, is refused with `Overloaded`; and every transport
answers that as "overloaded, retry later" (HTTP 503 with ``Retry-After``, a refused WebSocket
handshake, AIRC ``ERROR overloaded``, gRPC ``UNAVAILABLE``), while the health probe and the
metrics scrape never wait. The transports are checked against ``airlane serve``'s own
``serve()`` in a fresh interpreter, with real clients (httpx, the openai SDK, websockets, the
AIRC client, grpcio) on the same event loop as the admission they meet."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from airlane.runtime.admission import FIRST_BATCH, Admission, AdmissionConfig, Overloaded
from airlane.server import load_config
from tests.waiting import virtual_clock, virtual_time

REPO = Path(__file__).resolve().parent.parent.parent


class Due:
    """A deadline source with work due for as long as the test holds it."""

    def overdue(self, now_ns: int) -> bool:
        return True


async def _admit(admission: Admission) -> str:
    try:
        await admission.admit()
    except Overloaded as exc:
        return f"refused: {exc}"
    return "admitted"


@virtual_time
async def test_requests_still_waiting_after_max_wait_are_refused_and_the_rest_admitted() -> None:
    admission = Admission(AdmissionConfig(max_wait_s=0.01, retry_after_s=3))
    source = Due()
    admission.register(source)
    tasks = [asyncio.create_task(_admit(admission)) for _ in range(FIRST_BATCH + 12)]
    await asyncio.sleep(0)  # every request waits
    assert admission.waiting == FIRST_BATCH + 12
    # The loop is held past the bound before the first release: its clock moves on 20 ms
    # while nothing runs (the admission measures waits in loop time).
    virtual_clock().advance(0.02)
    outcomes = await asyncio.wait_for(asyncio.gather(*tasks), 5)
    # The first batch's turn came: they are admitted however long they waited; the others
    # had waited past the bound and were not next: refused, with the configured hint.
    assert outcomes[:FIRST_BATCH] == ["admitted"] * FIRST_BATCH
    assert all(o.startswith("refused: the gateway is overloaded") for o in outcomes[FIRST_BATCH:])
    assert "waited 0.01 s" in outcomes[-1] and "retry in 3 s" in outcomes[-1]
    assert admission.refused == 12
    assert admission.waiting == 0


async def test_requests_within_the_bound_are_all_admitted_in_order() -> None:
    admission = Admission(AdmissionConfig(max_wait_s=5.0))
    source = Due()
    admission.register(source)
    outcomes = await asyncio.wait_for(asyncio.gather(*(_admit(admission) for _ in range(300))), 10)
    assert outcomes == ["admitted"] * 300
    assert admission.refused == 0


async def test_one_more_than_max_waiting_is_refused_at_once() -> None:
    admission = Admission(AdmissionConfig(max_waiting=3))
    source = Due()
    admission.register(source)
    waiting = [asyncio.create_task(_admit(admission)) for _ in range(3)]
    await asyncio.sleep(0)
    assert admission.waiting == 3
    with pytest.raises(Overloaded) as refused:
        await admission.admit()
    assert "3 new streams wait to be set up already" in str(refused.value)
    assert refused.value.code == "overloaded" and refused.value.retry_after_s is not None
    assert refused.value.retry_after_s == 1
    assert await asyncio.wait_for(asyncio.gather(*waiting), 5) == ["admitted"] * 3
    assert admission.refused == 1


async def test_max_waiting_zero_refuses_rather_than_waits_and_admits_when_nothing_is_due() -> None:
    admission = Admission(AdmissionConfig(max_waiting=0))
    await admission.admit()  # no source: nothing is due, nothing waits
    source = Due()
    admission.register(source)
    with pytest.raises(Overloaded):
        await admission.admit()
    del source
    await admission.admit()
    assert (admission.deferred, admission.refused) == (0, 1)


async def test_configure_replaces_the_bounds() -> None:
    admission = Admission()
    assert admission.config == AdmissionConfig()
    admission.configure(AdmissionConfig(max_waiting=0))
    source = Due()
    admission.register(source)
    with pytest.raises(Overloaded):
        await admission.admit()


@pytest.mark.parametrize(
    "settings",
    [{"max_wait_s": 0}, {"max_wait_s": -1}, {"max_wait_s": float("inf")},
     {"max_wait_s": float("nan")}, {"max_waiting": -1}, {"retry_after_s": -1},
     {"share": 0}, {"share": 1.5}, {"share": float("nan")}],
)  # fmt: skip
def test_bad_bounds_are_refused(settings: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="admission"):
        AdmissionConfig(**settings)


def test_the_admission_table_of_the_configuration_file(tmp_path: Path) -> None:
    path = tmp_path / "airlane.toml"
    path.write_text(
        "[admission]\nmax_wait_s = 2.5\nmax_waiting = 100\nretry_after_s = 4\nshare = 0.75\n"
    )
    assert load_config(path).admission == AdmissionConfig(2.5, 100, 4, 0.75)
    path.write_text("[admission]\nmax_wait = 2\n")
    with pytest.raises(ValueError, match="unknown"):
        load_config(path)


# Run in a fresh interpreter: serve() tunes the collector and the descriptor table process-wide.
SCRIPT = """
import asyncio, json
import grpc, httpx, openai, websockets
from airlane.runtime.admission import Admission, AdmissionConfig
from airlane.client import (
    AircClient, AirlaneClient, GatewayOverloaded, GrpcClient, RequestRejected, RetryPolicy,
)
from airlane.server.gcpacer import GcConfig
from airlane.server import ServerConfig, serve
from tests.grpc_transport.conftest import SHORT_REQUEST, airlane_stub, generate_request

class Due:
    def __init__(self):
        self.asked = asyncio.Event()  # a request met this due work (and, here, was refused)

    def overdue(self, now_ns):
        self.asked.set()
        return True

CHAT = {"model": "synthetic", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}

async def main():
    ready = asyncio.Event()
    where = []
    def on_ready(listening):
        where.append(listening)
        ready.set()
    # max_waiting = 0: while paced work is due, every set-up is refused rather than queued.
    config = ServerConfig(
        port=0, log_level="warning", gc=GcConfig(paced=False),
        admission=AdmissionConfig(max_waiting=0, retry_after_s=7),
    )
    server = asyncio.create_task(serve(config, on_ready=on_ready))
    await asyncio.wait_for(ready.wait(), 30)
    listening = where[0]
    source = Due()
    Admission.for_loop().register(source)
    out = {}
    async with httpx.AsyncClient(base_url=listening.http, timeout=10) as http:
        r = await http.post("/v1/chat/completions", json={**CHAT, "stream": True})
        out["http"] = [
            r.status_code, r.headers.get("retry-after"), r.headers.get("x-should-retry"),
            r.json()["error"]["code"],
        ]
        out["healthz"] = (await http.get("/healthz")).status_code
        sdk = openai.AsyncOpenAI(base_url=listening.http + "/v1", api_key="k", max_retries=0)
        try:
            await sdk.chat.completions.create(**CHAT, stream=True)
            out["openai"] = "served"
        except openai.APIStatusError as exc:
            out["openai"] = [exc.status_code, exc.code]
        ws_url = listening.http.replace("http://", "ws://") + "/v1/ws"
        try:
            async with websockets.connect(ws_url):
                out["ws"] = "accepted"
        except websockets.InvalidStatus as exc:
            out["ws"] = [exc.response.status_code, json.loads(exc.response.body)["error"]["code"]]
        host, port = listening.airc.removeprefix("tcp://").rsplit(":", 1)
        async with await AircClient.tcp(host, int(port)) as airc:
            try:
                await airc.generate(CHAT)
                out["airc"] = "served"
            except RequestRejected as exc:
                out["airc"] = [exc.code, str(exc)]
        async with grpc.aio.insecure_channel(listening.grpc) as channel:
            call = airlane_stub(channel).Generate(generate_request(SHORT_REQUEST))
            try:
                async for _ in call:
                    pass
                out["grpc"] = "served"
            except grpc.aio.AioRpcError as exc:
                out["grpc"] = [exc.code().name, exc.details()]
        # Airlane's own clients: the refusal is typed, and the HTTP client's chat request is
        # sent again (nothing was started) until its retry budget is spent.
        async with GrpcClient(listening.grpc) as client:
            try:
                async for _ in client.generate(CHAT):
                    pass
            except GatewayOverloaded as exc:
                out["grpc_client"] = exc.code
        async with AirlaneClient(
            listening.http, retry=RetryPolicy(max_retries=2, base_delay_s=0.01, max_delay_s=0.05)
        ) as client:
            try:
                async for _ in client.chat_stream("synthetic", CHAT["messages"]):
                    pass
            except GatewayOverloaded as exc:
                out["sse_client"] = [exc.status, exc.retry_after_s, client.overload_retries]
        metrics = (await http.get("/metrics")).text
        out["refused_metric"] = [
            line for line in metrics.splitlines()
            if line.startswith("airlane_admission_refused_total")
        ]
        # A chat request sent while overloaded goes through once the overload ends: the
        # client waits out each refusal (Retry-After, capped by its policy) and sends again.
        async with AirlaneClient(
            listening.http, retry=RetryPolicy(max_retries=50, base_delay_s=0.01, max_delay_s=0.05)
        ) as client:
            async def chat():
                deltas = client.chat_stream("synthetic", CHAT["messages"])
                return "".join([delta.text async for delta in deltas])
            source.asked.clear()
            task = asyncio.create_task(chat())
            # Its first attempt is refused (the client counts it and waits to try again).
            await asyncio.wait_for(source.asked.wait(), 30)
            del source  # nothing due any more: set-ups go ahead again
            text = await asyncio.wait_for(task, 30)
            out["retried_chat"] = [bool(text), client.overload_retries > 0]
        r = await http.post("/v1/chat/completions", json=CHAT)
        out["after"] = r.status_code
    print(json.dumps(out))
    server.cancel()
    try:
        await server
    except asyncio.CancelledError:
        pass

asyncio.run(main())
"""


def test_every_transport_answers_an_overloaded_set_up_with_retry_later() -> None:
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(SCRIPT)],
        capture_output=True, text=True, timeout=120, check=False, cwd=REPO,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.splitlines()[-1])
    assert out["http"] == [503, "7", "true", "overloaded"]
    assert out["healthz"] == 200
    assert out["openai"] == [503, "overloaded"]
    assert out["ws"] == [503, "overloaded"]
    code, message = out["airc"]
    assert code == "overloaded" and "retry in 7 s" in message
    status, details = out["grpc"]
    assert status == "UNAVAILABLE" and "overloaded" in details
    assert out["grpc_client"] == "overloaded"
    # Sent three times (two retries), each refused; Retry-After (7 s) was capped at 0.05 s.
    assert out["sse_client"] == [503, 7.0, 2]
    # http, openai, ws, airc, grpc, the gRPC client, 3 x the HTTP client: nine refused; the
    # probe and the scrape never waited.
    assert out["refused_metric"] == ["airlane_admission_refused_total 9.0"]
    assert out["retried_chat"] == [True, True]
    assert out["after"] == 200
