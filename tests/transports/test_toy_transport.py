"""A new transport needs only a wire adapter: the toy one (`tests.transports.toy_transport`,
newline-delimited JSON over TCP) generates, resumes, is authorized and reports every refusal
with the gateway's codes, through nothing but `airlane.gateway` and the pure core."""

from __future__ import annotations

import ast
import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from airlane.backends.synthetic import SyntheticBackend, SyntheticConfig
from airlane.gateway import Gateway
from airlane.hub import MemoryHub
from airlane.security import ApiKeyPolicy
from tests.transports.toy_transport import serve_toy

FAST = SyntheticConfig(ttft_ms=1.0, itl_ms=0.2, itl_jitter_ms=0.1)
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 12}


@pytest.fixture
async def toy() -> AsyncIterator[tuple[str, int]]:
    gateway = Gateway(MemoryHub(), SyntheticBackend(FAST), security=ApiKeyPolicy({"k": "alice"}))
    await gateway.start()
    server = await serve_toy(gateway)
    try:
        yield server.sockets[0].getsockname()[:2]
    finally:
        server.close()
        await server.wait_closed()
        await gateway.aclose()


async def ask(address: tuple[str, int], request: dict[str, Any]) -> list[dict[str, Any]]:
    reader, writer = await asyncio.open_connection(*address)
    try:
        writer.write(json.dumps(request).encode() + b"\n")
        lines = []
        while True:
            line = json.loads(await asyncio.wait_for(reader.readline(), 10))
            lines.append(line)
            if "end" in line or "error" in line:
                return lines
    finally:
        writer.close()


def text_of(lines: list[dict[str, Any]]) -> str:
    return "".join(line["text"] or "" for line in lines if line.get("kind") == "delta")


async def test_a_chat_streams_and_resumes(toy: tuple[str, int]) -> None:
    events = await ask(toy, {"op": "chat", "request": CHAT, "token": "k"})
    assert events[-1] == {"end": True} and events[-2]["kind"] == "done"
    assert text_of(events)
    # Resume after the third event: the rest of the text, none of it twice (the deltas a
    # late reader missed come coalesced), then the same end.
    again = {"op": "subscribe", "stream": events[0]["stream"], "from": events[2]["id"]}
    rest = await ask(toy, {**again, "token": "k"})
    assert rest[-2:] == events[-2:]
    assert text_of(rest) == text_of(events[3:])
    assert text_of(events[:3]) + text_of(rest) == text_of(events)


async def test_refusals_carry_the_gateway_codes(toy: tuple[str, int]) -> None:
    assert (await ask(toy, {"op": "chat", "request": CHAT}))[0]["error"] == "unauthenticated"
    bad_chat = {"op": "chat", "request": {"model": "m"}, "token": "k"}
    assert (await ask(toy, bad_chat))[0]["error"] == "invalid_parameter"
    missing = {"op": "subscribe", "stream": "nope", "token": "k"}
    assert (await ask(toy, missing))[0]["error"] == "stream_not_found"
    bad_token = {"op": "subscribe", "stream": "nope", "from": "x", "token": "k"}
    assert (await ask(toy, bad_token))[0]["error"] == "bad_resume_token"
    assert (await ask(toy, {"op": "dance", "token": "k"}))[0]["error"] == "unknown_op"


def test_the_toy_transport_imports_only_the_service_layer_and_the_core() -> None:
    tree = ast.parse(Path(__file__).with_name("toy_transport.py").read_text())
    airlane = {
        node.module
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("airlane")
    }
    assert airlane == {"airlane.core", "airlane.core.errors", "airlane.gateway"}
