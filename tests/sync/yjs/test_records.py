"""The room records kept in the hub, and the public names of `airlane.sync.yjs`."""

from __future__ import annotations

import orjson
import pytest

import airlane.sync.yjs as yjs
from airlane.core import Event
from airlane.sync.yjs.records import (
    AwarenessQuery,
    AwarenessRecord,
    CorruptRecord,
    Record,
    StateRecord,
    UpdateRecord,
    awareness_stream_id,
    decode_record,
    doc_stream_id,
    record_event,
)


@pytest.mark.parametrize(
    "record",
    [
        UpdateRecord("abc", b"\x01\x02\x00"),
        StateRecord("abc", b"\x00\x00", 17),
        AwarenessRecord("abc", b"\x00"),
        AwarenessQuery("abc"),
    ],
)
def test_roundtrip(record: Record) -> None:
    event = record_event(record)
    assert orjson.loads(orjson.dumps(event.data))  # JSON-compatible, as every hub needs
    assert decode_record(event) == record
    # Published by someone else as pre-encoded JSON: the same record.
    assert event.data is not None
    raw = Event.message(raw=orjson.dumps(event.data["payload"]))
    assert decode_record(raw) == record


@pytest.mark.parametrize(
    ("event", "words"),
    [
        (Event.status(x=1), "not a room record"),
        (Event.message({"hello": 1}), "not a version 1"),
        (Event.message({"yjs": 1, "type": "update"}), "no origin"),
        (Event.message({"yjs": 1, "type": "update", "origin": "o"}), "no 'data'"),
        (Event.message({"yjs": 1, "type": "update", "origin": "o", "data": "!!"}), "not base64"),
        (Event.message({"yjs": 1, "type": "state", "origin": "o", "data": ""}), "covers"),
        (Event.message({"yjs": 1, "type": "nope", "origin": "o"}), "unknown type"),
        (Event.message(raw=b"{not json"), "not JSON"),
    ],
)
def test_corrupt(event: Event, words: str) -> None:
    with pytest.raises(CorruptRecord, match=words):
        decode_record(event)


def test_stream_ids() -> None:
    assert doc_stream_id("a/b") == "yjs/a/b"
    assert awareness_stream_id("a/b") == "yjs-awareness/a/b"


def test_exports() -> None:
    assert sorted(yjs.__all__) == sorted(
        [
            "ROOM_NAME_PATTERN",
            "AwarenessTooLarge",
            "DocumentTooLarge",
            "InvalidRoomName",
            "InvalidUpdate",
            "MalformedMessage",
            "ReadOnlyPeer",
            "RoomFull",
            "RoomUnavailable",
            "RoomsClosed",
            "TooManyRooms",
            "UnknownMessage",
            "YPeer",
            "YProtocolError",
            "YRoom",
            "YRooms",
            "YRoomsConfig",
            "YjsError",
            "valid_room_name",
        ]
    )
    for name in yjs.__all__:
        assert getattr(yjs, name) is not None
