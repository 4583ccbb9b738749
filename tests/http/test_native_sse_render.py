"""`render_native_sse`: one SSE event per stream event, whatever its payload holds."""

from __future__ import annotations

import orjson

from airlane.core import Event, Kind
from airlane.transports.http.streams import render_native_sse
from airlane.wire.event_json import event_to_dict, event_to_json
from airlane.wire.sse import SSEDecoder


def _decode(frames: bytes) -> list[tuple[str, object]]:
    return [(m.id, orjson.loads(m.data)) for m in SSEDecoder().feed(frames)]


def test_each_event_is_one_frame_with_its_resume_token() -> None:
    delta = Event.delta("line one\nline two")
    delta.seq = 7
    assert _decode(render_native_sse("ep", [delta])) == [
        ("ep:7", {"seq": 7, "kind": "delta", "channel": "content", "text": "line one\nline two"})
    ]


def test_a_published_payload_with_line_breaks_stays_one_event() -> None:
    # A payload published as raw JSON is spliced in as it came, line breaks and all.
    message = Event(Kind.MESSAGE, raw=b'{\n  "a": [1,\r\n 2]\n}', seq=3)
    decoded = _decode(render_native_sse("ep", [message]))
    assert decoded == [("ep:3", {"seq": 3, "kind": "message", "payload": {"a": [1, 2]}})]


def test_a_published_payload_on_one_line_is_what_orjson_makes_of_the_event() -> None:
    # One-line payloads (the common case) take a shorter path: the same bytes.
    message = Event(Kind.MESSAGE, raw=b'{"a":[1,2],"b":"x"}', seq=11)
    other = Event(Kind.MESSAGE, raw=b'{"a":[1,2],"b":"x"}', seq=11)
    assert event_to_json(message) == orjson.dumps(event_to_dict(other))
    frames = render_native_sse("ep", [message])
    assert (
        frames == b'id: ep:11\ndata: {"seq":11,"kind":"message","payload":{"a":[1,2],"b":"x"}}\n\n'
    )
    assert _decode(frames) == [
        ("ep:11", {"seq": 11, "kind": "message", "payload": {"a": [1, 2], "b": "x"}})
    ]
