"""The streams API over real HTTP: create, publish, read (SSE), status, snapshot, cancel,
delete; and SSE resume, which must lose nothing and repeat nothing.

Every reader here is an `httpx` streaming response parsed by `airlane.wire.sse.SSEDecoder`,
fed into `tests.http.support.Reader` (a snapshot replaces, everything else extends), so each
test ends by comparing the text a client assembled with the stream's own snapshot and with a
non-streaming completion of the same request.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from urllib.parse import quote

import httpx
import pytest

from airlane.wire.sse import SSEDecoder
from tests.http.support import (
    PACED_SYNTHETIC,
    Reader,
    assert_json_error,
    await_for,
    chat_body,
    long_seed,
    sse_messages,
)
from tests.servers import ServerProcess, run_server

PROMPT = "Explain how a stream resumes."
MAX_LOOPS = 500
"""Upper bound on reconnects in any resume loop."""


@pytest.fixture(scope="module")
def compacting_server() -> Iterator[ServerProcess]:
    """Keeps only the 8 newest events of each stream; older ones are folded."""
    with run_server(config=PACED_SYNTHETIC + "\n[retention]\nmax_events = 8\n") as running:
        yield running


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=20) as http:
        yield http


async def create_generation(client: httpx.AsyncClient, url: str, body: dict) -> dict:
    response = await client.post(f"{url}/v1/streams", json=body)
    assert response.status_code == 201, response.text
    info = response.json()
    assert response.headers["x-airlane-stream-id"] == info["id"]
    assert info["id"].startswith("chatcmpl-")
    assert info["events_url"] == f"/v1/streams/{info['id']}/events"
    assert info["resume_token"] == f"{info['epoch']}:0"
    return info


async def expected_content(client: httpx.AsyncClient, url: str, body: dict) -> str:
    """The answer to ``body`` as a non-streaming completion (same seed: same text)."""
    response = await client.post(f"{url}/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]["message"]["content"]


async def snapshot(client: httpx.AsyncClient, url: str, stream_id: str) -> dict:
    response = await client.get(f"{url}/v1/streams/{stream_id}/snapshot")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["kind"] == "snapshot"
    return body


async def status(client: httpx.AsyncClient, url: str, stream_id: str) -> dict:
    response = await client.get(f"{url}/v1/streams/{stream_id}")
    assert response.status_code == 200, response.text
    return response.json()


async def read_events(
    client: httpx.AsyncClient,
    url: str,
    stream_id: str,
    reader: Reader,
    *,
    resume: str | None = None,
    query: str = "",
    stop_after_deltas: int | None = None,
) -> int:
    """Read ``/events`` into ``reader`` until the stream ends, the server ends the response,
    or ``stop_after_deltas`` content deltas arrived (then drop the connection). Returns the
    number of events this response carried."""
    headers = {"last-event-id": resume} if resume is not None else {}
    count = deltas = 0
    async with client.stream(
        "GET", f"{url}/v1/streams/{stream_id}/events{query}", headers=headers
    ) as response:
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["x-airlane-stream-id"] == stream_id
        async for message in sse_messages(response, SSEDecoder(last_event_id=resume or "")):
            reader.apply(json.loads(message.data), message.id)
            count += 1
            deltas += reader.kinds[-1] == "delta"
            if reader.done or deltas == stop_after_deltas:
                break
    return count


# -- lifecycle --------------------------------------------------------------------------------


async def test_generation_lifecycle(server, client):
    body = chat_body(PROMPT, seed=31, max_tokens=60)
    info = await create_generation(client, server.url, body)
    stream_id = info["id"]

    reader = Reader()
    await read_events(client, server.url, stream_id, reader)
    assert reader.content == await expected_content(client, server.url, body)
    assert reader.kinds[-1] == "done"
    assert "usage" in reader.kinds
    assert reader.epoch == info["epoch"]

    state = await status(client, server.url, stream_id)
    assert state["ended"] is True
    assert state["finish_reason"] == reader.terminal["finish_reason"]
    assert state["last_seq"] == reader.last_seq
    assert state["resume_token"] == reader.last_id
    assert state["usage"]["completion_tokens"] > 0

    snap = await snapshot(client, server.url, stream_id)
    assert snap["text"]["content"] == reader.content
    assert snap["seq"] == reader.last_seq
    assert snap["resume_token"] == reader.last_id

    # Cancelling an ended stream changes nothing.
    response = await client.post(f"{server.url}/v1/streams/{stream_id}/cancel")
    assert response.json() == {"id": stream_id, "cancelled": False}

    response = await client.delete(f"{server.url}/v1/streams/{stream_id}")
    assert response.status_code == 204
    for path in ("", "/snapshot", "/events"):
        gone = await client.get(f"{server.url}/v1/streams/{stream_id}{path}")
        assert_json_error(gone, 404, "stream_not_found")


async def test_cancel_running_generation(paced_server, client):
    url = paced_server.url
    seed = long_seed(PROMPT, min_tokens=150, max_tokens=300)
    info = await create_generation(client, url, chat_body(PROMPT, seed=seed, max_tokens=300))
    stream_id = info["id"]
    reader = Reader()
    await read_events(client, url, stream_id, reader, stop_after_deltas=5)
    state = await status(client, url, stream_id)
    assert state["ended"] is False

    response = await client.post(f"{url}/v1/streams/{stream_id}/cancel")
    assert response.status_code == 200
    assert response.json() == {"id": stream_id, "cancelled": True}
    await read_events(client, url, stream_id, reader, resume=reader.last_id)
    assert reader.terminal["kind"] == "done"
    assert reader.terminal["finish_reason"] == "cancelled"
    assert reader.content == (await snapshot(client, url, stream_id))["text"]["content"]
    assert len(reader.content.split()) < 150

    state = await status(client, url, stream_id)
    assert state["ended"] is True and state["finish_reason"] == "cancelled"
    again = await client.post(f"{url}/v1/streams/{stream_id}/cancel")
    assert again.json()["cancelled"] is False


async def test_named_stream_publish_and_read(server, client):
    url = server.url
    name = "agents/42/events"
    base = f"{url}/v1/streams/{name}"
    response = await client.post(f"{url}/v1/streams", json={"name": name})
    assert response.status_code == 201, response.text
    info = response.json()
    assert info["id"] == name
    assert info["events_url"] == f"/v1/streams/{name}/events"
    assert info["last_seq"] == 0 and info["ended"] is False

    duplicate = await client.post(f"{url}/v1/streams", json={"name": name})
    assert_json_error(duplicate, 409, "stream_exists")
    same = await client.post(f"{url}/v1/streams", json={"name": name, "exist_ok": True})
    assert same.status_code == 201 and same.json()["epoch"] == info["epoch"]

    one = await client.post(f"{base}/events", json={"kind": "message", "payload": {"step": 1}})
    assert one.status_code == 200, one.text
    assert one.json() == {"id": name, "seq": [1], "resume_token": f"{info['epoch']}:1"}
    batch = {
        "events": [
            {"payload": {"step": 2, "text": "naïve 🚀"}},
            {"kind": "delta", "text": "Hello"},
            {"kind": "delta", "text": ", world", "channel": "content"},
            {"kind": "delta", "text": "thinking", "channel": "reasoning"},
            {"kind": "tool_call", "index": 0, "id": "call_1", "name": "f", "arguments": '{"a"'},
            {"kind": "tool_call", "index": 0, "arguments": ": 1}"},
            {"kind": "status", "state": "working", "lane": "control"},
        ]
    }
    many = await client.post(f"{base}/events", json=batch)
    assert many.status_code == 200, many.text
    assert many.json()["seq"] == [2, 3, 4, 5, 6, 7, 8]

    # A reader from the start gets the history and then the live tail.
    reader = Reader()
    async with client.stream("GET", f"{base}/events") as response:
        assert response.status_code == 200
        decoder = SSEDecoder()
        messages = sse_messages(response, decoder)
        while reader.last_seq < 8:
            message = await anext(messages)
            reader.apply(json.loads(message.data), message.id)
        late = await client.post(f"{base}/events", json={"payload": {"step": 3}})
        assert late.json()["seq"] == [9]
        cancelled = await client.post(f"{base}/cancel")
        assert cancelled.json() == {"id": name, "cancelled": True}
        async for message in messages:
            reader.apply(json.loads(message.data), message.id)
    assert reader.done
    assert reader.messages == [{"step": 1}, {"step": 2, "text": "naïve 🚀"}, {"step": 3}]
    assert reader.text == {"content": "Hello, world", "reasoning": "thinking"}
    assert reader.tool_calls[0] == {"id": "call_1", "name": "f", "arguments": '{"a": 1}'}
    assert reader.terminal["kind"] == "done"
    assert reader.terminal["finish_reason"] == "cancelled"
    assert reader.last_seq == 10
    assert "status" in reader.kinds

    snap = await snapshot(client, url, name)
    assert snap["text"] == reader.text
    assert snap["tool_calls"] == [
        {"index": 0, "id": "call_1", "name": "f", "arguments": '{"a": 1}'}
    ]
    assert snap["resume_token"] == f"{info['epoch']}:10"

    after_end = await client.post(f"{base}/events", json={"payload": {}})
    assert_json_error(after_end, 409, "stream_ended")


async def test_named_stream_ending_in_an_action_word_has_status_and_delete(server, client):
    """Ids may contain slashes (docs/streams.md: ``agents/42/events``); a client can
    always address one unambiguously by percent-encoding it as one path segment."""
    url = server.url
    name = "agents/43/events"
    created = await client.post(f"{url}/v1/streams", json={"name": name})
    assert created.status_code == 201
    resource = f"{url}/v1/streams/{quote(name, safe='')}"
    response = await client.get(resource)
    assert response.status_code == 200, response.text
    assert response.json()["id"] == name
    response = await client.delete(resource)
    assert response.status_code == 204, response.text
    assert_json_error(await client.get(f"{url}/v1/streams/{name}/snapshot"), 404)


# -- SSE resume -------------------------------------------------------------------------------


async def test_resume_after_dropped_connection_is_exact(paced_server, server, client):
    url = paced_server.url
    seed = long_seed(PROMPT, min_tokens=150, max_tokens=300)
    body = chat_body(PROMPT, seed=seed, max_tokens=300)
    info = await create_generation(client, url, body)
    stream_id = info["id"]

    reader = Reader()
    await read_events(client, url, stream_id, reader, stop_after_deltas=10)
    dropped_at = reader.last_id
    assert dropped_at is not None and not reader.done
    assert (await status(client, url, stream_id))["ended"] is False, "still generating"

    await read_events(client, url, stream_id, reader, resume=dropped_at)
    assert reader.done
    assert reader.kinds.count("snapshot") == 0, "nothing was folded: no snapshot needed"
    final = await snapshot(client, url, stream_id)
    assert reader.content == final["text"]["content"]
    # The same request answered by another gateway process, without streaming.
    assert reader.content == await expected_content(client, server.url, body)


async def test_resume_from_folded_history_starts_with_a_snapshot(compacting_server, client):
    url = compacting_server.url
    seed = long_seed(PROMPT, min_tokens=60, max_tokens=120)
    body = chat_body(PROMPT, seed=seed, max_tokens=120)
    stream_id = (await create_generation(client, url, body))["id"]

    reader = Reader()
    await read_events(client, url, stream_id, reader, stop_after_deltas=3)
    early = reader.last_id
    seen = reader.content

    async def ended() -> bool:
        return (await status(client, url, stream_id))["ended"]

    await await_for(ended, 10, "the generation to end")
    state = await status(client, url, stream_id)
    assert state["first_retained_seq"] > reader.last_seq + 1, "the early events were folded"
    assert state["retained_events"] <= 8

    before = len(reader.kinds)
    await read_events(client, url, stream_id, reader, resume=early)
    first = reader.kinds[before]
    assert first == "snapshot"
    assert reader.done
    final = await snapshot(client, url, stream_id)
    assert reader.content == final["text"]["content"]
    assert reader.content.startswith(seen)
    assert reader.content == await expected_content(client, url, body)


async def test_recycled_connections_with_max_events(server, client):
    url = server.url
    seed = long_seed(PROMPT, min_tokens=60, max_tokens=100)
    body = chat_body(PROMPT, seed=seed, max_tokens=100)
    stream_id = (await create_generation(client, url, body))["id"]

    reader = Reader()
    responses = 0
    for _ in range(MAX_LOOPS):
        count = await read_events(
            client, url, stream_id, reader, resume=reader.last_id, query="?max_events=4"
        )
        responses += 1
        assert 0 < count <= 4
        if reader.done:
            break
    assert reader.done
    assert responses >= 3, "the server ended responses early"
    assert reader.content == (await snapshot(client, url, stream_id))["text"]["content"]
    assert reader.content == await expected_content(client, url, body)


async def test_recycled_connections_with_from_query(compacting_server, client):
    """``?from=`` (the token kept in the URL) with ``max_events``, across compaction."""
    url = compacting_server.url
    body = chat_body(PROMPT, seed=long_seed(PROMPT, min_tokens=40, max_tokens=80), max_tokens=80)
    stream_id = (await create_generation(client, url, body))["id"]
    reader = Reader()
    for _ in range(MAX_LOOPS):
        query = "?max_events=3" + (f"&from={reader.last_id}" if reader.last_id else "")
        await read_events(client, url, stream_id, reader, query=query)
        if reader.done:
            break
    assert reader.done
    assert reader.content == await expected_content(client, url, body)


async def test_resume_token_from_another_epoch_resets_with_a_snapshot(server, client):
    url = server.url
    body = chat_body(PROMPT, seed=33, max_tokens=40)
    stream_id = (await create_generation(client, url, body))["id"]
    first = Reader()
    await read_events(client, url, stream_id, first)

    for resume, query in (("deadbeef:3", ""), (None, "?from=deadbeef:3")):
        reader = Reader()
        reader.text["content"] = "stale text the client had"
        await read_events(client, url, stream_id, reader, resume=resume, query=query)
        assert reader.kinds[0] == "snapshot"
        assert reader.done
        assert reader.content == first.content
        assert reader.epoch == first.epoch

    headers = {"last-event-id": "deadbeef:3"}
    async with client.stream(
        "GET", f"{url}/v1/streams/{stream_id}/events", headers=headers
    ) as response:
        messages = [m async for m in sse_messages(response, SSEDecoder())]
    opening = json.loads(messages[0].data)
    assert opening["kind"] == "snapshot"
    assert opening["reset"] is True


async def test_finished_stream_resumed_at_its_end_is_204(server, client):
    url = server.url
    stream_id = (await create_generation(client, url, chat_body(PROMPT, seed=34)))["id"]
    reader = Reader()
    await read_events(client, url, stream_id, reader)
    assert reader.last_id == (await status(client, url, stream_id))["resume_token"]

    events = f"{url}/v1/streams/{stream_id}/events"
    response = await client.get(events, headers={"last-event-id": reader.last_id})
    assert response.status_code == 204
    assert response.content == b""
    response = await client.get(f"{events}?from={reader.last_id}")
    assert response.status_code == 204

    # One event before the end: just the terminal one.
    epoch, _, seq = reader.last_id.rpartition(":")
    tail = Reader()
    tail.last_seq = int(seq) - 1
    assert await read_events(client, url, stream_id, tail, resume=f"{epoch}:{int(seq) - 1}") == 1
    assert tail.kinds == ["done"]


async def test_resume_beyond_the_end_is_416(server, client):
    url = server.url
    stream_id = (await create_generation(client, url, chat_body(PROMPT, seed=35)))["id"]
    await read_events(client, url, stream_id, Reader())
    state = await status(client, url, stream_id)
    beyond = f"{state['epoch']}:{state['last_seq'] + 1}"
    response = await client.get(
        f"{url}/v1/streams/{stream_id}/events", headers={"last-event-id": beyond}
    )
    assert_json_error(response, 416, "invalid_resume")


async def test_a_load_test_generation_can_be_created_and_read_by_anyone(server, client):
    body = {"loadtest": {"chunks": 5, "mode": "paced", "interval_ms": 5}, "orphan": "keep"}
    response = await client.post(f"{server.url}/v1/streams", json=body)
    assert response.status_code == 201, response.text
    stream_id = response.json()["id"]
    async with client.stream("GET", f"{server.url}/v1/streams/{stream_id}/events") as events:
        messages = [json.loads(m.data) async for m in sse_messages(events, SSEDecoder())]
    chunks = [m["payload"] for m in messages if m["kind"] == "message"]
    assert [c["seq"] for c in chunks] == [1, 2, 3, 4, 5] and messages[-1]["kind"] == "done"
    for bad in ({"loadtest": 3}, {"loadtest": {"chunks": 0}}, {"loadtest": {}, "orphan": "x"}):
        response = await client.post(f"{server.url}/v1/streams", json=bad)
        assert_json_error(response, 400)
