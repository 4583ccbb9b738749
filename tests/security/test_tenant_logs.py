"""Tenants: another tenant's event logs, schema subjects and rooms are not there.

Alice creates a log, registers a schema for its event type, appends and fetches as a consumer
group; bob (another tenant, same gateway) then lists, reads, appends, consumes, settles with
alice's delivery token and deletes, over HTTP and gRPC. Every attempt meets "not found" (or his
own, separate log or subject of that name), and alice's log and schema come out untouched. On
the in-memory stores and on JetStream (a real ``nats-server -js``), whose names for a tenant's
logs and subjects are encoded differently.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator

import grpc
import httpx
import pytest
import websockets

from airlane.sync.hlc import HybridClock
from airlane.sync.lww import LWWMap
from airlane.v1 import eventlog_pb2, eventlog_pb2_grpc
from tests.natsserver import running_nats
from tests.servers import ServerProcess, run_server

ALICE, BOB = {"authorization": "Bearer sk-a"}, {"authorization": "Bearer sk-b"}
KEYS = ("--api-key", "alice=sk-a", "--api-key", "bob=sk-b")
ORDER = {"type": "object", "required": ["id"]}
BOBS_ORDER = {"type": "object", "required": ["sku"]}

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(params=["memory", "jetstream"])
def server(request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    if request.param == "memory":
        with run_server(*KEYS) as running:
            yield running
        return
    with running_nats() as nats, run_server(*KEYS, "--hub", nats.url) as running:
        yield running


def assert_missing(response: httpx.Response, code: str) -> None:
    assert response.status_code == 404, (response.request.url, response.text)
    error = response.json()["error"]
    assert error["code"] == code, error
    assert "@" not in error["message"] and "~" not in error["message"], error


async def test_logs_and_subjects_are_the_tenants_own(server: ServerProcess) -> None:
    async with httpx.AsyncClient(base_url=server.url, timeout=20) as http:
        # Alice: a subject, a log, an event checked against her schema, a fetched delivery.
        registered = await http.post(
            "/v1/schemas/order.v1/versions", json={"schema": ORDER}, headers=ALICE
        )
        assert registered.status_code == 200, registered.text
        assert registered.json()["subject"] == "order.v1"
        assert (await http.put("/v1/logs/orders", headers=ALICE)).status_code == 201
        event = {"type": "order.v1", "data": {"id": 1}}
        appended = await http.post("/v1/logs/orders/events", json=event, headers=ALICE)
        assert appended.status_code == 201, appended.text
        fetched = await http.post(
            "/v1/logs/orders/groups/g/fetch", json={"max_events": 1, "timeout_s": 2}, headers=ALICE
        )
        assert fetched.status_code == 200, fetched.text
        [delivery] = fetched.json()["deliveries"]
        assert delivery["record"]["log"] == "orders"

        # Bob sees none of it.
        assert "orders" not in (await http.get("/v1/logs", headers=BOB)).json()["logs"]
        assert "order.v1" not in (await http.get("/v1/schemas", headers=BOB)).json()["subjects"]
        for method, path in [
            ("GET", "/v1/logs/orders"),
            ("GET", "/v1/logs/orders/events"),
            ("POST", "/v1/logs/orders/events"),
            ("POST", "/v1/logs/orders/groups/g/fetch"),
            ("GET", "/v1/logs/orders/groups/g"),
            ("DELETE", "/v1/logs/orders"),
        ]:
            body = event if path.endswith("events") else {"max_events": 1, "timeout_s": 0}
            sent = await http.request(
                method, path, headers=BOB, json=body if method == "POST" else None
            )
            assert_missing(sent, "log_not_found")
        for path in ("/v1/schemas/order.v1", "/v1/schemas/order.v1/versions/latest"):
            assert_missing(await http.get(path, headers=BOB), "subject_not_found")
        assert_missing(await http.delete("/v1/schemas/order.v1", headers=BOB), "subject_not_found")

        # His own log and subject of the same names are separate: his schema checks his events,
        # and alice's token settles nothing through his log.
        bobs = await http.post(
            "/v1/schemas/order.v1/versions", json={"schema": BOBS_ORDER}, headers=BOB
        )
        assert bobs.status_code == 200 and bobs.json()["version"] == 1, bobs.text
        assert (await http.put("/v1/logs/orders", headers=BOB)).status_code == 201
        his = {"type": "order.v1", "data": {"sku": "x"}}
        assert (await http.post("/v1/logs/orders/events", json=his, headers=BOB)).status_code == 201
        refused = await http.post("/v1/logs/orders/events", json=his, headers=ALICE)
        assert refused.status_code == 422 and refused.json()["error"]["code"] == "schema_violation"
        stolen = await http.post(
            "/v1/logs/orders/groups/g/ack", json={"tokens": [delivery["token"]]}, headers=BOB
        )
        assert stolen.status_code == 400, stolen.text

        # Alice's log, schema and delivery are as she left them.
        info = (await http.get("/v1/logs/orders", headers=ALICE)).json()
        assert info["last_seq"] == 1 and info["name"] == "orders", info
        group = (await http.get("/v1/logs/orders/groups/g", headers=ALICE)).json()
        assert group["pending_acks"] == 1, group
        acked = await http.post(
            "/v1/logs/orders/groups/g/ack", json={"tokens": [delivery["token"]]}, headers=ALICE
        )
        assert acked.status_code == 200, acked.text
        latest = await http.get("/v1/schemas/order.v1/versions/latest", headers=ALICE)
        assert latest.json()["schema"] == ORDER
        assert "orders" in (await http.get("/v1/logs", headers=ALICE)).json()["logs"]

    # gRPC: the same answers.
    assert server.grpc is not None
    async with grpc.aio.insecure_channel(server.grpc) as channel:
        stub = eventlog_pb2_grpc.EventLogsStub(channel)  # type: ignore[no-untyped-call]
        bob = (("authorization", BOB["authorization"]),)
        listed = await stub.ListLogs(eventlog_pb2.ListLogsRequest(), metadata=bob)
        assert list(listed.names) == ["orders"]  # his own only
        await stub.DeleteLog(eventlog_pb2.LogRequest(name="orders"), metadata=bob)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.GetLog(eventlog_pb2.LogRequest(name="orders"), metadata=bob)
        assert caught.value.code() == grpc.StatusCode.NOT_FOUND
    async with httpx.AsyncClient(base_url=server.url, timeout=20) as http:
        info = await http.get("/v1/logs/orders", headers=ALICE)
        assert info.status_code == 200 and info.json()["last_seq"] == 1, info.text
        record = (await http.get("/v1/logs/orders/events", headers=ALICE)).json()["records"][0]
        data = record.get("data") or json.loads(base64.b64decode(record["data_base64"]))
        assert data == {"id": 1} and record["log"] == "orders", record


async def test_a_room_is_the_tenants_own(server: ServerProcess) -> None:
    alice, bob = LWWMap(HybridClock("alice-client")), LWWMap(HybridClock("bob-client"))
    now = time.time_ns() // 1_000_000
    async with httpx.AsyncClient(base_url=server.url, timeout=20) as http:
        ops = {"ops": [alice.set("title", "alice's plan", now).to_dict()]}
        assert (await http.post("/v1/rooms/board/ops", json=ops, headers=ALICE)).status_code == 202
        seen = (await http.get("/v1/rooms/board", headers=BOB)).json()
        assert seen["state"] == {}, seen  # his own room of that name: empty
        ops = {"ops": [bob.set("title", "BOB WAS HERE", now + 1).to_dict()]}
        assert (await http.post("/v1/rooms/board/ops", json=ops, headers=BOB)).status_code == 202
        mine = (await http.get("/v1/rooms/board", headers=ALICE)).json()
        assert mine["state"] == {"title": "alice's plan"}, mine
    url = server.url.replace("http://", "ws://") + "/v1/rooms/board"
    async with websockets.connect(url, additional_headers=BOB) as ws:
        state = json.loads(await ws.recv())
        assert state["type"] == "state" and state["state"] == {"title": "BOB WAS HERE"}
