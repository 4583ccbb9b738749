"""`AirlaneClient` against a real gateway: chat streams and stream events, resumed after real
dropped connections (a proxy that cuts them) and after connection recycling."""

from __future__ import annotations

import socket

import httpx
import pytest

from airlane.client import (
    AirlaneClient,
    ResumeFailed,
    RetryPolicy,
    StreamEvent,
    StreamNotFound,
    TextAccumulator,
)
from tests.client.conftest import LONG_REQUEST, reference_text
from tests.client.proxy import TcpProxy
from tests.servers import ServerProcess

FAST_RETRY = RetryPolicy(max_retries=2, base_delay_s=0.01, max_delay_s=0.05)


async def chat(client: AirlaneClient, request: dict) -> tuple[str, list]:
    params = dict(request)
    pieces = [
        piece
        async for piece in client.chat_stream(params.pop("model"), params.pop("messages"), **params)
    ]
    state = TextAccumulator()
    for piece in pieces:
        state.apply_delta(piece)
    return state.content, pieces


async def test_chat_stream_gives_the_exact_text(gateway: ServerProcess) -> None:
    async with AirlaneClient(gateway.url) as client:
        text, pieces = await chat(client, LONG_REQUEST)
        assert client.stream_id is not None and client.stream_id.startswith("chatcmpl-")
        assert client.last_id is not None and ":" in client.last_id
        assert client.bytes_received > 0
    assert text == reference_text(gateway.url, LONG_REQUEST)
    assert pieces[-1].finish_reason == "length" or any(p.finish_reason for p in pieces)
    assert not any(p.resumed for p in pieces)


async def test_chat_stream_resumes_after_a_cut_connection(gateway: ServerProcess) -> None:
    async with TcpProxy(gateway.url) as proxy, AirlaneClient(proxy.url) as client:
        proxy.cut_after = 3000  # the head and a few chunks, then the connection dies
        text, pieces = await chat(client, LONG_REQUEST)
        assert proxy.cuts == 1
        assert proxy.connections >= 2
    assert any(p.resumed for p in pieces) and not pieces[0].resumed
    assert text == reference_text(gateway.url, LONG_REQUEST)


async def test_events_resume_across_recycled_responses(gateway: ServerProcess) -> None:
    # A named stream of 23 messages (never coalesced) and a terminal event, read with the
    # gateway ending every response after 5 events: the client must stitch 5 responses.
    name = "tests/client/recycled"
    events_in = [{"kind": "message", "payload": {"n": n}} for n in range(23)]
    async with httpx.AsyncClient(base_url=gateway.url) as http:
        (await http.post("/v1/streams", json={"name": name})).raise_for_status()
        published = await http.post(
            f"/v1/streams/{name}/events", json={"events": [*events_in, {"kind": "done"}]}
        )
        published.raise_for_status()
    async with AirlaneClient(gateway.url) as client:
        events = [e async for e in client.events(name, params={"max_events": 5})]
        assert client.resumes == 4
    assert [e.seq for e in events] == list(range(1, 25))
    assert [e.data["payload"]["n"] for e in events[:-1]] == list(range(23))
    assert events[-1].kind == "done"


async def test_events_resume_after_a_cut_connection(gateway: ServerProcess) -> None:
    async with AirlaneClient(gateway.url) as direct:
        _, _ = await chat(direct, LONG_REQUEST)
        stream_id = direct.stream_id
    assert stream_id is not None
    async with TcpProxy(gateway.url) as proxy, AirlaneClient(proxy.url) as client:
        proxy.cut_after = 700
        events = [e async for e in client.events(stream_id)]
        assert proxy.cuts == 1 and client.resumes >= 1
    state = TextAccumulator()
    assert all(state.apply(e) for e in events), "the resume repeated an event"
    assert state.content == reference_text(gateway.url, LONG_REQUEST)


async def test_events_from_the_end_of_an_ended_stream_yield_nothing(
    gateway: ServerProcess,
) -> None:
    async with AirlaneClient(gateway.url) as client:
        _, _ = await chat(client, {**LONG_REQUEST, "max_tokens": 5})
        assert client.stream_id is not None
        info = await client.info(client.stream_id)
        assert info["ended"] is True
        assert [e async for e in client.events(client.stream_id, resume=info["resume_token"])] == []


async def test_events_of_an_unknown_stream(gateway: ServerProcess) -> None:
    async with AirlaneClient(gateway.url) as client:
        with pytest.raises(StreamNotFound) as caught:
            _ = [e async for e in client.events("no-such-stream")]
    assert caught.value.status == 404


async def test_events_give_up_when_the_gateway_is_gone() -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with AirlaneClient(f"http://127.0.0.1:{port}", retry=FAST_RETRY) as client:
        with pytest.raises(ResumeFailed):
            _ = [e async for e in client.events("some-stream")]
        assert client.resumes == 2


async def test_event_parsing_keeps_the_resume_token() -> None:
    event = StreamEvent.from_json(b'{"seq":3,"kind":"delta","text":"hi"}', "ep:3")
    assert (event.seq, event.kind, event.text, event.channel, event.id) == (
        3,
        "delta",
        "hi",
        "content",
        "ep:3",
    )


async def test_stream_ids_with_slashes_and_action_words(gateway: ServerProcess) -> None:
    name = "tests/client/agent/events"  # ends in an action word: sent with %2F
    async with httpx.AsyncClient(base_url=gateway.url) as http:
        (await http.post("/v1/streams", json={"name": name})).raise_for_status()
    async with AirlaneClient(gateway.url) as client:
        info = await client.info(name)
        assert info["id"] == name
        assert await client.cancel(name) in (True, False)
        events = [e async for e in client.events(name)]
    assert events[-1].terminal
