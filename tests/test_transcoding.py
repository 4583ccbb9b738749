"""The HTTP JSON API and the Protobuf contract are one model: the JSON bodies the HTTP API
accepts and the events it sends round-trip through the Protobuf types (`json_format`)
unchanged, so the two cannot drift apart (a field added on one side and not the other fails
here).

- a chat request body that `parse_chat_request` accepts -> ``ChatCompletionRequest`` (fields
  the contract does not name go to ``extra``) -> the same body;
- every native event the API can send (`event_to_dict`) -> ``airlane.v1.Event`` -> the native
  form again (`event_dict`).
"""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from airlane.core import Channel, Event, Kind, Lane
from airlane.gateway.chat_request import parse_chat_request
from airlane.v1 import events_pb2, service_pb2
from airlane.wire.event_json import event_from_dict, event_to_dict
from airlane.wire.proto import (
    chat_body,
    chat_request_message,
    event_dict,
    event_message,
    event_to_proto,
)

JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.text(max_size=20)
    | st.floats(allow_nan=False, allow_infinity=False, width=32)
)
JSON = st.recursive(
    JSON_SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
NAMES = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=12)

MESSAGES = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["system", "user", "assistant", "tool"])},
        optional={"content": st.text(max_size=30) | st.none(), "name": NAMES},
    ),
    min_size=1,
    max_size=4,
)

CHAT_BODIES = st.fixed_dictionaries(
    {"model": st.text(min_size=1, max_size=20), "messages": MESSAGES},
    optional={
        "max_tokens": st.integers(1, 4096),
        "temperature": st.floats(0, 2, width=32),
        "seed": st.integers(-(2**53), 2**53),
        "stream": st.booleans(),
        "stream_options": st.fixed_dictionaries({"include_usage": st.booleans()}),
        "tools": st.lists(
            st.fixed_dictionaries(
                {"type": st.just("function"), "function": st.fixed_dictionaries({"name": NAMES})}
            ),
            max_size=2,
        ),
        "tool_choice": st.sampled_from(["none", "auto", "required"]),
        "airlane": st.fixed_dictionaries({"orphan": st.sampled_from(["keep", "grace", "cancel"])}),
        "top_p": st.floats(0, 1, width=32),
        "user": st.text(max_size=10),
        "metadata": st.dictionaries(NAMES, st.text(max_size=8), max_size=2),
    },
)


REPEATED = {
    field.name for field in service_pb2.ChatCompletionRequest.DESCRIPTOR.fields if field.is_repeated
}


def normalise(value: Any) -> Any:
    """JSON numbers compare as numbers (protobuf's Struct stores every number as a double)."""
    return orjson.loads(orjson.dumps(value))


@settings(max_examples=150, deadline=None)
@given(CHAT_BODIES)
def test_chat_requests_round_trip(body: dict[str, Any]) -> None:
    parse_chat_request(body)  # a body the HTTP API accepts
    message = chat_request_message(body)
    again = chat_body(message)
    # Repeated fields have no presence in proto3: an empty "tools" comes back absent (the
    # gateway reads both as "no tools").
    expected = {k: v for k, v in body.items() if not (k in REPEATED and v == [])}
    assert normalise(again) == normalise(expected)
    # ... and the gateway reads the same generation from either.
    assert parse_chat_request(again).generation == parse_chat_request(body).generation


EVENTS = st.one_of(
    st.builds(
        lambda text, channel: Event.delta(text, channel=channel),
        st.text(max_size=20),
        st.sampled_from(Channel),
    ),
    st.builds(
        lambda index, args, call_id, name: Event.tool_call(index, args, call_id=call_id, name=name),
        st.integers(0, 8),
        st.text(max_size=20),
        st.none() | NAMES,
        st.none() | NAMES,
    ),
    st.builds(Event.message, JSON),
    st.builds(lambda fields: Event.status(**fields), st.dictionaries(NAMES, JSON, max_size=3)),
    st.builds(Event.done, st.sampled_from(["stop", "length", "cancelled"])),
    st.builds(lambda message, code: Event.error(message, code=code), st.text(max_size=20), NAMES),
)


@settings(max_examples=200, deadline=None)
@given(EVENTS, st.integers(1, 2**40))
def test_events_round_trip(event: Event, seq: int) -> None:
    event.seq = seq
    native = normalise(event_to_dict(event))
    message = events_pb2.Event.FromString(event_to_proto(event).SerializeToString())
    again = event_dict(message)
    again["seq"] = message.seq
    again.pop("lane", None)  # the native JSON of an event leaves its lane implicit
    assert normalise(again) == native


@settings(max_examples=100, deadline=None)
@given(EVENTS)
def test_published_events_round_trip(event: Event) -> None:
    """What a client publishes over gRPC is the event it would publish over HTTP."""
    if event.kind not in (Kind.DELTA, Kind.TOOL_CALL, Kind.MESSAGE, Kind.STATUS, Kind.DONE):
        return
    native = {k: v for k, v in event_to_dict(event).items() if k != "seq"}
    over_http = event_from_dict(normalise(native))
    over_grpc = event_from_dict(event_dict(event_message(normalise(native))))
    assert event_to_dict(over_grpc) == event_to_dict(over_http)
    assert over_grpc.lane in (Lane.CONTROL, Lane.INTERACTIVE, Lane.BULK)


def test_whole_numbers_stay_integers() -> None:
    """``google.protobuf.Value`` carries doubles; integral ones come back as ints."""
    message = event_message({"kind": "message", "payload": {"step": 1, "ratio": 0.5, "n": [2]}})
    payload = event_dict(message)["payload"]
    assert payload == {"step": 1, "ratio": 0.5, "n": [2]}
    assert type(payload["step"]) is int and type(payload["n"][0]) is int
