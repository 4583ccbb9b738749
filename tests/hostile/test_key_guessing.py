"""Guessing keys costs time: failed authentications are limited per client address on every
wire, and an AIRC connection that keeps sending wrong keys is ended.

Real gateways with one key. With ``[auth_guard] burst = 5``, five wrong keys over HTTP are
answered 401; then every authentication from that address, over HTTP, gRPC or WebSocket and
with the right key too, is ``too_many_requests`` until the budget refills (one a second
here); ``/metrics`` counts both. On AIRC, the fifth refused ``AUTH`` on a connection ends it
with ``GOAWAY AUTH_FAILED``: no sixth guess goes down the same connection.
"""

from __future__ import annotations

import asyncio

import grpc
import httpx
import pytest
import websockets

from airlane.client import ClientError, RequestRejected
from airlane.client.airc import AircClient
from airlane.transports.airc.session import MAX_AUTH_FAILURES
from airlane.v1 import service_pb2
from tests.grpc_transport.conftest import airlane_stub
from tests.servers import run_server

pytestmark = pytest.mark.timeout(60)

KEY = "sk-right-1"


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


async def test_an_address_that_keeps_failing_is_refused_on_every_wire() -> None:
    config = "[auth_guard]\nburst = 5\nper_min = 60\n"
    with run_server("--api-key", f"me={KEY}", config=config) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=20) as http:
            for n in range(5):
                wrong = await http.get("/v1/models", headers=bearer(f"sk-guess-{n}"))
                assert wrong.status_code == 401, wrong.text
            blocked = await http.get("/v1/models", headers=bearer(KEY))
            assert blocked.status_code == 429, blocked.text
            assert blocked.json()["error"]["code"] == "too_many_requests"
            assert int(blocked.headers["retry-after"]) >= 1
            assert server.grpc is not None
            async with grpc.aio.insecure_channel(server.grpc) as channel:
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await airlane_stub(channel).Info(
                        service_pb2.InfoRequest(stream_id="x"), metadata=tuple(bearer(KEY).items())
                    )
                assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            url = server.url.replace("http://", "ws://") + "/v1/ws"
            async with websockets.connect(url, additional_headers=bearer(KEY)) as ws:
                with pytest.raises(websockets.ConnectionClosed) as closed:
                    await ws.recv()
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 4429
            await asyncio.sleep(1.2)  # one failure's worth comes back each second
            assert (await http.get("/v1/models", headers=bearer(KEY))).status_code == 200
            metrics = (await http.get("/metrics")).text
        assert "airlane_auth_failures_total 5.0" in metrics
        assert "airlane_auth_refused_total 3.0" in metrics


async def test_an_airc_connection_that_keeps_failing_is_ended() -> None:
    with run_server("--api-key", f"me={KEY}") as server:
        assert server.airc is not None
        client = await AircClient.tcp(*server.airc)
        try:
            for n in range(MAX_AUTH_FAILURES):
                with pytest.raises(RequestRejected) as rejected:
                    await client.authenticate(f"sk-guess-{n}")
                assert rejected.value.code == "unauthenticated"
            with pytest.raises(ClientError):  # the connection is gone: no more guesses on it
                await client.authenticate(KEY)
        finally:
            await client.aclose()
        async with await AircClient.tcp(*server.airc, KEY):
            pass  # a new connection with the right key is served


async def test_wrong_keys_inside_airc_over_websocket_count_for_the_address() -> None:
    # AIRC over a WebSocket authenticates again inside (AUTH): its failures count against the
    # client's address as every other wire's do, however many sockets they are spread over.
    # (The session was once made without the address: the guard never saw them.) One failure
    # comes back a minute, so a slow machine cannot refill the burst during the test.
    config = "[auth_guard]\nburst = 5\nper_min = 1\n"
    with run_server("--api-key", f"me={KEY}", config=config) as server:
        for _ in range(3):  # a fresh socket before each connection's own limit ends it
            async with await AircClient.websocket(server.url, KEY) as client:
                for n in range(2):
                    with pytest.raises(RequestRejected) as rejected:
                        await client.authenticate(f"sk-guess-{n}")
                    if rejected.value.code == "too_many_requests":
                        break
        async with httpx.AsyncClient(base_url=server.url, timeout=20) as http:
            blocked = await http.get("/v1/models", headers=bearer(KEY))
            assert blocked.status_code == 429, blocked.text
            metrics = (await http.get("/metrics")).text
        assert "airlane_auth_failures_total 5.0" in metrics
