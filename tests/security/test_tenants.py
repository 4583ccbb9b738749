"""Tenants: another tenant's streams are not there, on every wire.

One real gateway with three API keys: ``alice`` and ``bob`` are each their own tenant, ``ann``
shares alice's (``ann@alice``). Alice starts a generation and publishes to a named stream; bob
then tries everything a key holder could do to them over HTTP, WebSocket, gRPC and AIRC, with
the clients users use (httpx, the ``websockets`` library, grpcio, Airlane's AIRC client).
Every attempt is answered as if the stream did not exist, and is an audit record (bob, his
tenant, what he asked for, rule ``tenant-scope``); alice's streams come out of it exactly as she
left them; ann sees them.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import httpx
import pytest
import websockets

from airlane.client import RequestRejected
from airlane.client.airc import AircClient
from airlane.v1 import service_pb2
from tests.grpc_transport.conftest import airlane_stub
from tests.http.support import PACED_SYNTHETIC, chat_body
from tests.servers import ServerProcess, run_server

ALICE, BOB, ANN = "sk-alice-1", "sk-bob-2", "sk-ann-3"
NAMED = "alice/private"


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


@pytest.fixture(scope="module")
def audit_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("audit") / "audit.log"


@pytest.fixture(scope="module")
def server(audit_log: Path) -> Iterator[ServerProcess]:
    keys = [f"alice={ALICE}", f"bob={BOB}", f"ann@alice={ANN}"]
    config = f'{PACED_SYNTHETIC}\n[audit]\npath = "{audit_log}"\n'
    with run_server(*(arg for key in keys for arg in ("--api-key", key)), config=config) as running:
        yield running


class BobsProbes:
    """Bob's not-found records in the audit log, from when it is made on."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.before = len(self.records())

    def records(self) -> list[dict[str, str]]:
        lines = self.path.read_text().splitlines() if self.path.exists() else []
        entries = [json.loads(line) for line in lines]
        return [
            e for e in entries if e.get("principal") == "bob" and e["code"] == "stream_not_found"
        ]

    def assert_recorded(self, streams: list[str]) -> None:
        """One record per attempt, on ``streams`` in order: a 404 to a probe is also a record."""
        new = self.records()[self.before :]
        assert [e["resource"] for e in new] == streams
        assert all(e["decision"] == "deny" and e["tenant"] == "bob" for e in new), new
        assert all(e["rule"] == "tenant-scope" and e["from"] == "127.0.0.1" for e in new), new


@dataclass
class AliceStreams:
    chat: str
    """A generation alice started (a long one: still running while bob tries)."""
    chat_token: str
    """A resume token of it, as alice's browser would hold in Last-Event-ID."""
    named_seq: int
    """The named stream's last seq after alice's publish."""


@pytest.fixture
async def alice(server: ServerProcess) -> AsyncIterator[AliceStreams]:
    async with httpx.AsyncClient(base_url=server.url, headers=bearer(ALICE), timeout=20) as http:
        created = await http.post(
            "/v1/streams", json=chat_body("tell a long story", 7, max_tokens=400)
        )
        assert created.status_code == 201, created.text
        chat = created.json()
        published = await http.post(
            f"/v1/streams/{NAMED}/events", json={"kind": "message", "payload": {"note": "mine"}}
        )
        assert published.status_code == 200, published.text
        yield AliceStreams(chat["id"], f"{chat['epoch']}:1", published.json()["seq"][-1])
        await http.delete(f"/v1/streams/{chat['id']}")
        await http.delete(f"/v1/streams/{NAMED}")


async def assert_untouched(server: ServerProcess, streams: AliceStreams) -> None:
    """Alice's streams are as she left them, and ann (her tenant) sees them too."""
    for key in (ALICE, ANN):
        async with httpx.AsyncClient(base_url=server.url, headers=bearer(key), timeout=20) as http:
            chat = await http.get(f"/v1/streams/{streams.chat}")
            assert chat.status_code == 200, chat.text
            assert chat.json()["finish_reason"] != "cancelled"
            named = await http.get(f"/v1/streams/{NAMED}/snapshot")
            assert named.status_code == 200, named.text
            assert named.json()["seq"] == streams.named_seq
            assert "BOB" not in named.text


def assert_not_found(response: httpx.Response) -> None:
    assert response.status_code == 404, (response.request.url, response.text)
    error = response.json()["error"]
    assert error["code"] == "stream_not_found"
    assert "@" not in error["message"]  # no tenant's key shows through


