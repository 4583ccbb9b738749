"""The event log and schema registry APIs over real HTTP, on the in-memory default.

Append typed events, replay from a seq and a time, consume with a durable group whose
deliveries are settled by token (ack, nak, progress) and redelivered after ``ack_wait_s``;
register schemas under compatibility rules and have appends validated against them; and every
mistake answered with a clear status and JSON error.
"""

from __future__ import annotations

import base64
import time
from collections.abc import AsyncIterator

import httpx
import pytest
from google.protobuf import descriptor_pb2

from tests.http.support import assert_json_error

REWARD = {
    "type": "object",
    "properties": {"episode": {"type": "integer"}, "reward": {"type": "number"}},
    "required": ["episode", "reward"],
}


@pytest.fixture
async def client(server) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, timeout=20) as http:
        yield http


async def test_append_replay_and_consume_with_acks(client):
    name = f"rl-{time.monotonic_ns()}"
    created = await client.put(f"/v1/logs/{name}", json={"max_events": 1000})
    assert created.status_code == 201, created.text
    assert (await client.put(f"/v1/logs/{name}")).status_code == 200  # exists: fine
    assert name in (await client.get("/v1/logs")).json()["logs"]
    before_ns = time.time_ns()
    one = await client.post(
        f"/v1/logs/{name}/events",
        json={"type": "reward.v1", "data": {"episode": 1, "reward": 0.5}, "idempotency_key": "k1"},
    )
    assert one.status_code == 201, one.text
    again = await client.post(
        f"/v1/logs/{name}/events",
        json={"type": "reward.v1", "data": {"episode": 1, "reward": 0.5}, "idempotency_key": "k1"},
    )
    assert again.json()["records"] == one.json()["records"]  # a retry is not a duplicate
    batch = await client.post(
        f"/v1/logs/{name}/events",
        json={
            "events": [
                {"type": "reward.v1", "data": {"episode": i, "reward": i / 10}} for i in (2, 3)
            ]
            + [{"type": "frame.v1", "data_base64": base64.b64encode(b"\x00\x01").decode()}]
        },
    )
    records = batch.json()["records"]
    assert [r["seq"] for r in records] == [2, 3, 4]
    assert records[2]["data_base64"] == "AAE=" and records[2]["content_type"].startswith("app")

    replay = (await client.get(f"/v1/logs/{name}/events", params={"from_seq": 2})).json()
    assert [r["seq"] for r in replay["records"]] == [2, 3, 4] and replay["next_seq"] == 5
    since = records[0]["time_ns"]
    by_time = (await client.get(f"/v1/logs/{name}/events", params={"from_time": since})).json()
    assert by_time["records"][0]["seq"] == 2
    assert before_ns <= one.json()["records"][0]["time_ns"] <= time.time_ns()

    group = f"/v1/logs/{name}/groups/trainer"
    fetched = await client.post(f"{group}/fetch", json={"max_events": 10, "ack_wait_s": 0.5})
    deliveries = fetched.json()["deliveries"]
    assert [d["record"]["seq"] for d in deliveries] == [1, 2, 3, 4]
    assert all(d["deliveries"] == 1 for d in deliveries)
    tokens = [d["token"] for d in deliveries]
    assert (await client.post(f"{group}/ack", json={"tokens": tokens[:2]})).json()["settled"] == 2
    await client.post(f"{group}/nak", json={"tokens": [tokens[2]], "delay_s": 0})
    progressed_at = time.monotonic()  # seq 4's ack deadline is 0.5 s after the server got it
    await client.post(f"{group}/progress", json={"tokens": [tokens[3]]})
    redelivered = (await client.post(f"{group}/fetch", json={"timeout_s": 0.2})).json()
    assert [(d["record"]["seq"], d["deliveries"]) for d in redelivered["deliveries"]] == [(3, 2)]
    await client.post(f"{group}/ack", json={"tokens": [redelivered["deliveries"][0]["token"]]})
    # A long poll: the server answers it when seq 4's ack deadline passes and hands it out
    # again, about 0.5 s after the progress (the bound leaves the server's loop clock, read
    # once per loop turn, room to lag).
    late = (await client.post(f"{group}/fetch", json={"timeout_s": 10})).json()["deliveries"]
    assert time.monotonic() - progressed_at >= 0.4, "handed out again before its deadline"
    assert [(d["record"]["seq"], d["deliveries"]) for d in late] == [(4, 2)]
    await client.post(f"{group}/ack", json={"tokens": [late[0]["token"]]})
    info = (await client.get(group)).json()
    assert info["pending_acks"] == 0 and info["next_seq"] == 5
    assert (await client.delete(group)).status_code == 204
    assert (await client.delete(f"/v1/logs/{name}")).status_code == 204
    assert_json_error(await client.get(f"/v1/logs/{name}"), 404)


async def test_a_fetch_keeps_the_groups_settings_and_refuses_others(client):
    name = f"settings-{time.monotonic_ns()}"
    await client.put(f"/v1/logs/{name}")
    group = f"/v1/logs/{name}/groups/g"
    # Looking first neither creates the group nor fixes its settings.
    assert_json_error(await client.get(group), 404, "group_not_found")
    created = await client.post(f"{group}/fetch", json={"ack_wait_s": 0.5, "max_deliver": 4})
    assert created.status_code == 200, created.text
    # Left out (or null): the group's own settings, unchanged.
    plain = await client.post(f"{group}/fetch", json={"max_events": 5, "timeout_s": 0})
    assert plain.status_code == 200, plain.text
    nulls = await client.post(f"{group}/fetch", json={"ack_wait_s": None, "timeout_s": 0})
    assert nulls.status_code == 200, nulls.text
    same = await client.post(f"{group}/fetch", json={"ack_wait_s": 0.5, "max_deliver": 4})
    assert same.status_code == 200, same.text
    refused = await client.post(f"{group}/fetch", json={"max_deliver": 9, "timeout_s": 0})
    error = assert_json_error(refused, 409, "group_settings_conflict")
    assert error["param"] == "max_deliver"
    assert error["conflicts"] == [{"setting": "max_deliver", "stored": 4, "asked": 9}]
    info = (await client.get(group)).json()
    assert (info["ack_wait_s"], info["max_deliver"]) == (0.5, 4)


