"""`ChunkTranslator`'s text-chunk template: a stream's usual text chunk, matched by its bytes
around the text and parsed as that one string, gives exactly the events the full parse gives.

Each stream is translated twice: as shipped, and by a translator that never learns a template
(the full parse for every chunk, the behaviour before the template existed)."""

from __future__ import annotations

import json
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from airlane.backends.openai_chunks import ChunkTranslator
from airlane.core import Event

HEAD = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}


def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
    return {**HEAD, **extra, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


def sse(payload: Any, *, spaced: bool = False) -> bytes:
    """One SSE event, as orjson writes JSON or (``spaced``) as Python's json module does."""
    if isinstance(payload, str):
        return b"data: %b\n\n" % payload.encode()
    body = json.dumps(payload).encode() if spaced else orjson.dumps(payload)
    return b"data: %b\n\n" % body


def translate(reads: list[bytes], *, templates: bool = True) -> tuple[list[Any], ChunkTranslator]:
    translator = ChunkTranslator()
    if not templates:
        translator._template_tries = 0
    events: list[Event] = []
    for read in reads:
        events += translator.receive_data(read)
    events += translator.end_of_stream()
    return [(e.kind, e.channel, e.text, e.tokens, e.data) for e in events], translator


def same_as_full_parse(reads: list[bytes]) -> ChunkTranslator:
    got, translator = translate(reads)
    expected, _ = translate(reads, templates=False)
    assert got == expected
    return translator


TEXTS = ["Hello", ' say "hi"', "back\\slash \\", "café 日本 🚀", "\n\t", '"content":"x"', " "]


def test_the_usual_stream_learns_its_template_and_keeps_every_event() -> None:
    reads = [sse(chunk({"role": "assistant", "content": ""}))]
    reads += [sse(chunk({"content": text})) for text in TEXTS]
    reads += [
        sse(chunk({}, "length")),
        sse({**HEAD, "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 7}}),
        sse("[DONE]"),
    ]
    translator = same_as_full_parse(reads)
    assert translator._template is not None  # the shortcut is taken, not only correct


def test_python_json_with_spaces_learns_too() -> None:
    reads = [sse(chunk({"content": t}), spaced=True) for t in TEXTS] + [sse("[DONE]")]
    assert same_as_full_parse(reads)._template is not None


def test_an_empty_text_in_the_template_shape_gives_no_event() -> None:
    reads = [sse(chunk({"content": "a"})), sse(chunk({"content": ""})), sse("[DONE]")]
    got, _ = translate(reads)
    assert [text for _, _, text, _, _ in got] == ["a", ""]  # the delta, then done's empty text
    same_as_full_parse(reads)


def test_chunks_that_differ_beyond_their_text_stop_the_learning() -> None:
    # A per-chunk nonce (as some hosted APIs add): each chunk's template fits that chunk only,
    # and after a few tries the translator stops learning (and parsing twice).
    reads = [sse(chunk({"content": t}, nonce=f"n{i}")) for i, t in enumerate(TEXTS * 3)]
    translator = same_as_full_parse([*reads, sse("[DONE]")])
    assert translator._template_tries == 0


def test_a_change_of_shape_mid_stream_is_learnt_again() -> None:
    first = [sse(chunk({"content": t})) for t in TEXTS]
    second = [sse(chunk({"content": t}, system_fingerprint="fp")) for t in TEXTS]
    translator = same_as_full_parse([*first, *second, sse("[DONE]")])
    template = translator._template
    assert template is not None and b"fp" in template._head


def test_a_content_key_elsewhere_is_not_taken_for_the_text() -> None:
    reads = [sse(chunk({"content": t}, content="meta")) for t in TEXTS] + [sse("[DONE]")]
    assert same_as_full_parse(reads)._template is None


def test_other_events_in_the_template_shape_are_not_mistaken_for_text() -> None:
    reads = [
        sse(chunk({"content": "a"})),
        sse(chunk({"content": 5})),  # the slot holds a number: the full parse ignores it
        sse(chunk({"content": ["x"]})),
        sse(chunk({"content": None})),
        sse(chunk({"content": "b", "reasoning_content": "r"})),
        sse(chunk({"content": "c"}, "stop")),  # a finish reason, kept for the done event
        sse(chunk({"content": "d"})),
        sse("[DONE]"),
    ]
    got, _ = translate(reads)
    assert got[-1][4] is not None and got[-1][4]["finish_reason"] == "stop"
    same_as_full_parse(reads)


def test_a_template_from_a_chunk_with_a_finish_reason_is_never_learnt() -> None:
    reads = [sse(chunk({"content": "a"}, "length")), sse(chunk({"content": "b"}, "length"))]
    _, translator = translate(reads)
    assert translator._template is None


TEXT = st.text(st.characters(codec="utf-8"), max_size=20)
SHAPE = st.sampled_from(["plain", "spaced", "fingerprint", "finish", "reasoning", "role", "odd"])


def shaped(shape: str, text: str) -> bytes:
    if shape == "spaced":
        return sse(chunk({"content": text}), spaced=True)
    if shape == "fingerprint":
        return sse(chunk({"content": text}, system_fingerprint="fp"))
    if shape == "finish":
        return sse(chunk({"content": text}, "length"))
    if shape == "reasoning":
        return sse(chunk({"reasoning_content": text, "content": text}))
    if shape == "role":
        return sse(chunk({"role": "assistant", "content": text}))
    if shape == "odd":  # the text's slot holding something else
        return sse(chunk({"content": {"text": text}}))
    return sse(chunk({"content": text}))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(SHAPE, TEXT), max_size=25))
def test_any_mix_of_shapes_gives_what_the_full_parse_gives(
    stream: list[tuple[str, str]],
) -> None:
    same_as_full_parse([shaped(shape, text) for shape, text in stream] + [sse("[DONE]")])


def test_more_than_one_value_in_the_texts_slot_goes_the_long_way() -> None:
    # Bytes that fit the template's head and tail around more than one JSON string: a delta
    # with another field after the text. Parsed as one string they fail, so the full parse
    # runs and sees the reasoning too.
    template = sse(chunk({"content": "a"}))
    head, tail = template.split(b'"a"')
    crafted = [
        head + b'"b","reasoning_content":"r"' + tail,
        head + b'"c"  ' + tail,
        head + b'"d",' + tail,  # not JSON at all
    ]
    got, translator = translate([template, *crafted, sse("[DONE]")])
    assert translator._template is not None
    assert [(channel.value, text) for _, channel, text, _, _ in got[:-1]] == [
        ("content", "a"),
        ("reasoning", "r"),
        ("content", "b"),
        ("content", "c"),
    ]
    assert got[-1][0].value == "error"  # the malformed chunk ends the stream
    same_as_full_parse([template, *crafted, sse("[DONE]")])
