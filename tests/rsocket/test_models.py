"""The four interaction models, from the ``rsocket`` package's client over TCP and WebSocket:
generations and subscriptions as request-streams, unary calls as request-response, publishes as
fire-and-forget, and an agent session as a request-channel."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import msgspec
import orjson
from rsocket.extensions.helpers import authenticate_simple, composite
from rsocket.payload import Payload
from rsocket.streams.stream_from_generator import StreamFromGenerator

from tests.client.conftest import PACED_SYNTHETIC
from tests.rsocket.conftest import API_KEY, call, chat, open_client, payload
from tests.servers import ServerProcess, run_server


def decoded(payloads: list[Payload]) -> list[dict[str, Any]]:
    return [orjson.loads(p.data) for p in payloads]


def text_of(events: list[dict[str, Any]]) -> str:
    return "".join(e["text"] for e in events if e["kind"] == "delta")


async def test_a_generation_is_a_request_stream(gateway: ServerProcess, transport: str) -> None:
    async with open_client(gateway, transport) as client:
        events = decoded(await client.request_stream(payload("chat.completions", chat())))
    started, *rest = events
    assert started["kind"] == "started" and started["stream_id"]
    assert rest[-1]["kind"] == "done"
    assert [e["seq"] for e in rest] == sorted(e["seq"] for e in rest)
    assert text_of(rest)


async def test_subscribe_and_resume_from_a_position(gateway: ServerProcess, transport: str) -> None:
    async with open_client(gateway, transport) as client:
        events = decoded(await client.request_stream(payload("chat.completions", chat())))
        stream_id, epoch = events[0]["stream_id"], events[0]["epoch"]
        whole = events[1:]
        middle = whole[len(whole) // 2]["seq"]
        resume = {"stream_id": stream_id, "resume": f"{epoch}:{middle}"}
        again = decoded(await client.request_stream(payload("streams.subscribe", resume)))
    # History comes back with its deltas joined (the hub's replay), so compare the text.
    assert again[0]["seq"] > middle and again[-1]["seq"] == whole[-1]["seq"]
    assert text_of(again) == text_of([e for e in whole if e["seq"] > middle])


async def test_unary_calls_are_request_response(gateway: ServerProcess, transport: str) -> None:
    async with open_client(gateway, transport) as client:
        events = decoded(await client.request_stream(payload("chat.completions", chat())))
        stream_id = events[0]["stream_id"]
        info = await call(client, "streams.info", {"stream_id": stream_id})
        snapshot = await call(client, "streams.snapshot", {"stream_id": stream_id})
        cancelled = await call(client, "streams.cancel", {"stream_id": stream_id})
    assert info["id"] == stream_id and info["ended"]
    assert snapshot["kind"] == "snapshot" and snapshot["text"]["content"] == text_of(events[1:])
    assert cancelled == {"cancelled": False}  # it had ended already


async def test_publishing_is_fire_and_forget(gateway: ServerProcess, transport: str) -> None:
    stream_id = f"agent-events-{transport}"
    async with open_client(gateway, transport) as client:
        for n in range(5):
            body = {"stream_id": stream_id, "event": {"kind": "message", "payload": {"n": n}}}
            await client.fire_and_forget(payload("streams.publish", body))

        # Fire-and-forget has no answer: a later request on the same connection sees them
        # once the server has run them (bounded wait).
        for _ in range(100):
            info = await call(client, "streams.info", {"stream_id": stream_id})
            if info["last_seq"] >= 5:
                break
            await asyncio.sleep(0.02)
        assert info["last_seq"] == 5
        answer = await call(
            client, "streams.publish", {"stream_id": stream_id, "event": {"payload": {"n": 5}}}
        )
    assert answer == {"stream_id": stream_id, "seq": 6}


async def test_an_agent_session_is_a_request_channel(
    gateway: ServerProcess, transport: str
) -> None:
    commands = [
        {"op": "generate", "id": 1, "request": chat("agent")},
        {"op": "publish", "id": 2, "stream_id": f"notes-{transport}",
         "event": {"payload": {"note": "thinking"}}},
    ]  # fmt: skip

    def source():
        for command in commands[1:]:
            yield Payload(orjson.dumps(command)), command is commands[-1]

    async with open_client(gateway, transport) as client:
        got = decoded(
            await client.request_channel(
                payload("agent.session", commands[0]), StreamFromGenerator(source)
            )
        )
    answers = {m["id"]: m for m in got if "id" in m}
    assert answers[1]["op"] == "started" and answers[2] == {
        "op": "published", "stream_id": f"notes-{transport}", "seq": 1, "id": 2,
    }  # fmt: skip
    generated = answers[1]["stream_id"]
    events = [m["event"] for m in got if m.get("stream_id") == generated and "event" in m]
    assert events[-1]["kind"] == "done" and text_of(events)
    assert {"op": "ended", "stream_id": generated, "seq": events[-1]["seq"]} in got


async def test_messagepack_data(gateway: ServerProcess, transport: str) -> None:
    """SETUP's data MIME type picks the encoding of requests and answers alike."""
    async with open_client(gateway, transport, data_encoding=b"application/x-msgpack") as client:
        request = Payload(msgspec.msgpack.encode(chat()), payload("chat.completions").metadata)
        events = [msgspec.msgpack.decode(p.data) for p in await client.request_stream(request)]
        body = {"stream_id": f"packed-{transport}", "event": {"payload": {"bytes": [1, 2]}}}
        published = await client.request_response(
            Payload(msgspec.msgpack.encode(body), payload("streams.publish").metadata)
        )
        snapshot = await client.request_response(
            Payload(
                msgspec.msgpack.encode({"stream_id": f"packed-{transport}"}),
                payload("streams.snapshot").metadata,
            )
        )
    assert events[0]["kind"] == "started" and events[-1]["kind"] == "done"
    assert text_of(events[1:])
    assert msgspec.msgpack.decode(published.data)["seq"] == 1
    assert msgspec.msgpack.decode(snapshot.data)["kind"] == "snapshot"