async def test_over_http(server: ServerProcess, alice: AliceStreams, audit_log: Path) -> None:
    probes = BobsProbes(audit_log)
    async with httpx.AsyncClient(base_url=server.url, headers=bearer(BOB), timeout=20) as bob:
        for stream in (alice.chat, NAMED):
            assert_not_found(await bob.get(f"/v1/streams/{stream}"))
            assert_not_found(await bob.get(f"/v1/streams/{stream}/snapshot"))
            assert_not_found(await bob.get(f"/v1/streams/{stream}/events"))
            assert_not_found(await bob.post(f"/v1/streams/{stream}/cancel"))
            assert_not_found(await bob.delete(f"/v1/streams/{stream}"))
        resume = await bob.get(
            f"/v1/streams/{alice.chat}/events", headers={"last-event-id": alice.chat_token}
        )
        assert_not_found(resume)
        probes.assert_recorded([alice.chat] * 5 + [NAMED] * 5 + [alice.chat])
        # Publishing under alice's name writes to bob's own stream of that name, not hers.
        injected = await bob.post(
            f"/v1/streams/{NAMED}/events", json={"kind": "message", "payload": "BOB WAS HERE"}
        )
        assert injected.status_code == 200 and injected.json()["seq"] == [1]
        own = await bob.get(f"/v1/streams/{NAMED}")
        assert own.status_code == 200 and own.json()["id"] == NAMED
        await bob.delete(f"/v1/streams/{NAMED}")
    await assert_untouched(server, alice)


async def test_over_websocket(server: ServerProcess, alice: AliceStreams, audit_log: Path) -> None:
    probes = BobsProbes(audit_log)
    url = server.url.replace("http://", "ws://") + "/v1/ws"
    async with websockets.connect(url, additional_headers=bearer(BOB)) as ws:
        attempts = [
            {"op": "subscribe", "stream": alice.chat},
            {"op": "subscribe", "stream": alice.chat, "from": alice.chat_token},
            {"op": "subscribe", "stream": NAMED},
            {"op": "cancel", "stream": alice.chat},
        ]
        for ref, attempt in enumerate(attempts):
            await ws.send(json.dumps({**attempt, "ref": ref}))
            reply = json.loads(await ws.recv())
            assert (reply["op"], reply["code"], reply["ref"]) == ("error", "stream_not_found", ref)
        probes.assert_recorded([alice.chat, alice.chat, NAMED, alice.chat])
        await ws.send(
            json.dumps(
                {"op": "publish", "stream": NAMED, "event": {"kind": "delta", "text": "BOB"}}
            )
        )
        reply = json.loads(await ws.recv())
        assert reply["op"] == "published" and reply["seq"] == 1, reply
    async with httpx.AsyncClient(base_url=server.url, headers=bearer(BOB), timeout=20) as bob:
        await bob.delete(f"/v1/streams/{NAMED}")
    await assert_untouched(server, alice)


async def test_over_grpc(server: ServerProcess, alice: AliceStreams, audit_log: Path) -> None:
    probes = BobsProbes(audit_log)
    assert server.grpc is not None
    metadata = (("authorization", f"Bearer {BOB}"),)
    async with grpc.aio.insecure_channel(server.grpc) as channel:
        stub = airlane_stub(channel)
        calls = [
            lambda stream: stub.Info(service_pb2.InfoRequest(stream_id=stream), metadata=metadata),
            lambda stream: stub.Cancel(
                service_pb2.CancelRequest(stream_id=stream), metadata=metadata
            ),
        ]
        for stream in (alice.chat, NAMED):
            for call in calls:
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    await call(stream)
                assert caught.value.code() == grpc.StatusCode.NOT_FOUND
                trailers = dict(caught.value.trailing_metadata() or ())
                assert trailers.get("airlane-error-code") == "stream_not_found"
            subscription = stub.Subscribe(
                service_pb2.SubscribeRequest(stream_id=stream), metadata=metadata
            )
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                async for _ in subscription:
                    pytest.fail("bob read an event of alice's")
            assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    probes.assert_recorded([alice.chat] * 3 + [NAMED] * 3)
    await assert_untouched(server, alice)


async def test_over_airc(server: ServerProcess, alice: AliceStreams, audit_log: Path) -> None:
    probes = BobsProbes(audit_log)
    assert server.airc is not None
    host, port = server.airc
    async with await AircClient.tcp(host, port, BOB) as bob:
        for stream, resume in ((alice.chat, None), (alice.chat, alice.chat_token), (NAMED, None)):
            with pytest.raises(RequestRejected) as caught:
                await bob.subscribe(stream, resume)
            assert caught.value.code == "stream_not_found"
    probes.assert_recorded([alice.chat, alice.chat, NAMED])
    await assert_untouched(server, alice)


async def test_the_same_tenant_shares_and_the_default_tenant_keeps_plain_ids() -> None:
    with run_server("--api-key", f"ann@team={ANN}", "--api-key", f"al@team={ALICE}") as gateway:
        async with httpx.AsyncClient(base_url=gateway.url, timeout=20) as http:
            ann, al = bearer(ANN), bearer(ALICE)
            published = await http.post(
                "/v1/streams/shared/events", json={"kind": "message", "payload": 1}, headers=ann
            )
            assert published.status_code == 200, published.text
            seen = await http.get("/v1/streams/shared", headers=al)
            assert seen.status_code == 200 and seen.json()["id"] == "shared"
            # Clients cannot name a tenant's key themselves.
            forged = await http.get("/v1/streams/@team/shared", headers=al)
            assert forged.status_code == 400
            assert forged.json()["error"]["code"] == "invalid_stream_id"
