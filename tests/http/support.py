"""What the HTTP integration tests share: request bodies, seeds, an event reader, checks.

Everything here talks to real gateway processes (`tests.servers.run_server`) with real
clients; nothing is mocked. The synthetic backend's text depends only on (seed, model,
messages), so a test can compute the exact text a stream must end with, from the snapshot
endpoint or from a non-streaming completion of the same request.
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx

from airlane.backends.base import GenerationRequest
from airlane.backends.synthetic import SyntheticConfig, SyntheticScript
from airlane.core.events import Kind
from airlane.wire.sse import SSEDecoder, SSEMessage

MODEL = "airlane-synthetic"

PACED_SYNTHETIC = """
[synthetic]
ttft_ms = 5.0
itl_ms = 10.0
itl_jitter_ms = 0.0
itl_distribution = "constant"
"""
"""10 ms per token: a 150-token generation lasts 1.5 s, so a client can leave mid-stream."""


def chat_body(prompt: str, seed: int, **extra: Any) -> dict[str, Any]:
    """A chat completion request for the synthetic backend."""
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": prompt}],
        "seed": seed,
        **extra,
    }


@functools.cache
def long_seed(prompt: str, min_tokens: int, max_tokens: int, model: str = MODEL) -> int:
    """The first seed whose synthetic answer to ``prompt`` has at least ``min_tokens`` content
    tokens (an answer ends at a random sentence end, so most are short)."""
    messages = [{"role": "user", "content": prompt}]
    for seed in range(20_000):
        request = GenerationRequest(model, messages, seed=seed, max_tokens=max_tokens)
        tokens = sum(
            event.tokens
            for _, event in SyntheticScript(request, SyntheticConfig())
            if event.kind is Kind.DELTA
        )
        if tokens >= min_tokens:
            return seed
    raise AssertionError(f"no seed gives {min_tokens} tokens for {prompt!r}")


def assert_json_error(response: httpx.Response, status: int, code: str | None = None) -> dict:
    """``response`` is ``status`` with an OpenAI-style JSON error body and no traceback."""
    body = response.text
    assert response.status_code == status, (response.status_code, body[:500])
    assert "Traceback" not in body
    assert response.headers["content-type"].startswith("application/json"), response.headers
    error = json.loads(body)["error"]
    assert isinstance(error["message"], str) and error["message"], error
    assert isinstance(error["type"], str) and error["type"], error
    assert "code" in error, error
    if code is not None:
        assert error["code"] == code, error
    return error


def assert_healthy(url: str) -> None:
    """The gateway still answers ``/healthz``."""
    response = httpx.get(f"{url}/healthz", timeout=5)
    assert response.status_code == 200
    assert response.json()["status"] == "ok"


async def await_for(predicate: Callable[[], Any], timeout: float, what: str) -> float:
    """Await ``predicate()`` every 20 ms until it is true; return the seconds it took.

    For the state of another process that offers no signal of it (a gateway's count of
    running generations, whether a stream has ended): each check is a request to that
    process, and the pause between checks leaves it the cores it shares with this one."""
    start = time.monotonic()
    deadline = start + timeout
    while not await predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.02)
    return time.monotonic() - start


async def sse_messages(response: httpx.Response, decoder: SSEDecoder) -> AsyncIterator[SSEMessage]:
    """The SSE messages of a streaming httpx response, parsed by Airlane's own decoder."""
    async for chunk in response.aiter_raw():
        for message in decoder.feed(chunk):
            yield message


class Reader:
    """A client's view of one stream built from native events (SSE ``data`` or WebSocket
    ``event``): a ``snapshot`` replaces the state, everything else extends it.

    It also checks what every reader may rely on: ids are ``<epoch>:<seq>`` of one epoch,
    sequence numbers only grow (a coalesced delta skips some), nothing follows the terminal.
    """

    def __init__(self) -> None:
        self.text = {"content": "", "reasoning": ""}
        self.tool_calls: dict[int, dict[str, Any]] = {}
        self.messages: list[Any] = []
        self.kinds: list[str] = []
        self.terminal: dict[str, Any] | None = None
        self.last_id: str | None = None
        self.last_seq = 0
        self.epoch: str | None = None

    @property
    def content(self) -> str:
        return self.text["content"]

    def apply(self, event: dict[str, Any], event_id: str | None = None) -> None:
        assert self.terminal is None, f"event after the terminal one: {event}"
        kind = event["kind"]
        self.kinds.append(kind)
        seq = event["seq"]
        if event_id is not None:
            epoch, _, seq_text = event_id.rpartition(":")
            assert int(seq_text) == seq, (event_id, event)
            assert self.epoch in (None, epoch), (self.epoch, event_id)
            self.epoch = epoch
            self.last_id = event_id
        if kind == "snapshot":
            assert seq >= self.last_seq or event.get("reset"), (self.last_seq, event)
            self.text = dict(event["text"])
            self.tool_calls = {call["index"]: dict(call) for call in event["tool_calls"]}
        else:
            assert seq > self.last_seq, f"seq {seq} after {self.last_seq}: duplicate or reorder"
            if kind == "delta":
                self.text[event["channel"]] += event["text"]
            elif kind == "tool_call":
                call = self.tool_calls.setdefault(event["index"], {"arguments": ""})
                call.update({k: event[k] for k in ("id", "name") if k in event})
                call["arguments"] += event["arguments"]
            elif kind == "message":
                self.messages.append(event.get("payload"))
            elif kind in ("done", "error"):
                self.terminal = event
        self.last_seq = seq

    @property
    def done(self) -> bool:
        return self.terminal is not None
