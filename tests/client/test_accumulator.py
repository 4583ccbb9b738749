"""`TextAccumulator`, `deltas_from_event` and `chat_deltas_from_chunk`, without sockets."""

from __future__ import annotations

import pytest

from airlane.client import ChatDelta, ProtocolViolation, StreamEvent, StreamFailed, TextAccumulator
from airlane.client.chat import deltas_from_event
from airlane.client.events import chat_deltas_from_chunk


def ev(seq: int, kind: str, epoch: str = "e1", **data: object) -> StreamEvent:
    return StreamEvent(seq, kind, {"seq": seq, "kind": kind, **data}, f"{epoch}:{seq}")


def test_deltas_append_per_channel() -> None:
    state = TextAccumulator()
    state.apply(ev(1, "delta", channel="reasoning", text="think "))
    state.apply(ev(2, "delta", text="Hel"))
    state.apply(ev(3, "delta", text="lo"))
    state.apply(ev(4, "done", finish_reason="stop", usage={"completion_tokens": 3}))
    assert (state.content, state.reasoning) == ("Hello", "think ")
    assert state.ended and state.finish_reason == "stop"
    assert state.usage == {"completion_tokens": 3}


def test_a_snapshot_replaces_the_state() -> None:
    state = TextAccumulator()
    state.apply(ev(1, "delta", text="stale text"))
    snapshot = ev(
        7, "snapshot", epoch="e2", text={"content": "Hello", "reasoning": ""}, tool_calls=[]
    )
    assert state.apply(snapshot)
    state.apply(ev(8, "delta", epoch="e2", text=" world"))
    assert state.content == "Hello world"


def test_repeated_events_are_ignored() -> None:
    state = TextAccumulator()
    assert state.apply(ev(1, "delta", text="a"))
    assert state.apply(ev(2, "delta", text="b"))
    assert not state.apply(ev(2, "delta", text="b"))
    assert not state.apply(ev(1, "delta", text="a"))
    assert state.content == "ab"


def test_tool_calls_accumulate_by_index() -> None:
    state = TextAccumulator()
    state.apply(ev(1, "tool_call", index=0, id="call_1", name="f", arguments='{"a"'))
    state.apply(ev(2, "tool_call", index=0, arguments=": 1}"))
    assert state.tool_calls == [{"index": 0, "id": "call_1", "name": "f", "arguments": '{"a": 1}'}]


def test_a_snapshot_becomes_only_the_unseen_text() -> None:
    state = TextAccumulator()
    deltas_from_event(ev(1, "delta", text="Hello"), state)
    snapshot = ev(5, "snapshot", text={"content": "Hello world", "reasoning": ""}, tool_calls=[])
    pieces = deltas_from_event(snapshot, state)
    assert [(p.text, p.replace, p.resumed) for p in pieces] == [(" world", False, True)]


def test_a_snapshot_that_does_not_extend_replaces() -> None:
    state = TextAccumulator()
    deltas_from_event(ev(1, "delta", text="Hello"), state)
    snapshot = ev(3, "snapshot", epoch="e9", text={"content": "Other", "reasoning": ""})
    [piece] = deltas_from_event(snapshot, state)
    assert (piece.text, piece.replace) == ("Other", True)
    state2 = TextAccumulator()
    state2.apply_delta(ChatDelta("Hello"))
    state2.apply_delta(piece)
    assert state2.content == "Other"


def test_an_error_event_raises() -> None:
    with pytest.raises(StreamFailed) as caught:
        deltas_from_event(ev(2, "error", message="boom", code="backend_error"), TextAccumulator())
    assert caught.value.code == "backend_error"


def test_openai_chunks_become_pieces() -> None:
    role = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
    assert chat_deltas_from_chunk(role, "e:0") == []
    both = {"choices": [{"delta": {"reasoning_content": "r", "content": "c"}}]}
    assert [(p.channel, p.text) for p in chat_deltas_from_chunk(both)] == [
        ("reasoning", "r"),
        ("content", "c"),
    ]
    finish = {"choices": [{"delta": {}, "finish_reason": "stop"}], "usage": {"total_tokens": 3}}
    pieces = chat_deltas_from_chunk(finish, "e:9")
    assert pieces[0].finish_reason == "stop" and pieces[1].usage == {"total_tokens": 3}
    with pytest.raises(ProtocolViolation):
        chat_deltas_from_chunk(["not", "a", "chunk"])


def test_malformed_events_are_the_peers_fault() -> None:
    for raw in (b"{", b"[]", b'{"seq": "1", "kind": "delta"}'):
        with pytest.raises(ProtocolViolation):
            StreamEvent.from_json(raw)
