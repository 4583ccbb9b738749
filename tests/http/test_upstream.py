"""A gateway in front of an OpenAI-compatible upstream: a second gateway process.

The upstream runs the synthetic backend slowly (a token every 50 ms) and cancels a
generation as soon as its client disconnects (``[orphan] mode = "cancel"``, like vLLM
aborting a request). So the front's upstream backend is tested end to end over real HTTP:
the text it relays, the abort it must cause on cancel, and its errors.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator

import httpx
import openai
import pytest

from airlane.wire.sse import SSEDecoder
from tests.http.support import (
    MODEL,
    assert_healthy,
    assert_json_error,
    await_for,
    chat_body,
    long_seed,
    sse_messages,
)
from tests.servers import ServerProcess, run_server

ITL_S = 0.05
UPSTREAM_CONFIG = f"""
[synthetic]
ttft_ms = 5.0
itl_ms = {ITL_S * 1000}
itl_jitter_ms = 0.0
itl_distribution = "constant"

[orphan]
mode = "cancel"
"""

PROMPT = "Relay this through two gateways."


@pytest.fixture(scope="module")
def upstream() -> Iterator[ServerProcess]:
    with run_server(config=UPSTREAM_CONFIG) as running:
        yield running


@pytest.fixture(scope="module")
def front(upstream: ServerProcess) -> Iterator[ServerProcess]:
    with run_server("--upstream", f"{upstream.url}/v1") as running:
        yield running


@pytest.fixture(scope="module")
def orphaned_front() -> Iterator[ServerProcess]:
    """A front whose upstream URL has no server behind it.

    The port stays bound (never listening) while the front runs: connecting to it is refused,
    and the kernel cannot hand it out as a client's source port meanwhile. (Released, it could:
    a connection to an ephemeral port nobody holds may then connect to itself and read its own
    request back as the "response", which made this flaky.)
    """
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        port = held.getsockname()[1]
        with run_server("--upstream", f"http://127.0.0.1:{port}/v1") as running:
            yield running


async def generations(client: httpx.AsyncClient, url: str) -> int:
    response = await client.get(f"{url}/healthz")
    return response.json()["generations"]


async def stream_content(client: httpx.AsyncClient, url: str, body: dict) -> tuple[str, str]:
    """POST a streaming chat completion; return (content, finish_reason)."""
    content, finish = "", None
    async with client.stream(
        "POST", f"{url}/v1/chat/completions", json={**body, "stream": True}
    ) as response:
        assert response.status_code == 200
        async for message in sse_messages(response, SSEDecoder()):
            if message.data == "[DONE]":
                break
            chunk = json.loads(message.data)
            assert "error" not in chunk, chunk
            for choice in chunk["choices"]:
                content += choice["delta"].get("content") or ""
                finish = choice["finish_reason"] or finish
    assert finish is not None
    return content, finish


async def test_front_relays_the_upstream_text_exactly(front, upstream):
    body = chat_body(PROMPT, seed=21, max_tokens=12)
    async with httpx.AsyncClient(timeout=20) as client:
        direct, relayed, relayed_whole = await asyncio.gather(
            client.post(f"{upstream.url}/v1/chat/completions", json=body),
            stream_content(client, front.url, body),
            client.post(f"{front.url}/v1/chat/completions", json=body),
        )
    expected = direct.json()["choices"][0]
    assert expected["message"]["content"]
    assert relayed == (expected["message"]["content"], expected["finish_reason"])
    whole = relayed_whole.json()
    assert whole["choices"][0]["message"]["content"] == expected["message"]["content"]
    assert whole["usage"]["completion_tokens"] == direct.json()["usage"]["completion_tokens"]
    assert whole["usage"]["prompt_tokens"] == direct.json()["usage"]["prompt_tokens"]


def test_front_relays_tool_calls_to_the_openai_sdk(front, upstream):
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {}}}]
    kwargs = {"model": MODEL, "messages": [{"role": "user", "content": PROMPT}], "seed": 4}
    with openai.OpenAI(base_url=f"{upstream.url}/v1", api_key="x", max_retries=0) as client:
        direct = client.chat.completions.create(**kwargs, tools=tools)
    with openai.OpenAI(base_url=f"{front.url}/v1", api_key="x", max_retries=0) as client:
        arguments, names, finish = "", [], None
        for chunk in client.chat.completions.create(**kwargs, tools=tools, stream=True):
            for choice in chunk.choices:
                for call in choice.delta.tool_calls or []:
                    arguments += call.function.arguments or ""
                    names += [call.function.name] if call.function.name else []
                finish = choice.finish_reason or finish
    expected = direct.choices[0].message.tool_calls[0].function
    assert names == [expected.name] == ["lookup"]
    assert arguments == expected.arguments
    json.loads(arguments)
    assert finish == "tool_calls"


async def test_cancel_on_front_aborts_the_upstream_generation(front, upstream):
    seed = long_seed(PROMPT, min_tokens=200, max_tokens=400)
    body = chat_body(PROMPT, seed=seed, max_tokens=400)
    # At 50 ms a token, this generation runs for at least 10 s upstream if nobody stops it.
    async with httpx.AsyncClient(timeout=20) as client:

        async def upstream_idle() -> bool:
            return await generations(client, upstream.url) == 0

        await await_for(upstream_idle, 5, "an idle upstream")
        content, finish, cancelled_at = "", None, None
        async with client.stream(
            "POST", f"{front.url}/v1/chat/completions", json={**body, "stream": True}
        ) as response:
            assert response.status_code == 200
            stream_id = response.headers["x-airlane-stream-id"]
            async for message in sse_messages(response, SSEDecoder()):
                if message.data == "[DONE]":
                    break
                chunk = json.loads(message.data)
                for choice in chunk["choices"]:
                    content += choice["delta"].get("content") or ""
                    finish = choice["finish_reason"] or finish
                if cancelled_at is None and len(content.split()) >= 3:
                    assert await generations(client, upstream.url) == 1
                    assert await generations(client, front.url) == 1
                    reply = await client.post(f"{front.url}/v1/streams/{stream_id}/cancel")
                    assert reply.status_code == 200
                    assert reply.json() == {"id": stream_id, "cancelled": True}
                    cancelled_at = time.monotonic()
        assert finish == "cancelled"
        assert cancelled_at is not None
        # The front's producer closed its upstream response: the upstream saw a disconnect
        # and, with nobody left to read, cancelled its own generation.
        await await_for(upstream_idle, 3, "the upstream generation to stop")
        assert time.monotonic() - cancelled_at < 3
        assert await generations(client, front.url) == 0
        info = (await client.get(f"{front.url}/v1/streams/{stream_id}")).json()
        assert info["ended"] and info["finish_reason"] == "cancelled"
        assert len(content.split()) < 200, "the answer was cut short"


# -- upstream failures ------------------------------------------------------------------------


def test_unreachable_upstream_non_streaming_is_502(orphaned_front):
    body = chat_body(PROMPT, seed=1, max_tokens=5)
    for _ in range(2):  # the second request proves the first left nothing broken
        response = httpx.post(f"{orphaned_front.url}/v1/chat/completions", json=body, timeout=20)
        error = assert_json_error(response, 502, "upstream_unavailable")
        assert "upstream" in error["message"]
        assert response.headers["x-airlane-stream-id"].startswith("chatcmpl-")
    assert_healthy(orphaned_front.url)


async def test_unreachable_upstream_streaming_sends_error_frame(orphaned_front):
    body = chat_body(PROMPT, seed=1, max_tokens=5, stream=True)
    async with (
        httpx.AsyncClient(timeout=20) as client,
        client.stream("POST", f"{orphaned_front.url}/v1/chat/completions", json=body) as response,
    ):
        assert response.status_code == 200
        frames = [json.loads(m.data) async for m in sse_messages(response, SSEDecoder())]
    errors = [frame["error"] for frame in frames if "error" in frame]
    assert len(errors) == 1, frames
    assert errors[0]["code"] == "upstream_unavailable"
    assert errors[0]["message"] and errors[0]["type"]
    assert "error" in frames[-1], "nothing follows the error"
    assert_healthy(orphaned_front.url)


def test_unreachable_upstream_through_the_openai_sdk(orphaned_front):
    with openai.OpenAI(
        base_url=f"{orphaned_front.url}/v1", api_key="x", max_retries=0, timeout=20
    ) as client:
        kwargs = {"model": MODEL, "messages": [{"role": "user", "content": PROMPT}]}
        with pytest.raises(openai.APIStatusError) as caught:
            client.chat.completions.create(**kwargs)
        assert caught.value.status_code == 502
        with pytest.raises(openai.APIError) as streamed:
            for _ in client.chat.completions.create(**kwargs, stream=True):
                pass
        assert "upstream" in streamed.value.message
    assert_healthy(orphaned_front.url)


def test_upstream_refusing_the_request_is_reported(upstream):
    """An upstream that answers 401 (the front sends a key it does not know)."""
    with (
        run_server("--api-key", "upstream-key") as guarded,
        run_server("--upstream", f"{guarded.url}/v1", "--upstream-key", "wrong") as front,
    ):
        response = httpx.post(
            f"{front.url}/v1/chat/completions", json=chat_body(PROMPT, seed=1), timeout=20
        )
        error = assert_json_error(response, 502, "upstream_http_error")
        assert "401" in error["message"]
        assert "invalid API key" in error["message"]
        assert_healthy(front.url)
