"""`TextBuffer` and the accumulators built on it: appends stay linear, reads stay exact."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from airlane.client.accumulator import TextAccumulator
from airlane.client.events import StreamEvent
from airlane.core import Channel, Event, Folded
from airlane.core.text import TextBuffer


def test_empty_buffer_reads_as_empty_text() -> None:
    buffer = TextBuffer()
    assert str(buffer) == "" and len(buffer) == 0 and not buffer


def test_appends_join_in_order_and_count_characters() -> None:
    buffer = TextBuffer("héllo")
    for piece in (", ", "", "wörld", "!"):
        buffer.append(piece)
    assert str(buffer) == "héllo, wörld!"
    assert len(buffer) == len("héllo, wörld!")
    assert repr(buffer) == "TextBuffer('héllo, wörld!')"


def test_a_read_joins_once_and_appends_after_it_are_kept() -> None:
    buffer = TextBuffer()
    for _ in range(1000):
        buffer.append("ab")
    first = str(buffer)
    assert str(buffer) is first  # the join was kept, not redone
    buffer.append("c")
    assert str(buffer) == first + "c"


@given(st.lists(st.text(max_size=8), max_size=40))
def test_buffer_equals_plain_concatenation(pieces: list[str]) -> None:
    buffer = TextBuffer()
    for index, piece in enumerate(pieces):
        buffer.append(piece)
        if index % 7 == 3:
            str(buffer)  # reads in between do not change the outcome
    assert str(buffer) == "".join(pieces)
    assert len(buffer) == len("".join(pieces))


def _at(event: Event, seq: int) -> Event:
    event.seq = seq
    return event


def test_folded_tool_call_arguments_grow_and_copy_independently() -> None:
    folded = Folded()
    folded.fold(_at(Event.tool_call(0, '{"a"', call_id="call_1", name="f"), 1))
    folded.fold(_at(Event.tool_call(0, ": 1}"), 2))
    folded.fold(_at(Event.delta("hi"), 3))
    assert folded.tool_calls() == [
        {"index": 0, "arguments": '{"a": 1}', "id": "call_1", "name": "f"}
    ]
    copy = folded.extended([_at(Event.tool_call(0, " "), 4), _at(Event.delta("!"), 5)])
    assert copy.tool_calls()[0]["arguments"] == '{"a": 1} '
    assert copy.text(Channel.CONTENT) == "hi!"
    assert folded.tool_calls()[0]["arguments"] == '{"a": 1}'  # the original is untouched
    assert folded.text(Channel.CONTENT) == "hi"
    again = Folded.from_event(folded.to_event())
    again.fold(_at(Event.tool_call(0, "x"), 6))
    assert again.tool_calls()[0]["arguments"] == '{"a": 1}x'


def test_client_accumulator_tool_call_arguments() -> None:
    state = TextAccumulator()
    for seq, piece in enumerate(('{"q": ', '"long', ' text"}'), start=1):
        data: dict[str, object] = {"index": 0, "arguments": piece}
        if seq == 1:
            data |= {"id": "call_9", "name": "search"}
        state.apply(StreamEvent(seq, "tool_call", data))
    assert state.tool_calls == [
        {"index": 0, "id": "call_9", "name": "search", "arguments": '{"q": "long text"}'}
    ]
