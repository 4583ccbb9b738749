"""The pure parts: records, argument checks, the JetStream codec, the group state machine."""

from __future__ import annotations

import base64
import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airlane.eventlog import (
    EventTooLarge,
    InvalidLogName,
    InvalidRequest,
    LogLimits,
    MemoryEventLog,
    MemoryEventLogConfig,
    NewEvent,
    Record,
    is_json_content_type,
)
from airlane.eventlog.base import GroupSettings
from airlane.eventlog.checks import check_name
from airlane.eventlog.memory_group import GroupState
from airlane.eventlog.memory_log import LogState
from airlane.eventlog.nats_codec import (
    decode_record,
    format_time_ns,
    message_headers,
    name_from_token,
    name_token,
    parse_ack_reply,
    parse_time_ns,
)

NAME = re.compile(r"[A-Za-z0-9._-]{1,200}")
names = st.from_regex(NAME, fullmatch=True)


def test_to_dict_parses_json_and_base64_encodes_the_rest():
    record = Record("log", 3, 7, "reward.v1", b'{"r": 1}', headers={"k": "v"})
    assert record.to_dict() == {
        "log": "log",
        "seq": 3,
        "time_ns": 7,
        "type": "reward.v1",
        "content_type": "application/json",
        "headers": {"k": "v"},
        "data": {"r": 1},
    }
    assert record.json() == {"r": 1}
    binary = Record("log", 1, 1, "frame.v1", b"\x00\xff", "application/octet-stream")
    assert base64.b64decode(binary.to_dict()["data_base64"]) == b"\x00\xff"
    broken = Record("log", 1, 1, "x.v1", b"{not json")
    assert "data" not in broken.to_dict() and broken.to_dict()["data_base64"]


def test_json_content_types():
    for yes in (
        "application/json",
        "Application/JSON; charset=utf-8",
        "application/cloudevents+json",
    ):
        assert is_json_content_type(yes)
    for no in ("text/plain", "application/jsonx", "application/octet-stream"):
        assert not is_json_content_type(no)


def test_a_new_event_checks_itself_and_copies_its_headers():
    headers = {"a": "1"}
    event = NewEvent("t.v1", b"", headers=headers)
    headers["a"] = "2"
    assert event.headers == {"a": "1"}
    for bad in (
        {"type": "a b"},
        {"type": "x" * 201},
        {"data": "str"},
        {"content_type": ""},
        {"content_type": "text/plain "},
        {"headers": {"": "v"}},
        {"headers": {f"h{i}": "" for i in range(65)}},
        {"idempotency_key": ""},
    ):
        fields = {"type": "t.v1", "data": b"", **bad}
        with pytest.raises(InvalidRequest):
            NewEvent(**fields)


async def test_the_size_bound_counts_headers_too():
    log = MemoryEventLog(MemoryEventLogConfig(max_event_bytes=100))
    await log.create_log("a")
    with pytest.raises(EventTooLarge):
        await log.append("a", "t", b"x" * 50, headers={"h": "y" * 40})


@given(names)
def test_every_valid_name_is_accepted(name):
    assert check_name(name) == name


@given(st.text(max_size=210))
def test_a_name_is_refused_exactly_when_it_is_not_valid(text):
    if NAME.fullmatch(text):
        assert check_name(text) == text
    else:
        with pytest.raises(InvalidLogName):
            check_name(text)


@given(names)
def test_name_tokens_round_trip_and_are_single_subject_tokens(name):
    token = name_token(name)
    assert name_from_token(token) == name
    assert not set(token) & set(".*> \t\r\n/\\")


headers_st = st.dictionaries(st.text(min_size=1, max_size=20), st.text(max_size=40), max_size=8)


@given(
    type=st.from_regex(r"[!-~]{1,40}", fullmatch=True),
    data=st.binary(max_size=64),
    headers=headers_st,
    key=st.none() | st.from_regex(r"[!-~]{1,40}", fullmatch=True),
)
def test_event_metadata_survives_nats_headers(type, data, headers, key):
    event = NewEvent(type, data, "text/plain; charset=utf-8", headers, key)
    wire = message_headers(event)
    # What a MIME-style header parser keeps intact: one line, no outer whitespace, ASCII.
    for value in wire.values():
        assert value.isascii() and value == value.strip() and "\r" not in value
        assert "\n" not in value
    if key is not None:
        assert wire["Nats-Msg-Id"] == f"k:{key}"
    record = decode_record("log", 4, 9, wire, data)
    assert (record.type, record.data, record.headers) == (type, data, headers)
    assert record.content_type == "text/plain; charset=utf-8"


