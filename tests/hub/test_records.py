"""The JetStream hub's records: batches, snapshots and metadata survive their bytes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airlane.core import Channel, Event, Kind, OrphanMode, OrphanPolicy, Retention
from airlane.hub.jetstream import records
from airlane.hub.jetstream.records import (
    MAX_BATCH_BYTES,
    CorruptRecord,
    StreamMeta,
    compressed,
    decode_batch,
    decode_entries,
    decode_snapshot,
    encode_batches,
    encode_entry,
    encode_snapshot,
    join_entries,
    stream_id_of,
    stream_key,
)

int64 = st.integers(-(2**63), 2**63 - 1)
events = st.one_of(
    st.builds(Event.delta, st.text(max_size=30), channel=st.sampled_from(list(Channel))),
    st.builds(
        Event.message,
        st.dictionaries(st.text(max_size=5), st.integers(-(2**63), 2**63 - 1), max_size=3),
    ),
    st.builds(lambda b: Event.message(raw=b), st.binary(min_size=1, max_size=40)),
    st.builds(Event.tool_call, st.integers(0, 3), st.text(max_size=10), name=st.just("f")),
    st.just(Event.done()),
    st.just(Event.error("boom", code="x")),
)


@given(st.lists(events, min_size=1, max_size=30), st.integers(1, 10**9))
def test_batches_round_trip(batch, first_seq):
    out = []
    for seq, count, payload in encode_batches(batch, first_seq):
        got_first, decoded = decode_batch(payload, ts_ns=7)
        assert got_first == seq and len(decoded) == count
        out.extend(decoded)
    assert [e.seq for e in out] == list(range(first_seq, first_seq + len(batch)))
    for original, copy in zip(batch, out, strict=True):
        assert (copy.kind, copy.text, copy.data, copy.channel, copy.lane, copy.raw) == (
            original.kind,
            original.text,
            original.data,
            original.channel,
            original.lane,
            original.raw,
        )
        assert copy.ts_ns == 7


def test_large_batches_are_split_below_the_limit():
    batch = [Event.delta("x" * 10_000) for _ in range(100)]
    parts = encode_batches(batch, 1)
    assert len(parts) > 1 and all(len(p) <= MAX_BATCH_BYTES for _, _, p in parts)
    assert sum(count for _, count, _ in parts) == 100


@given(st.text(alphabet="abcXYZ019._:/-", min_size=1, max_size=200))
def test_stream_keys_are_subject_and_key_safe_and_reversible(stream_id):
    key = stream_key(stream_id)
    assert set(key) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    assert stream_id_of(key) == stream_id


def test_snapshots_and_meta_round_trip_and_garbage_is_an_error():
    snapshot = Event(Kind.SNAPSHOT, data={"text": {"content": "ab"}}, tokens=2, seq=9)
    js_seq, back = decode_snapshot(encode_snapshot(snapshot, 42))
    assert js_seq == 42 and back.seq == 9 and back.data == snapshot.data and back.tokens == 2
    meta = StreamMeta.make(
        "s", "e1", "ab12", Retention(max_events=5), OrphanPolicy(OrphanMode.CANCEL), 7
    ).produced_by("a", "r1")
    again = StreamMeta.from_bytes(meta.to_bytes())
    assert again == meta and again.retention_policy().max_events == 5
    assert (again.producer, again.producer_run, again.created_unix_ns) == ("a", "r1", 7)
    # A record written before runs and creation times existed still reads.
    legacy = b'{"stream_id": "s", "epoch": "e", "incarnation": "i", "producer": "a"}'
    assert StreamMeta.from_bytes(legacy).producer_run == ""
    assert again.orphan_policy() == OrphanPolicy(OrphanMode.CANCEL)
    for bad in (b"\xc1", b"[1]", b"[1, [[1, 2]]]"):
        with pytest.raises(CorruptRecord):
            decode_batch(bad, 0)
    with pytest.raises(CorruptRecord):
        StreamMeta.from_bytes(b"{}")
    with pytest.raises(CorruptRecord):
        stream_id_of("@@@")


def test_home_log_messages_round_trip_compressed_and_bad_frames_are_errors(monkeypatch):
    entries = [
        encode_entry(f"s{n}", 1, [Event.message({"n": n, "pad": "p" * 200})]) for n in range(20)
    ]
    plain = join_entries(entries)
    small = join_entries(entries[:1])
    assert compressed(small) == small  # below COMPRESS_FROM: stored as it is
    packed = compressed(plain)
    assert len(packed) < len(plain) // 4
    assert decode_entries(packed) == decode_entries(plain)
    assert [sid for sid, _, _ in decode_entries(packed)] == [f"s{n}" for n in range(20)]
    with pytest.raises(CorruptRecord):
        decode_entries(packed[:-8])  # cut short
    # A frame that claims to expand past the bound is refused before anything is allocated.
    monkeypatch.setattr(records, "MAX_PLAIN_BYTES", len(plain) - 1)
    with pytest.raises(CorruptRecord):
        decode_entries(packed)
