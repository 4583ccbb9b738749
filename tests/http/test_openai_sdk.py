"""The official ``openai`` SDK against a real gateway: what an application written for
OpenAI sees when it points ``base_url`` at Airlane.

Streaming and non-streaming answers to the same request must agree exactly (the synthetic
text depends only on seed, model and messages), including tool calls and reasoning.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import openai
import pytest
from openai import AsyncOpenAI, OpenAI

from tests.http.conftest import API_KEY
from tests.http.support import MODEL, assert_healthy

MESSAGES = [{"role": "user", "content": "Tell me about resumable token streams."}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the documentation.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}},
                "required": ["query"],
            },
        },
    },
    {
        "type": "function",
        "function": {"name": "other", "parameters": {"type": "object", "properties": {}}},
    },
]


def sync_client(url: str, api_key: str = "x") -> OpenAI:
    return OpenAI(base_url=f"{url}/v1", api_key=api_key, max_retries=0, timeout=20)


def async_client(url: str, api_key: str = "x") -> AsyncOpenAI:
    return AsyncOpenAI(base_url=f"{url}/v1", api_key=api_key, max_retries=0, timeout=20)


class Assembled:
    """A streamed completion put back together from its chunks, as an application would."""

    def __init__(self) -> None:
        self.ids: set[str] = set()
        self.role: str | None = None
        self.content = ""
        self.reasoning = ""
        self.reasoning_after_content = False
        self.tool_calls: dict[int, dict[str, Any]] = {}
        self.finish_reasons: list[str] = []
        self.usage: Any = None
        self.chunks_after_usage = 0

    def add(self, chunk: Any) -> None:
        self.ids.add(chunk.id)
        assert chunk.object == "chat.completion.chunk"
        if self.usage is not None:
            self.chunks_after_usage += 1
        if chunk.usage is not None:
            # The include_usage chunk: usage and no choices (OpenAI's documented shape).
            assert chunk.choices == []
            self.usage = chunk.usage
            return
        assert len(chunk.choices) == 1
        choice = chunk.choices[0]
        delta = choice.delta
        if delta.role is not None:
            self.role = delta.role
        reasoning = (delta.model_extra or {}).get("reasoning_content")
        if reasoning:
            self.reasoning += reasoning
            self.reasoning_after_content |= bool(self.content)
        if delta.content:
            self.content += delta.content
        for call in delta.tool_calls or []:
            entry = self.tool_calls.setdefault(
                call.index, {"id": None, "name": None, "arguments": ""}
            )
            if call.id is not None:
                assert entry["id"] is None, "a tool call id is sent once"
                entry["id"] = call.id
            if call.function is not None:
                if call.function.name is not None:
                    entry["name"] = call.function.name
                entry["arguments"] += call.function.arguments or ""
        if choice.finish_reason is not None:
            self.finish_reasons.append(choice.finish_reason)


def assert_usage(usage: Any) -> None:
    assert usage is not None, "no usage chunk although include_usage was asked for"
    assert usage.prompt_tokens > 0
    assert usage.completion_tokens > 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


# -- sync client ------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [1, 7, 42])
def test_sync_stream_equals_non_streaming_answer(server, seed):
    with sync_client(server.url) as client:
        whole = client.chat.completions.create(
            model=MODEL, messages=MESSAGES, seed=seed, max_tokens=80
        )
        streamed = Assembled()
        stream = client.chat.completions.create(
            model=MODEL,
            messages=MESSAGES,
            seed=seed,
            max_tokens=80,
            stream=True,
            stream_options={"include_usage": True},
        )
        for chunk in stream:
            streamed.add(chunk)

    message = whole.choices[0].message
    assert message.content
    assert streamed.content == message.content
    assert streamed.role == "assistant"
    assert len(streamed.ids) == 1
    assert streamed.finish_reasons == [whole.choices[0].finish_reason]
    assert streamed.finish_reasons[0] in ("stop", "length")
    assert_usage(streamed.usage)
    assert streamed.chunks_after_usage == 0, "the usage chunk is the last one"
    assert streamed.usage.prompt_tokens == whole.usage.prompt_tokens
    assert streamed.usage.completion_tokens == whole.usage.completion_tokens


def test_sync_stream_without_include_usage_has_no_usage_chunk(server):
    with sync_client(server.url) as client:
        streamed = Assembled()
        for chunk in client.chat.completions.create(
            model=MODEL, messages=MESSAGES, seed=3, max_tokens=20, stream=True
        ):
            streamed.add(chunk)
    assert streamed.usage is None
    assert streamed.content
    assert len(streamed.finish_reasons) == 1


def test_sync_tool_call_streams_and_matches_non_streaming(server):
    with sync_client(server.url) as client:
        whole = client.chat.completions.create(model=MODEL, messages=MESSAGES, seed=11, tools=TOOLS)
        streamed = Assembled()
        for chunk in client.chat.completions.create(
            model=MODEL,
            messages=MESSAGES,
            seed=11,
            tools=TOOLS,
            stream=True,
            stream_options={"include_usage": True},
        ):
            streamed.add(chunk)

    choice = whole.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert streamed.finish_reasons == ["tool_calls"]
    calls = choice.message.tool_calls
    assert calls is not None and len(calls) == 1
    assert sorted(streamed.tool_calls) == [0]
    call = streamed.tool_calls[0]
    assert call["name"] == "search" == calls[0].function.name  # the first tool
    assert call["id"] == calls[0].id and call["id"]
    assert call["arguments"] == calls[0].function.arguments
    arguments = json.loads(call["arguments"])
    assert isinstance(arguments, dict) and isinstance(arguments["query"], str)
    assert streamed.content == ""
    assert_usage(streamed.usage)


def test_sync_reasoning_deltas_come_before_content(server):
    extra = {"airlane": {"reasoning": True}}
    with sync_client(server.url) as client:
        whole = client.chat.completions.create(
            model=MODEL, messages=MESSAGES, seed=5, max_tokens=120, extra_body=extra
        )
        streamed = Assembled()
        for chunk in client.chat.completions.create(
            model=MODEL,
            messages=MESSAGES,
            seed=5,
            max_tokens=120,
            stream=True,
            extra_body=extra,
        ):
            streamed.add(chunk)

    message = whole.choices[0].message
    reasoning = (message.model_extra or {}).get("reasoning_content")
    assert reasoning, "the non-streaming message carries reasoning_content"
    assert streamed.reasoning == reasoning
    assert streamed.content == message.content and streamed.content
    assert not streamed.reasoning_after_content


def test_sync_stream_id_header_names_the_completion(server):
    with sync_client(server.url) as client:
        raw = client.chat.completions.with_raw_response.create(
            model=MODEL, messages=MESSAGES, seed=9, max_tokens=10
        )
        completion = raw.parse()
        stream_id = raw.headers["x-airlane-stream-id"]
        assert stream_id == completion.id
        assert stream_id.startswith("chatcmpl-")

        with client.chat.completions.with_streaming_response.create(
            model=MODEL, messages=MESSAGES, seed=9, max_tokens=10, stream=True
        ) as response:
            streamed_id = response.headers["x-airlane-stream-id"]
            streamed = Assembled()
            for chunk in response.parse():
                streamed.add(chunk)
    assert streamed.ids == {streamed_id}
    assert streamed_id != stream_id
    assert streamed.content == completion.choices[0].message.content

    # The id is the stream's name in the streams API.
    info = httpx.get(f"{server.url}/v1/streams/{streamed_id}", timeout=5).json()
    assert info["id"] == streamed_id
    assert info["ended"] is True
    assert info["finish_reason"] == streamed.finish_reasons[0]


# -- async client -----------------------------------------------------------------------------


async def test_async_streams_equal_non_streaming_answers(server):
    seeds = range(100, 108)
    async with async_client(server.url) as client:

        async def both(seed: int) -> tuple[Any, Assembled]:
            whole = await client.chat.completions.create(
                model=MODEL, messages=MESSAGES, seed=seed, max_tokens=60
            )
            streamed = Assembled()
            stream = await client.chat.completions.create(
                model=MODEL,
                messages=MESSAGES,
                seed=seed,
                max_tokens=60,
                stream=True,
                stream_options={"include_usage": True},
            )
            async for chunk in stream:
                streamed.add(chunk)
            return whole, streamed

        results = await asyncio.gather(*(both(seed) for seed in seeds))

    contents = set()
    for whole, streamed in results:
        assert streamed.content == whole.choices[0].message.content
        assert streamed.finish_reasons == [whole.choices[0].finish_reason]
        assert_usage(streamed.usage)
        assert streamed.usage.completion_tokens == whole.usage.completion_tokens
        contents.add(streamed.content)
    assert len(contents) == len(seeds), "different seeds give different answers"


async def test_async_tool_call_and_reasoning(server):
    async with async_client(server.url) as client:
        whole = await client.chat.completions.create(
            model=MODEL,
            messages=MESSAGES,
            seed=12,
            tools=TOOLS,
            tool_choice={"type": "function", "function": {"name": "other"}},
            extra_body={"airlane": {"reasoning": True}},
        )
        streamed = Assembled()
        async with client.chat.completions.with_streaming_response.create(
            model=MODEL,
            messages=MESSAGES,
            seed=12,
            tools=TOOLS,
            tool_choice={"type": "function", "function": {"name": "other"}},
            extra_body={"airlane": {"reasoning": True}},
            stream=True,
            stream_options={"include_usage": True},
        ) as response:
            stream_id = response.headers["x-airlane-stream-id"]
            async for chunk in await response.parse():
                streamed.add(chunk)

    assert streamed.ids == {stream_id}
    calls = whole.choices[0].message.tool_calls
    assert calls is not None and len(calls) == 1
    assert streamed.tool_calls[0]["name"] == "other" == calls[0].function.name
    assert streamed.tool_calls[0]["id"] == calls[0].id
    assert streamed.tool_calls[0]["arguments"] == calls[0].function.arguments
    json.loads(streamed.tool_calls[0]["arguments"])
    assert streamed.reasoning == whole.choices[0].message.model_extra["reasoning_content"]
    assert streamed.finish_reasons == ["tool_calls"]
    assert_usage(streamed.usage)


# -- API keys ---------------------------------------------------------------------------------


def test_sdk_without_key_is_refused(keyed_server):
    with (
        sync_client(keyed_server.url, api_key="unused") as client,
        pytest.raises(openai.AuthenticationError) as caught,
    ):
        # The SDK always sends a key; omitting the header is how to send none.
        client.chat.completions.create(
            model=MODEL, messages=MESSAGES, extra_headers={"Authorization": openai.omit}
        )
    assert caught.value.status_code == 401
    assert "authorization" not in caught.value.response.request.headers
    assert caught.value.code == "unauthenticated"
    assert_healthy(keyed_server.url)


def test_sdk_with_wrong_key_is_refused(keyed_server):
    with sync_client(keyed_server.url, api_key="not-the-key") as client:
        with pytest.raises(openai.AuthenticationError):
            client.chat.completions.create(model=MODEL, messages=MESSAGES)
        with pytest.raises(openai.AuthenticationError):
            client.chat.completions.create(model=MODEL, messages=MESSAGES, stream=True)


async def test_sdk_with_right_key_works(keyed_server):
    with sync_client(keyed_server.url, api_key=API_KEY) as client:
        whole = client.chat.completions.create(
            model=MODEL, messages=MESSAGES, seed=2, max_tokens=30
        )
    async with async_client(keyed_server.url, api_key="wrong") as client:
        with pytest.raises(openai.AuthenticationError):
            await client.chat.completions.create(model=MODEL, messages=MESSAGES)
    async with async_client(keyed_server.url, api_key=API_KEY) as client:
        streamed = Assembled()
        async for chunk in await client.chat.completions.create(
            model=MODEL, messages=MESSAGES, seed=2, max_tokens=30, stream=True
        ):
            streamed.add(chunk)
    assert streamed.content == whole.choices[0].message.content and streamed.content