async def test_schemas_validate_appends_and_guard_compatibility(client):
    subject = f"reward-{time.monotonic_ns()}.v1"
    registered = await client.post(
        f"/v1/schemas/{subject}/versions", json={"schema_type": "json", "schema": REWARD}
    )
    assert registered.status_code == 200, registered.text
    assert registered.json()["version"] == 1
    log = f"log-{time.monotonic_ns()}"
    await client.put(f"/v1/logs/{log}")
    good = await client.post(
        f"/v1/logs/{log}/events", json={"type": subject, "data": {"episode": 1, "reward": 1.0}}
    )
    assert good.status_code == 201, good.text
    bad = await client.post(f"/v1/logs/{log}/events", json={"type": subject, "data": {"x": 1}})
    error = assert_json_error(bad, 422, "schema_violation")
    assert "reward" in error["message"]
    assert (await client.get(f"/v1/logs/{log}")).json()["last_seq"] == 1  # nothing stored

    # Backward (the default): a new required field would reject old data.
    stricter = {**REWARD, "required": ["episode", "reward", "agent"]}
    refused = await client.post(f"/v1/schemas/{subject}/versions", json={"schema": stricter})
    assert refused.status_code == 409
    assert refused.json()["error"]["incompatibilities"], refused.text
    check = (await client.post(f"/v1/schemas/{subject}/check", json={"schema": stricter})).json()
    assert check["compatible"] is False
    mode = await client.put(f"/v1/schemas/{subject}/compatibility", json={"compatibility": "none"})
    assert mode.json()["compatibility"] == "none"
    v2 = await client.post(f"/v1/schemas/{subject}/versions", json={"schema": stricter})
    assert v2.json()["version"] == 2
    assert (await client.get(f"/v1/schemas/{subject}")).json()["versions"] == [1, 2]
    latest = (await client.get(f"/v1/schemas/{subject}/versions/latest")).json()
    assert latest["schema"]["required"] == ["episode", "reward", "agent"]
    validated = await client.post(
        f"/v1/schemas/{subject}/validate", json={"data": {"episode": 1, "reward": 2, "agent": "a"}}
    )
    assert validated.json() == {"valid": True, "version": 2}
    assert subject in (await client.get("/v1/schemas")).json()["subjects"]
    assert (await client.delete(f"/v1/schemas/{subject}")).status_code == 204


async def test_protobuf_schemas_check_binary_payloads(client):
    files = descriptor_pb2.FileDescriptorSet()
    proto = files.file.add(name="reward.proto", package="rl", syntax="proto3")
    message = proto.message_type.add(name="Reward")
    message.field.add(name="episode", number=1, type=3, label=1)  # int64
    subject = f"rl.Reward-{time.monotonic_ns()}"
    body = {
        "schema_type": "protobuf",
        "message": "rl.Reward",
        "descriptor_set_base64": base64.b64encode(files.SerializeToString()).decode(),
    }
    registered = await client.post(f"/v1/schemas/{subject}/versions", json=body)
    assert registered.status_code == 200, registered.text
    ok = await client.post(
        f"/v1/schemas/{subject}/validate",
        json={"data_base64": base64.b64encode(b"\x08\x07").decode()},  # episode = 7
    )
    assert ok.status_code == 200, ok.text
    broken = await client.post(
        f"/v1/schemas/{subject}/validate", json={"data_base64": base64.b64encode(b"\x08").decode()}
    )
    assert_json_error(broken, 422, "schema_violation")


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("PUT", "/v1/logs/bad name", None, 400),
        ("POST", "/v1/logs/nope/events", {"type": "a.v1", "data": 1}, 404),
        ("POST", "/v1/logs/x/events", {"data": 1}, 400),
        ("POST", "/v1/logs/x/events", {"type": "a.v1", "data_base64": "%%%"}, 400),
        ("POST", "/v1/logs/x/events", {"events": []}, 400),
        ("GET", "/v1/logs/x/events?from_time=yesterday", None, 400),
        ("POST", "/v1/logs/x/groups/g/ack", {"tokens": "t"}, 400),
        ("POST", "/v1/logs/x/groups/g/ack", {"tokens": ["forged"]}, 400),
        ("POST", "/v1/logs/x/groups/g/explode", {}, 404),
        ("PATCH", "/v1/logs/x", None, 405),
        ("POST", "/v1/schemas/s/versions", {"schema": {"type": 12}}, 422),
        ("POST", "/v1/schemas/s/versions", {"schema_type": "avro", "schema": {}}, 400),
        ("GET", "/v1/schemas/missing-subject", None, 404),
        ("GET", "/v1/schemas/s/versions/first", None, 400),
        ("PUT", "/v1/schemas/s/compatibility", {"compatibility": "sideways"}, 400),
    ],
)
async def test_bad_requests_get_clear_errors(client, method, path, body, status):
    await client.put("/v1/logs/x")
    response = await client.request(method, path, json=body)
    assert_json_error(response, status)
    assert (await client.get("/healthz")).status_code == 200
