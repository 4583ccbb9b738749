"""Several ``airlane serve --hub nats://...`` processes sharing streams through JetStream.

Real processes, a real ``nats-server -js``, SIGKILL for node failures; the client side is plain
HTTP (SSE) with httpx.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import AsyncIterator, Iterator
from urllib.parse import quote

import httpx
import orjson
import pytest

from tests.natsserver import NatsServer
from tests.servers import ServerProcess, run_server

CLUSTER_CONFIG = """
[synthetic]
ttft_ms = 5.0
itl_ms = 15.0
itl_jitter_ms = 0.0

[jetstream]
heartbeat_s = 0.2
node_timeout_s = 1.0
trim_every_s = 0.5
"""

NAMED = quote("agents/7/events", safe="")
CHAT = {"model": "synthetic", "messages": [{"role": "user", "content": "tell me"}]}


@contextlib.contextmanager
def node(nats: NatsServer, name: str, *args: str) -> Iterator[ServerProcess]:
    """One gateway node on the shared hub (no AIRC or gRPC listeners: not needed here)."""
    with run_server(
        "--hub",
        nats.url,
        "--node-id",
        name,
        "--airc-port",
        "-1",
        "--grpc-port",
        "-1",
        *args,
        config=CLUSTER_CONFIG,
    ) as server:
        yield server


async def sse(
    client: httpx.AsyncClient, url: str, resume: str | None = None
) -> AsyncIterator[tuple[str, dict]]:
    """``(id, event)`` for each SSE event of ``url`` until the response ends."""
    headers = {"last-event-id": resume} if resume else {}
    async with client.stream("GET", url, headers=headers, timeout=30) as response:
        assert response.status_code == 200, await response.aread()
        event_id = ""
        async for line in response.aiter_lines():
            if line.startswith("id:"):
                event_id = line[3:].strip()
            elif line.startswith("data:"):
                yield event_id, orjson.loads(line[5:])


def text_of(events: list[dict]) -> str:
    text = ""
    for event in events:
        if event["kind"] == "snapshot":
            text = event["text"]["content"]
        elif event["kind"] == "delta" and event["channel"] == "content":
            text += event["text"]
    return text


async def start_generation(client: httpx.AsyncClient, server: ServerProcess, tokens: int) -> str:
    response = await client.post(f"{server.url}/v1/streams", json={**CHAT, "max_tokens": tokens})
    assert response.status_code in (200, 201), response.text
    return str(response.json()["id"])


async def test_a_reader_resumes_on_another_node_after_its_node_is_killed(nats_server):
    with node(nats_server, "a") as a, node(nats_server, "b") as b:
        async with httpx.AsyncClient() as client:
            stream_id = await start_generation(client, b, tokens=150)  # produced on b
            seen: list[dict] = []
            last_id = ""
            async for event_id, event in sse(client, f"{a.url}/v1/streams/{stream_id}/events"):
                seen.append(event)
                last_id = event_id
                if len(seen) == 20:
                    break
            a.kill()  # the reader's node dies; the producer's node goes on
            rest = [
                event
                async for _, event in sse(
                    client, f"{b.url}/v1/streams/{stream_id}/events", resume=last_id
                )
            ]
            seqs = [e["seq"] for e in seen + rest]
            assert seqs == sorted(set(seqs)), "a gap or a duplicate"
            assert rest[-1]["kind"] == "done" and rest[-1]["finish_reason"] == "stop"
            snapshot = (await client.get(f"{b.url}/v1/streams/{stream_id}/snapshot")).json()
            assert text_of(seen + rest) == snapshot["text"]["content"] != ""


async def test_another_tenants_streams_are_not_found_on_any_node(nats_server):
    keys = ("--api-key", "alice=sk-a", "--api-key", "bob=sk-b")
    alice, bob = {"authorization": "Bearer sk-a"}, {"authorization": "Bearer sk-b"}
    with node(nats_server, "a", *keys) as a, node(nats_server, "b", *keys) as b:
        async with httpx.AsyncClient(timeout=20) as client:
            event = {"kind": "message", "payload": "alice's"}
            sent = await client.post(
                f"{a.url}/v1/streams/{NAMED}/events", json=event, headers=alice
            )
            assert sent.status_code == 200, sent.text
            chat = await client.post(f"{a.url}/v1/streams", json=CHAT, headers=alice)
            assert chat.status_code == 201, chat.text
            for stream in (NAMED, chat.json()["id"]):
                seen = await client.get(f"{b.url}/v1/streams/{stream}/snapshot", headers=alice)
                assert seen.status_code == 200, seen.text
                for path in ("", "/snapshot", "/events"):
                    refused = await client.get(f"{b.url}/v1/streams/{stream}{path}", headers=bob)
                    assert refused.status_code == 404, (path, refused.text)
                    assert refused.json()["error"]["code"] == "stream_not_found"
                deleted = await client.delete(f"{b.url}/v1/streams/{stream}", headers=bob)
                assert deleted.status_code == 404
            still = await client.get(f"{b.url}/v1/streams/{NAMED}/snapshot", headers=alice)
            assert still.json()["seq"] == 1


async def test_when_the_producer_node_dies_readers_elsewhere_get_a_clear_error(nats_server):
    with node(nats_server, "a") as a, node(nats_server, "b") as b:
        async with httpx.AsyncClient() as client:
            stream_id = await start_generation(client, a, tokens=2000)  # produced on a
            events: list[dict] = []
            url = f"{b.url}/v1/streams/{stream_id}/events"
            async for _, event in sse(client, url):
                events.append(event)
                if len(events) == 5:
                    a.kill()
            assert events[-1]["kind"] == "error"
            assert events[-1]["code"] == "producer_lost" and "(a)" in events[-1]["message"]


async def test_cancel_on_any_node_stops_the_generation_and_acknowledged_events_survive(
    nats_server,
):
    with node(nats_server, "a") as a, node(nats_server, "b") as b:
        async with httpx.AsyncClient() as client:
            stream_id = await start_generation(client, a, tokens=5000)
            response = await client.post(f"{b.url}/v1/streams/{stream_id}/cancel")
            assert response.status_code == 200, response.text
            events = [e async for _, e in sse(client, f"{a.url}/v1/streams/{stream_id}/events")]
            assert events[-1]["kind"] == "done" and events[-1]["finish_reason"] == "cancelled"
            info = (await client.get(f"{a.url}/v1/streams/{stream_id}")).json()
            assert info["ended"] and info["finish_reason"] == "cancelled"
            # And the producer on a stopped (not only the stream's end was written), well
            # before its 5,000 tokens would have ended it.
            deadline = asyncio.get_running_loop().time() + 2
            while await _running(client, a) != 0:
                assert asyncio.get_running_loop().time() < deadline, "a's producer runs on"
                await asyncio.sleep(0.1)

            # A named stream: what node a acknowledged is there after a is killed.
            created = await client.post(f"{a.url}/v1/streams", json={"name": "agents/7/events"})
            assert created.status_code in (200, 201), created.text
            published = await client.post(
                f"{a.url}/v1/streams/{NAMED}/events",
                json={"events": [{"kind": "message", "payload": {"step": i}} for i in range(3)]},
            )
            assert published.status_code == 200, published.text
            a.kill()
            info = (await client.get(f"{b.url}/v1/streams/{NAMED}")).json()
            assert info["last_seq"] == 3, info
            url = f"{b.url}/v1/streams/{NAMED}/events"
            async with client.stream("GET", url, params={"max_events": 3}) as response:
                body = (await response.aread()).decode()
            assert [f'"step":{i}' in body for i in range(3)] == [True] * 3


pytestmark = pytest.mark.timeout(90)


async def _running(client: httpx.AsyncClient, server: ServerProcess) -> float:
    """``airlane_generations_running`` on ``server``: its producers still running."""
    text = (await client.get(f"{server.url}/metrics")).text
    found = re.search(r"^airlane_generations_running(?:\{[^}]*\})? (\S+)$", text, re.MULTILINE)
    assert found is not None, "no airlane_generations_running in /metrics"
    return float(found.group(1))


async def test_event_logs_and_schemas_are_shared_by_every_node(nats_server):
    with node(nats_server, "a") as a, node(nats_server, "b") as b:
        async with httpx.AsyncClient(timeout=20) as client:
            schema = {"type": "object", "required": ["reward"]}
            registered = await client.post(
                f"{b.url}/v1/schemas/reward.v1/versions", json={"schema": schema}
            )
            assert registered.status_code == 200, registered.text
            assert (await client.put(f"{a.url}/v1/logs/rewards")).status_code == 201
            appended = await client.post(
                f"{a.url}/v1/logs/rewards/events",
                json={"events": [{"type": "reward.v1", "data": {"reward": i}} for i in range(3)]},
            )
            assert appended.status_code == 201, appended.text
            refused = await client.post(
                f"{a.url}/v1/logs/rewards/events", json={"type": "reward.v1", "data": {}}
            )
            assert refused.status_code == 422, refused.text  # b's schema, checked on a

            fetch = f"{b.url}/v1/logs/rewards/groups/trainers/fetch"
            got = (await client.post(fetch, json={"ack_wait_s": 1, "timeout_s": 2})).json()
            assert [d["record"]["data"]["reward"] for d in got["deliveries"]] == [0, 1, 2]
            tokens = [d["token"] for d in got["deliveries"]]
            acked = await client.post(
                f"{a.url}/v1/logs/rewards/groups/trainers/ack", json={"tokens": tokens}
            )
            assert acked.status_code == 200, acked.text  # settled on the other node
            # A long poll past the 1 s ack deadline: a delivery left unsettled would be handed
            # out again within it (the broker redelivers to a waiting fetch); these are not.
            again = (await client.post(fetch, json={"timeout_s": 1.6})).json()
            assert again["deliveries"] == []
            info = (await client.get(f"{a.url}/v1/logs/rewards/groups/trainers")).json()
            assert info["pending_acks"] == 0 and info["next_seq"] == 4


async def test_a_group_keeps_its_settings_whichever_node_a_member_fetches_on(nats_server):
    # Issue 34, item 3: a fetch on another node with only max_events and timeout_s used to
    # re-join with the defaults, resetting ack_wait_s to 30 s: the redelivery never came.
    with node(nats_server, "a") as a, node(nats_server, "b") as b:
        async with httpx.AsyncClient(timeout=20) as client:
            assert (await client.put(f"{a.url}/v1/logs/steps")).status_code == 201
            group = "/v1/logs/steps/groups/learners"
            created = await client.post(
                f"{a.url}{group}/fetch", json={"ack_wait_s": 1.5, "timeout_s": 0}
            )
            assert created.json() == {"deliveries": []}, created.text
            appended = await client.post(
                f"{a.url}/v1/logs/steps/events", json={"type": "step.v1", "data": {"i": 1}}
            )
            assert appended.status_code == 201, appended.text

            fetch = f"{b.url}{group}/fetch"
            first = (await client.post(fetch, json={"max_events": 10, "timeout_s": 5})).json()
            handed_out = asyncio.get_running_loop().time()
            assert [d["deliveries"] for d in first["deliveries"]] == [1]  # and not acked
            # A long poll that returns as soon as the record is handed out again: after the
            # group's 1.5 s, not the default 30 s.
            again = (await client.post(fetch, json={"max_events": 10, "timeout_s": 10})).json()
            waited = asyncio.get_running_loop().time() - handed_out
            assert [d["deliveries"] for d in again["deliveries"]] == [2], (again, waited)
            assert 1.25 < waited < 6.5, waited
            info = (await client.get(f"{a.url}{group}")).json()
            assert (info["ack_wait_s"], info["max_deliver"]) == (1.5, None)

            refused = await client.post(fetch, json={"ack_wait_s": 30, "timeout_s": 0})
            assert refused.status_code == 409, refused.text
            error = refused.json()["error"]
            assert (error["code"], error["param"]) == ("group_settings_conflict", "ack_wait_s")
            assert error["conflicts"] == [{"setting": "ack_wait_s", "stored": 1.5, "asked": 30.0}]
            assert "1.5" in error["message"] and "30.0" in error["message"]
            same = await client.post(fetch, json={"ack_wait_s": 1.5, "timeout_s": 0})
            assert same.status_code == 200, same.text
            info = (await client.get(f"{b.url}{group}")).json()
            assert info["ack_wait_s"] == 1.5


async def test_a_group_deleted_on_one_node_is_created_again_by_a_fetch_on_another(nats_server):
    # Node a keeps its handle on the group open between fetches; node b deletes the group.
    # a's next fetch used to find its handle's consumer gone and answer 404 for as long as
    # the handle stayed open, where a fetch creates a group that does not exist.
    with node(nats_server, "a") as a, node(nats_server, "b") as b:
        async with httpx.AsyncClient(timeout=20) as client:
            assert (await client.put(f"{a.url}/v1/logs/moves")).status_code == 201
            group = "/v1/logs/moves/groups/players"
            first = await client.post(f"{a.url}{group}/fetch", json={"timeout_s": 0})
            assert first.status_code == 200, first.text
            assert (await client.delete(f"{b.url}{group}")).status_code == 204
            gone = await client.get(f"{a.url}{group}")
            assert gone.status_code == 404, gone.text
            appended = await client.post(
                f"{a.url}/v1/logs/moves/events", json={"type": "move.v1", "data": {"n": 1}}
            )
            assert appended.status_code == 201, appended.text
            again = await client.post(f"{a.url}{group}/fetch", json={"timeout_s": 5})
            assert again.status_code == 200, again.text
            assert [d["record"]["data"] for d in again.json()["deliveries"]] == [{"n": 1}]


async def test_a_group_created_again_elsewhere_with_other_settings_is_refused_with_them(
    nats_server,
):
    # Node a keeps its handle on the group open between fetches; node b deletes the group
    # and a fetch there creates it again with another ack_wait_s. a's handle used to go on
    # serving a fetch that asks for the old settings (200, where the group's own conflict:
    # 409) for as long as it stayed open; it is checked again after at most 2 s.
    with node(nats_server, "a") as a, node(nats_server, "b") as b:
        async with httpx.AsyncClient(timeout=20) as client:
            assert (await client.put(f"{a.url}/v1/logs/turns")).status_code == 201
            group = "/v1/logs/turns/groups/judges"
            old = {"ack_wait_s": 1.5, "timeout_s": 0}
            first = await client.post(f"{a.url}{group}/fetch", json=old)
            assert first.status_code == 200, first.text
            assert (await client.delete(f"{b.url}{group}")).status_code == 204
            new = {"ack_wait_s": 20, "timeout_s": 0}
            created = await client.post(f"{b.url}{group}/fetch", json=new)
            assert created.status_code == 200, created.text

            deadline = asyncio.get_running_loop().time() + 10
            while True:  # at most 2 s of the old handle, then the group's own settings
                again = await client.post(f"{a.url}{group}/fetch", json=old)
                if again.status_code != 200 or asyncio.get_running_loop().time() > deadline:
                    break
                await asyncio.sleep(0.2)
            assert again.status_code == 409, again.text
            conflicts = again.json()["error"]["conflicts"]
            assert conflicts == [{"setting": "ack_wait_s", "stored": 20.0, "asked": 1.5}]
            same = await client.post(f"{a.url}{group}/fetch", json=new)
            assert same.status_code == 200, same.text


async def test_a_room_is_shared_by_clients_on_different_nodes(nats_server):
    import time

    import websockets

    from airlane.sync.hlc import HybridClock
    from airlane.sync.lww import LWWMap

    with node(nats_server, "a") as a, node(nats_server, "b") as b:
        writer = LWWMap(HybridClock("writer"))
        ws_a = a.url.replace("http://", "ws://") + "/v1/rooms/board"
        ws_b = b.url.replace("http://", "ws://") + "/v1/rooms/board"
        async with websockets.connect(ws_a) as on_a, websockets.connect(ws_b) as on_b:
            for ws in (on_a, on_b):
                assert orjson.loads(await asyncio.wait_for(ws.recv(), 10))["type"] == "state"
            op = writer.set("card", {"x": 1}, time.time_ns() // 1_000_000)
            await on_a.send(orjson.dumps({"type": "ops", "ops": [op.to_dict()]}).decode())
            relayed = orjson.loads(await asyncio.wait_for(on_b.recv(), 10))
            assert relayed == {"type": "ops", "ops": [op.to_dict()]}
        async with httpx.AsyncClient() as http:
            state = (await http.get(f"{b.url}/v1/rooms/board")).json()
            assert state["state"] == {"card": {"x": 1}}


async def test_a_broker_away_too_long_ends_a_generation_with_hub_unavailable(nats_server, tmp_path):
    config = CLUSTER_CONFIG.replace("[jetstream]", "[jetstream]\nunavailable_after_s = 0.5")
    log_path = tmp_path / "node.log"
    with (
        open(log_path, "w") as log,
        run_server(
            "--hub", nats_server.url, "--node-id", "a", "--airc-port", "-1", "--grpc-port", "-1",
            config=config, stderr=log,
        ) as a,
    ):  # fmt: skip
        async with httpx.AsyncClient() as client:
            stream_id = await start_generation(client, a, tokens=400)  # ~6 s, 15 ms a token
            url = f"{a.url}/v1/streams/{stream_id}/events"
            async for _, event in sse(client, url):
                if event["seq"] >= 5:
                    break
            nats_server.kill()  # away for longer than unavailable_after_s: an append gives up
            await wait_for_line(log_path, "the hub stopped the generation", "backend synthetic")
            nats_server.start()
            events = [event async for _, event in sse(client, url)]
        last = events[-1]
        assert last["kind"] == "error" and last["code"] == "hub_unavailable", last
    node_log = log_path.read_text()
    assert "Traceback" not in node_log and "the hub stopped the generation" in node_log


async def wait_for_line(path, *words: str, timeout: float = 10.0) -> None:
    """Until a line of the file at ``path`` holds one of ``words`` (a node's log)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not any(word in path.read_text() for word in words):
        assert asyncio.get_running_loop().time() < deadline, path.read_text()[-2000:]
        await asyncio.sleep(0.05)  # another process writes it: poll


async def test_a_new_schema_version_applies_on_every_node_within_a_second(nats_server):
    with node(nats_server, "a") as a, node(nats_server, "b") as b:
        async with httpx.AsyncClient(timeout=20) as client:
            versions = f"{b.url}/v1/schemas/score.v1/versions"
            strict = {"type": "object", "required": ["score"]}
            assert (await client.post(versions, json={"schema": strict})).status_code == 200
            assert (await client.put(f"{a.url}/v1/logs/scores")).status_code == 201
            events = f"{a.url}/v1/logs/scores/events"
            unscored = {"type": "score.v1", "data": {"note": "no score"}}
            refused = await client.post(events, json=unscored)
            assert refused.status_code == 422, refused.text  # a holds version 1 now
            # Version 2 (no longer requires it; compatible), registered on the other node.
            loose = {"type": "object"}
            registered = await client.post(versions, json={"schema": loose})
            assert registered.status_code == 200 and registered.json()["version"] == 2
            # a's cache lasts schema_cache_s (1 s); the bound leaves room for a busy machine's
            # round trips, and fails a cache that outlives its time.
            started = time.monotonic()
            while (answer := await client.post(events, json=unscored)).status_code == 422:
                assert time.monotonic() - started < 3.0, "version 2 not applied on a in time"
                await asyncio.sleep(0.05)
            assert answer.status_code == 201, answer.text