async def test_simple_authentication_in_setup(transport: str) -> None:
    """A gateway with an API key: SETUP's simple credentials (the password is the key) let
    the connection in; a request without any is refused with REJECTED."""
    with run_server("--api-key", API_KEY, config=PACED_SYNTHETIC) as guarded:
        setup = Payload(metadata=composite(authenticate_simple("agent", API_KEY)))
        async with open_client(guarded, transport, setup_payload=setup) as client:
            info = await call(client, "streams.info", {"stream_id": "nothing"}, expect_error=True)
        assert info.startswith("stream_not_found")
        async with open_client(guarded, transport) as anonymous:
            refused = await call(anonymous, "streams.info", {"stream_id": "x"}, expect_error=True)
        assert refused.startswith("unauthenticated")


async def test_the_packages_client_taking_two_at_a_time(
    gateway: ServerProcess, transport: str
) -> None:
    """The package's collector asks for two payloads at a time: the stream still arrives whole
    (the server waits for each REQUEST_N)."""
    async with open_client(gateway, transport) as client:
        events = decoded(
            await client.request_stream(
                payload("chat.completions", chat(max_tokens=60)), limit_rate=2
            )
        )
    assert events[0]["kind"] == "started" and events[-1]["kind"] == "done"
    assert text_of(events[1:])


async def test_large_payloads_go_both_ways_in_fragments(transport: str) -> None:
    """A gateway with 4 KiB frames: a 100 KB event is published in the client's 1 KiB
    fragments (joined by the server) and read back in the server's fragments (joined by the
    client)."""
    config = PACED_SYNTHETIC + "\n[rsocket]\nmax_frame = 4096\n"
    stream_id = f"big-{transport}"
    blob = "x" * 100_000
    with run_server(config=config) as small_frames:
        async with open_client(small_frames, transport, fragment_size_bytes=1024) as client:
            big = {"stream_id": stream_id, "event": {"payload": {"blob": blob}}}
            assert (await call(client, "streams.publish", big))["seq"] == 1
            end = {"stream_id": stream_id, "event": {"kind": "done", "finish_reason": "stop"}}
            await call(client, "streams.publish", end)  # ends the stream: the read completes
            events = decoded(
                await client.request_stream(payload("streams.subscribe", {"stream_id": stream_id}))
            )
    assert [e["kind"] for e in events] == ["message", "done"]
    assert events[0]["payload"] == {"blob": blob}


async def test_appending_to_an_event_log(gateway: ServerProcess, transport: str) -> None:
    """logs.append as a request-response (the records come back) and as fire-and-forget; the
    HTTP API reads both."""
    log = f"rsocket-log-{transport}"
    async with httpx.AsyncClient(base_url=gateway.url) as http:
        (await http.put(f"/v1/logs/{log}")).raise_for_status()
        async with open_client(gateway, transport) as client:
            event = {"type": "reward.v1", "data": {"episode": 1}}
            answer = await call(client, "logs.append", {"log": log, "event": event})
            assert [r["seq"] for r in answer["records"]] == [1]
            batch = [{"type": "reward.v1", "data": {"episode": n}} for n in (2, 3)]
            await client.fire_and_forget(payload("logs.append", {"log": log, "events": batch}))
            for _ in range(100):  # fire-and-forget has no answer: read until it landed
                records = (await http.get(f"/v1/logs/{log}/events")).json()["records"]
                if len(records) == 3:
                    break
                await asyncio.sleep(0.02)
    assert [r["data"]["episode"] for r in records] == [1, 2, 3]


async def test_an_agent_session_follows_at_most_max_channel_streams() -> None:
    """Past ``[rsocket] max_channel_streams`` a subscribe is answered with an error and the
    session goes on."""
    config = PACED_SYNTHETIC + "\n[rsocket]\nmax_channel_streams = 2\n"
    with run_server(config=config) as limited:
        names = ["bound-a", "bound-b", "bound-c"]
        async with httpx.AsyncClient(base_url=limited.url) as http:
            for name in names:
                assert (await http.post("/v1/streams", json={"name": name})).status_code == 201
        commands: list[dict[str, Any]] = [
            {"op": "subscribe", "id": n, "stream_id": name} for n, name in enumerate(names)
        ]
        done = {"kind": "done", "finish_reason": "stop"}
        commands += [
            {"op": "publish", "id": 10 + n, "stream_id": name, "event": done}
            for n, name in enumerate(names[:2])
        ]

        def source():
            for command in commands[1:]:
                yield Payload(orjson.dumps(command)), command is commands[-1]

        async with open_client(limited) as client:
            got = decoded(
                await client.request_channel(
                    payload("agent.session", commands[0]), StreamFromGenerator(source)
                )
            )
    answers = {m["id"]: m for m in got if "id" in m}
    assert [answers[n]["op"] for n in (0, 1)] == ["subscribed", "subscribed"]
    refused = answers[2]
    assert (refused["op"], refused["code"]) == ("error", "too_many_subscriptions"), refused
    assert "at most 2" in refused["message"]
    assert [answers[n]["op"] for n in (10, 11)] == ["published", "published"]
    assert {m["stream_id"] for m in got if m.get("op") == "ended"} == {"bound-a", "bound-b"}
