"""Every JSON body the HTTP API sends is an ``airlane.v1`` message: it parses into its type
with unknown fields refused (so a field added to the API and not to the contract fails here)
and prints back to the same JSON (null and absent are the same thing in these bodies).
Bodies come from a real gateway process."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
from google.protobuf import json_format
from google.protobuf.message import Message

from airlane.v1 import http_api_pb2
from tests.servers import ServerProcess


def without_nulls(value: Any) -> Any:
    """Null and absent are one thing in these bodies; so are [] and absent (proto3 has no
    presence for repeated fields)."""
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None and v != []}
    if isinstance(value, list):
        return [without_nulls(v) for v in value]
    return value


def assert_round_trips(body: Any, message_class: type[Message]) -> None:
    message = json_format.ParseDict(body, message_class(), ignore_unknown_fields=False)
    again = json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    normal = orjson.loads(orjson.dumps(without_nulls(body)))
    assert orjson.loads(orjson.dumps(without_nulls(again))) == normal


CHAT = {"model": "airlane-synthetic", "messages": [{"role": "user", "content": "Hi"}]}
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
VARIANTS = [
    {**CHAT, "max_tokens": 12},
    {**CHAT, "max_tokens": 40, "airlane": {"reasoning": True}},
    {**CHAT, "tools": TOOLS, "tool_choice": "required"},
]


def sse_chunks(text: str) -> list[dict[str, Any]]:
    datas = [line[len("data: ") :] for line in text.splitlines() if line.startswith("data: ")]
    return [orjson.loads(d) for d in datas if d != "[DONE]"]


def test_chat_completion_bodies(server: ServerProcess) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as http:
        for body in VARIANTS:
            completion = http.post("/v1/chat/completions", json=body)
            assert completion.status_code == 200, completion.text
            assert_round_trips(completion.json(), http_api_pb2.ChatCompletion)
            streamed = http.post(
                "/v1/chat/completions",
                json={**body, "stream": True, "stream_options": {"include_usage": True}},
            )
            chunks = sse_chunks(streamed.text)
            assert len(chunks) > 2
            for chunk in chunks:
                assert_round_trips(chunk, http_api_pb2.ChatCompletionChunk)


def test_errors_models_and_health(server: ServerProcess) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as http:
        refused = http.post("/v1/chat/completions", json={"model": "m", "messages": []})
        assert refused.status_code == 400
        assert_round_trips(refused.json(), http_api_pb2.ErrorBody)
        missing = http.get("/v1/streams/no-such-stream")
        assert_round_trips(missing.json(), http_api_pb2.ErrorBody)
        assert_round_trips(http.get("/v1/models").json(), http_api_pb2.ModelList)
        assert_round_trips(http.get("/healthz").json(), http_api_pb2.Health)


def test_streams_api_bodies(server: ServerProcess) -> None:
    with httpx.Client(base_url=server.url, timeout=30) as http:
        generated = http.post("/v1/streams", json={**CHAT, "max_tokens": 8})
        assert generated.status_code == 201
        assert_round_trips(generated.json(), http_api_pb2.StreamCreated)
        create = {"name": "transcoding/named", "exist_ok": True}
        assert_round_trips(create, http_api_pb2.CreateNamedStream)  # a request body, too
        named = http.post("/v1/streams", json=create)
        assert_round_trips(named.json(), http_api_pb2.StreamCreated)
        published = http.post(
            "/v1/streams/transcoding/named/events",
            json={"events": [{"kind": "message", "payload": {"a": 1}}, {"kind": "message"}]},
        )
        assert published.status_code == 200
        assert_round_trips(published.json(), http_api_pb2.PublishedEvents)
        cancelled = http.post(f"/v1/streams/{generated.json()['id']}/cancel")
        assert_round_trips(cancelled.json(), http_api_pb2.CancelledStream)
