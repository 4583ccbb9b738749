"""`ChatStreamState`: what an OpenAI-format client has received, and what a snapshot adds."""

from __future__ import annotations

import orjson
from hypothesis import given
from hypothesis import strategies as st

from airlane.core import Channel, Event, Folded, Kind
from airlane.wire.openai import ChatStreamState, ChunkFactory


def _snapshot(events: list[Event]) -> Event:
    folded = Folded()
    for seq, event in enumerate(events, start=1):
        event.seq = seq
        folded.fold(event)
    return folded.to_event()


def test_a_snapshot_becomes_only_the_deltas_the_client_lacks() -> None:
    state = ChatStreamState()
    state.apply(Event.delta("Hel"))
    state.apply(Event.delta("think", channel=Channel.REASONING))
    state.apply(Event.tool_call(0, '{"a"', call_id="call_1", name="f"))
    history = [
        Event.delta("Hel"),
        Event.delta("lo"),
        Event.delta("think", channel=Channel.REASONING),
        Event.delta("ing", channel=Channel.REASONING),
        Event.tool_call(0, '{"a"', call_id="call_1", name="f"),
        Event.tool_call(0, ": 1}"),
        Event.tool_call(1, "{}", call_id="call_2", name="g"),
    ]
    caught_up = state.apply(_snapshot(history))
    described = [(e.kind, e.text, e.channel, e.data) for e in caught_up]
    assert described == [
        (Kind.DELTA, "lo", Channel.CONTENT, None),
        (Kind.DELTA, "ing", Channel.REASONING, None),
        (Kind.TOOL_CALL, ": 1}", Channel.CONTENT, {"index": 0}),
        (Kind.TOOL_CALL, "{}", Channel.CONTENT, {"index": 1, "id": "call_2", "name": "g"}),
    ]
    assert state.apply(_snapshot(history)) == []  # nothing new the second time


def test_completion_assembles_text_reasoning_and_tool_calls() -> None:
    state = ChatStreamState()
    for piece in ("a", "b", "c"):
        state.apply(Event.delta(piece))
    state.apply(Event.delta("why", channel=Channel.REASONING))
    state.apply(Event.tool_call(0, '{"x":', call_id="call_1", name="f"))
    state.apply(Event.tool_call(0, " 2}"))
    state.apply(Event.done("tool_calls"))
    completion = state.completion(ChunkFactory("s1", "m", 7))
    message = completion["choices"][0]["message"]
    assert message["content"] == "abc"
    assert message["reasoning_content"] == "why"
    assert message["tool_calls"] == [
        {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"x": 2}'}}
    ]
    assert completion["choices"][0]["finish_reason"] == "tool_calls"


def test_completion_without_reasoning_or_calls() -> None:
    state = ChatStreamState()
    state.apply(Event.delta("only text"))
    message = state.completion(ChunkFactory("s1", "m", 7))["choices"][0]["message"]
    assert message == {"role": "assistant", "content": "only text"}


@given(st.text(), st.text(max_size=20), st.text(max_size=20), st.integers(0, 2**40))
def test_text_chunks_are_the_json_of_their_fields(
    text: str, completion_id: str, model: str, created: int
) -> None:
    factory = ChunkFactory(completion_id, model, created)
    for channel, key in ((Channel.CONTENT, "content"), (Channel.REASONING, "reasoning_content")):
        expected = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": {key: text}, "finish_reason": None}],
        }
        chunk = factory.text(text, channel)
        assert chunk == orjson.dumps(expected)
        assert b"\n" not in chunk and b"\r" not in chunk  # one SSE data line
