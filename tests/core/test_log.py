"""Unit tests of the stream log: coalescing, retention, usage, cancellation, positions."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airlane.core import (
    BadResumeToken,
    Channel,
    Event,
    Folded,
    Kind,
    Lane,
    LatencyHistogram,
    OrphanMode,
    OrphanPolicy,
    OrphanTracker,
    Position,
    ResumeOutOfRange,
    Retention,
    StreamClosed,
    StreamLog,
    valid_stream_id,
)

MS = 1_000_000


def make_log(**retention: object) -> StreamLog:
    return StreamLog("chat-1", "ep", now_ns=0, retention=Retention(**retention))  # type: ignore[arg-type]


def test_append_assigns_consecutive_seq_and_time():
    log = make_log()
    events = [log.append(Event.delta(t), 5 * MS) for t in "abc"]
    assert [e.seq for e in events] == [1, 2, 3]
    assert all(e.ts_ns == 5 * MS for e in events)
    assert log.last_seq == 3


def test_lagging_reader_gets_consecutive_deltas_coalesced_but_never_across_other_kinds():
    log = make_log()
    for event in [
        Event.delta("Hel"),
        Event.delta("lo"),
        Event.delta("hmm", channel=Channel.REASONING),
        Event.tool_call(0, '{"a"', call_id="c1", name="f"),
        Event.tool_call(0, ":1}"),
        Event.delta(" world"),
        Event.done(),
    ]:
        log.append(event, 0)
    frames = log.read(log.cursor("r"), limit=100)
    assert [(f.kind, f.text, f.seq) for f in frames] == [
        (Kind.DELTA, "Hello", 2),
        (Kind.DELTA, "hmm", 3),
        (Kind.TOOL_CALL, '{"a"', 4),
        (Kind.TOOL_CALL, ":1}", 5),
        (Kind.DELTA, " world", 6),
        (Kind.DONE, "", 7),
    ]
    assert frames[0].tokens == 2


def test_a_reader_that_keeps_deltas_apart_gets_each_with_its_own_seq():
    log = make_log()
    for text in ("Hel", "lo", " wor", "ld"):
        log.append(Event.delta(text), 0)
    # Resumed after "Hel": a consumer that has "lo" (seq 2) skips that copy by its seq, where
    # a merged "lo wor" carrying seq 3 would repeat it.
    cursor = log.cursor("forward", Position("ep", 1))
    cursor.merge_deltas = False
    assert [(f.text, f.seq) for f in log.read(cursor, limit=100)] == [
        ("lo", 2),
        (" wor", 3),
        ("ld", 4),
    ]
    merged = log.read(log.cursor("late", Position("ep", 1)), limit=100)
    assert [(f.text, f.seq) for f in merged] == [("lo world", 4)]


def test_a_reader_that_keeps_up_gets_the_stored_event_so_encodings_are_shared():
    log = make_log()
    stored = log.append(Event.delta("x"), 0)
    a, b = log.cursor("a"), log.cursor("b")
    assert log.read(a)[0] is stored
    assert log.read(b)[0] is stored


def test_coalescing_is_bounded():
    log = StreamLog("s", "ep", now_ns=0, max_coalesce_chars=10)
    for _ in range(10):
        log.append(Event.delta("abcd"), 0)
    frames = log.read(log.cursor("r"), limit=100)
    assert [len(f.text) for f in frames] == [8, 8, 8, 8, 8]


def test_count_retention_folds_old_deltas_into_a_snapshot():
    log = make_log(max_events=2)
    for text in ["a", "b", "c", "d"]:
        log.append(Event.delta(text), 0)
    assert log.retained == 2 and log.first_retained_seq == 3
    frames = log.read(log.cursor("r", Position("ep", 1)), limit=10, coalesce=False)
    assert frames[0].kind is Kind.SNAPSHOT
    assert frames[0].data is not None and frames[0].data["text"]["content"] == "ab"
    assert [f.text for f in frames[1:]] == ["c", "d"]


def test_ttl_and_byte_retention():
    log = make_log(ttl_s=1.0)
    log.append(Event.delta("old"), 0)
    log.append(Event.delta("new"), 2000 * MS)
    assert log.retained == 1 and log.folded.text(Channel.CONTENT) == "old"
    by_bytes = make_log(max_bytes=300)
    for _ in range(5):
        by_bytes.append(Event.delta("x" * 100), 0)
    assert by_bytes.retained_bytes <= 300


def test_whole_stream_snapshot_includes_retained_and_folded_state():
    log = make_log(max_events=2)
    for text in ["a", "b", "c"]:
        log.append(Event.delta(text), 0)
    log.append(Event.tool_call(0, "{}", call_id="c", name="f"), 0)
    snap = log.snapshot()
    assert snap.seq == 4 and snap.data is not None
    assert snap.data["text"]["content"] == "abc"
    assert snap.data["tool_calls"] == [{"index": 0, "id": "c", "name": "f", "arguments": "{}"}]


def test_terminal_event_carries_usage_per_reader():
    log = make_log()
    alice = log.cursor("alice")  # there from the start: everything reaches her live
    log.append(Event.delta("hi", tokens=2), 10 * MS)
    log.append(Event.usage(prompt_tokens=5, completion_tokens=2), 11 * MS)
    log.append(Event.done(), 12 * MS)
    frames = log.read(alice)
    done = frames[-1]
    assert done.kind is Kind.DONE and done.data is not None
    usage = done.data["usage"]
    assert usage["prompt_tokens"] == 5 and usage["completion_tokens"] == 2
    assert usage["time_to_first_token_ms"] == 10.0
    assert usage["subscriber"] == "alice" and usage["subscriber_tokens"] == 2
    assert usage["delivered_tokens"] == {"alice": 2} and usage["replayed_tokens"] == {}
    # Bob comes once it has ended: all he reads is history, replayed, and no latency.
    bob = log.cursor("bob")
    frames = log.read(bob)
    log.record_write(frames, 100 * MS, bob.live_from)
    usage = log.ledger.report()
    assert usage["replayed_tokens"] == {"bob": 2} and usage["delivered_tokens"] == {"alice": 2}
    assert usage["gateway_latency_ms"]["samples"] == 0 and usage["replayed_events"] == len(frames)


def test_append_after_terminal_is_refused_and_cancel_is_idempotent():
    log = make_log()
    log.append(Event.delta("a"), 0)
    cancelled = log.cancel(0)
    assert cancelled is not None and cancelled.data is not None
    assert cancelled.data["finish_reason"] == "cancelled"
    assert log.cancel(0) is None
    with pytest.raises(StreamClosed):
        log.append(Event.delta("b"), 0)


def test_resume_beyond_the_end_is_refused():
    log = make_log()
    log.append(Event.delta("a"), 0)
    with pytest.raises(ResumeOutOfRange):
        log.cursor("r", Position("ep", 2))


def test_record_write_feeds_the_latency_histogram():
    log = make_log()
    event = log.append(Event.delta("a"), 0)
    log.record_write([event], 2 * MS)
    summary = log.ledger.gateway_latency.summary_ms()
    assert summary["samples"] == 1 and 1.8 <= summary["p50"] <= 2.0


@pytest.mark.parametrize("resume", [None, Position("ep", 0)], ids=["late join", "resume"])
def test_history_and_what_came_live_are_never_one_frame(resume: Position | None):
    # A reader comes to a running stream (or resumes it from the start) and more is appended
    # before its first read: the history it found and the live tail must not be merged into
    # one delta, or the history would count as live and its age as the gateway's latency.
    log = make_log()
    for text in "abc":
        log.append(Event.delta(text), 1 * MS)
    reader = log.cursor("late", resume)
    log.append(Event.delta("d"), 50 * MS)
    log.append(Event.delta("e"), 50 * MS)
    frames = log.read(reader)
    assert "".join(f.text for f in frames) == "abcde"
    assert [f.seq for f in frames] == [3, 5]  # each run coalesced, on its own side
    log.record_write(frames, 51 * MS, reader.live_from)
    usage = log.ledger.report()
    assert usage["replayed_tokens"] == {"late": 3} and usage["delivered_tokens"] == {"late": 2}
    assert usage["replayed_events"] == 1
    latency = usage["gateway_latency_ms"]
    assert latency["samples"] == 1 and latency["max"] <= 1.0  # 51 - 50 ms, not 51 - 1


def test_latency_histogram_quantiles_are_within_bucket_error():
    histogram = LatencyHistogram()
    for value in range(1, 1001):
        histogram.observe(value * 1000)  # 1 us .. 1 ms
    assert 0.45 <= histogram.quantile_ns(0.5) / 1e6 <= 0.57
    assert 0.95 <= histogram.quantile_ns(0.99) / 1e6 <= 1.0


@pytest.mark.parametrize(
    "token", ["", "abc", ":1", "ep:", "ep:-1", "ep:1.5", "e p:1", "ep:99999999999999999999"]
)
def test_bad_resume_tokens_are_rejected_with_a_reason(token):
    with pytest.raises(BadResumeToken, match="resume token"):
        Position.parse(token)


def test_position_round_trip_and_stream_ids():
    assert Position.parse(Position("a1-B_", 42).token) == Position("a1-B_", 42)
    assert valid_stream_id("agents/42/events") and not valid_stream_id("a b")
    assert not valid_stream_id("x" * 201)


def test_orphan_policies():
    grace = OrphanTracker(OrphanPolicy(OrphanMode.GRACE, grace_s=5), now=0)
    assert grace.deadline == 5
    grace.subscribe()
    assert not grace.expired(100)
    assert grace.unsubscribe(now=10) == 15
    assert grace.expired(15)
    now = OrphanTracker(OrphanPolicy(OrphanMode.CANCEL), now=0)
    now.subscribe()
    assert now.unsubscribe(now=1) == 1
    keep = OrphanTracker(OrphanPolicy(OrphanMode.KEEP, keep_s=60), now=0)
    keep.subscribe()
    assert keep.unsubscribe(now=1) == 61


def test_a_live_reader_behind_retention_is_caught_up_with_text_not_resent_snapshots():
    log = make_log(max_events=4)
    reader = log.cursor("slow")
    produced, received = "", ""
    for i in range(200):
        text = f"{i},"
        produced += text
        log.append(Event.delta(text), 0)
        if i % 37 == 0:  # reads now and then: always far behind the retained window
            frames = log.read(reader, limit=2)
            assert all(f.kind is Kind.DELTA for f in frames)
            received += "".join(f.text for f in frames)
    log.append(Event.done(), 0)
    while log.pending(reader):
        received += "".join(f.text for f in log.read(reader, limit=3))
    assert received == produced  # every character exactly once
    assert log.ledger.delivered == {"slow": 200}


def test_a_reader_that_missed_messages_gets_a_snapshot_and_the_ledger_counts_it():
    log = make_log(max_events=2)
    reader = log.cursor("r")
    log.append(Event.delta("a"), 0)
    log.append(Event.message({"x": 1}), 0)
    for text in "bcd":
        log.append(Event.delta(text), 0)
    frames = log.read(reader, limit=10)
    assert frames[0].kind is Kind.SNAPSHOT
    assert log.ledger.delivered == {"r": 4}


def test_observe_many_matches_observe():
    one, many = LatencyHistogram(), LatencyHistogram()
    values = [-5, -1, 0, 0, 1, 1023, 1024, 1024, 5000, 10**6, 10**6, 10**9, 10**13, 7, 7]
    for value in values:
        one.observe(value)
    many.observe_many(values)
    assert (one.counts, one.total, one.sum_ns, one.max_ns) == (
        many.counts,
        many.total,
        many.sum_ns,
        many.max_ns,
    )


def _mixed_events() -> list[Event]:
    return [
        Event.delta("ab", tokens=2),
        Event.message(raw=b'{"x":1}', tokens=16),
        Event.delta("c" * 200),
        Event.tool_call(0, "{}", call_id="c", name="f"),
        Event.usage(prompt_tokens=5, completion_tokens=40),
        Event.delta("late", tokens=3),
        Event.done(),
    ]


@pytest.mark.parametrize(
    "retention",
    [{}, {"max_events": 3}, {"max_bytes": 400}, {"ttl_s": 0.5}, {"max_events": 1}],
)
def test_append_many_is_the_same_as_appending_each(retention):
    one_by_one, batched = make_log(**retention), make_log(**retention)
    for log in (one_by_one, batched):
        log.append(Event.delta("old"), 0)
    for event in _mixed_events():
        one_by_one.append(event, 1000 * MS)
    batched.append_many(_mixed_events(), 1000 * MS)
    for log in (one_by_one, batched):
        assert log.retained_bytes == sum(e.size for e in log._events[log._head :])
    assert batched.last_seq == one_by_one.last_seq == 8
    assert batched.retained == one_by_one.retained
    assert batched.retained_bytes == one_by_one.retained_bytes
    assert batched.first_retained_seq == one_by_one.first_retained_seq
    assert batched.snapshot().data == one_by_one.snapshot().data
    assert batched.ledger.report() == one_by_one.ledger.report()
    assert batched.terminal is not None and one_by_one.terminal is not None
    assert batched.terminal.data == one_by_one.terminal.data


def test_append_many_keeps_what_came_before_a_refused_event():
    log = make_log(max_events=2)
    with pytest.raises(StreamClosed):
        log.append_many([Event.delta("a"), Event.delta("b"), Event.done(), Event.delta("x")], 0)
    assert log.last_seq == 3 and log.terminal is not None and log.retained == 2
    other = make_log()
    with pytest.raises(ValueError, match="snapshot"):
        other.append_many([Event.delta("a"), other.snapshot()], 0)
    assert other.last_seq == 1 and other.retained == 1 and other.ledger.completion_tokens == 1


def test_a_log_restored_from_a_snapshot_continues_where_the_source_folded():
    source = StreamLog("s", "e", now_ns=0, retention=Retention(max_events=4))
    source.append(Event.tool_call(0, '{"a":', call_id="c1", name="f"), 1)
    for i in range(20):
        source.append(Event.delta(f"{i},"), 1)
    source.append(Event.delta("why", channel=Channel.REASONING), 1)
    folded = Folded.from_event(source.folded.to_event())
    replica = StreamLog("s", "e", now_ns=0, retention=Retention(max_events=4))
    replica.restore(folded)
    assert replica.next_seq == source.folded.through_seq + 1
    for event in source._events[source._head :]:
        replica.append(event.replace(seq=0), 2)
    assert replica.snapshot().data == source.snapshot().data
    assert replica.last_seq == source.last_seq
    reader = replica.cursor("late", Position("e", 1))
    first = replica.read(reader)[0]
    assert first.kind is Kind.SNAPSHOT  # behind the folded state: a snapshot, never a bare delta
    with pytest.raises(ValueError):
        replica.restore(folded)


def test_event_replace_copies_every_field_and_drops_the_encoding_cache():
    event = Event(
        Kind.TOOL_CALL, "args", {"index": 1}, Channel.REASONING, Lane.BULK, 3, b"{}", 7, 99
    )
    event.cache("sse", b"data: x\n\n")
    copy = event.replace()
    for f in dataclasses.fields(Event):
        if f.init:
            assert getattr(copy, f.name) == getattr(event, f.name), f.name
    assert copy.cached("sse") is None and copy is not event
    assert event.replace(seq=8, text="b").seq == 8
    with pytest.raises(TypeError, match="no field"):
        event.replace(_encoded={})


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 1500), st.booleans()), max_size=60),
    st.integers(1, 8),
    st.floats(0.2, 2.0),
)
def test_every_append_leaves_the_retention_limits_kept(steps, max_events, ttl_s):
    """After each append the retained window obeys every limit (the newest event aside), the
    TTL included, whether or not `trim` ran in between (append checks a cached expiry)."""
    log = make_log(max_events=max_events, max_bytes=600, ttl_s=ttl_s)
    now = 0
    for gap_ms, trim_first in steps:
        now += gap_ms * MS
        if trim_first:
            log.trim(now)
        log.append(Event.delta("x" * 40), now)
        if log.retained > 1:
            oldest = log._events[log._head]
            assert oldest.ts_ns >= now - int(ttl_s * 1e9)
            assert log.retained <= max_events
            assert log.retained_bytes <= 600