def test_appends_without_a_key_still_carry_distinct_message_ids():
    event = NewEvent("t.v1", b"")
    assert message_headers(event)["Nats-Msg-Id"] != message_headers(event)["Nats-Msg-Id"]


@given(st.integers(0, 2**62))
def test_times_round_trip_with_nanoseconds(time_ns):
    assert parse_time_ns(format_time_ns(time_ns)) == time_ns


def test_server_timestamps_parse():
    assert parse_time_ns("1970-01-01T00:00:01Z") == 10**9
    assert parse_time_ns("2026-11-30T04:50:33.4547988Z") % 10**9 == 454_798_800


def test_ack_reply_subjects_in_both_layouts():
    assert parse_ack_reply("$JS.ACK.S.c.2.15.9.1796014233454798839.0") == (
        15,
        2,
        1796014233454798839,
    )
    assert parse_ack_reply("$JS.ACK.dom.hash.S.c.3.16.9.1796014233454798839.0.tok") == (
        16,
        3,
        1796014233454798839,
    )
    with pytest.raises(ValueError):
        parse_ack_reply("_INBOX.abc")


# Invariant of the group state machine, under any interleaving of appends, fetches, acks,
# naks and the passing of time: a record is never handed out again before its deadline
# (unless nakked), never after it was acked, never more than max_deliver times; and every
# record is handed out eventually.
steps = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 3)),
        st.tuples(st.just("take"), st.integers(1, 4)),
        st.tuples(st.just("ack"), st.integers(0, 5)),
        st.tuples(st.just("nak"), st.integers(0, 5)),
        st.tuples(st.just("wait"), st.sampled_from([0.1, 0.5, 1.1])),
    ),
    max_size=40,
)


@settings(max_examples=150)
@given(steps=steps, max_deliver=st.none() | st.integers(1, 3))
def test_group_state_hands_out_each_record_to_one_member_at_a_time(steps, max_deliver):
    log = LogState("l", LogLimits(), dedup_window_ns=10**9, max_keys=10)
    group = GroupState("l", "g", GroupSettings(1.0, max_deliver), 1, max_ack_pending=5)
    now = 0.0
    held: dict[int, tuple[int, float]] = {}  # seq -> (deliveries, deadline) as handed out
    acked: set[int] = set()
    counts: dict[int, int] = {}
    nakked: set[int] = set()
    for step in steps:
        if step[0] == "append":
            log.append([NewEvent("t.v1", b"") for _ in range(step[1])], 0)
        elif step[0] == "take":
            for record, deliveries in group.take(log, step[1], now):
                seq = record.seq
                assert seq not in acked
                if seq in held and seq not in nakked:
                    assert now >= held[seq][1]
                counts[seq] = counts.get(seq, 0) + 1
                assert deliveries == counts[seq]
                assert max_deliver is None or deliveries <= max_deliver
                held[seq] = (deliveries, now + 1.0)
                nakked.discard(seq)
        elif step[0] in ("ack", "nak") and held:
            seq = sorted(held)[step[1] % len(held)]
            if step[0] == "ack":
                group.ack(seq)
                acked.add(seq)
                del held[seq]
            else:
                group.nak(seq, held[seq][0], None, now)
                nakked.add(seq)
        elif step[0] == "wait":
            now += step[1]
    # Drain: everything not acked is handed out until acked or given up.
    for _ in range(10):
        now += 2.0
        for record, _deliveries in group.take(log, 100, now):
            counts[record.seq] = counts.get(record.seq, 0) + 1
            group.ack(record.seq)
    assert set(counts) == set(range(1, log.last_seq + 1))


def test_headers_json_is_compact_ascii():
    wire = message_headers(NewEvent("t.v1", b"", headers={"é": "ü"}))
    assert json.loads(wire["Airlane-Headers"]) == {"é": "ü"}
