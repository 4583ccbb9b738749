"""`Replica`: stored batches applied once, in order; gaps and echoes deferred, not applied."""

from __future__ import annotations

from airlane.core import Event, Kind, Retention, StreamLog
from airlane.hub.jetstream.records import StreamMeta, encode_batches
from airlane.hub.jetstream.replica import Replica
from airlane.hub.jetstream.store import StoredBatch


def replica() -> Replica:
    meta = StreamMeta.make("s", "e", "inc", Retention(), None, 0)
    return Replica(StreamLog("s", "e", now_ns=0), None, meta)


def batch(
    js_seq: int, first_seq: int, texts: str, prev: int | None, msg_id: str = "x"
) -> StoredBatch:
    ((_, _, payload),) = encode_batches([Event.delta(t) for t in texts], first_seq)
    return StoredBatch(js_seq, payload, 5, msg_id, prev)


def test_live_batches_apply_in_order_and_a_gap_is_deferred():
    r = replica()
    assert r.deliver(batch(10, 1, "ab", prev=0)) == 2
    assert r.deliver(batch(30, 4, "d", prev=20)) == 0  # js 20 (seq 3) was missed
    assert r.deferred and r.log.last_seq == 2
    r.deferred = False
    assert r.apply(batch(20, 3, "c", prev=None)) == 1  # read back
    assert r.deliver(batch(30, 4, "d", prev=20)) == 1
    assert r.deliver(batch(30, 4, "d", prev=20)) == 0  # a duplicate changes nothing
    assert [e.text for e in r.log.read(r.log.cursor("t"), coalesce=False)] == list("abcd")


def test_echoes_of_an_own_publish_wait_for_its_acknowledgement():
    r = replica()
    r.inflight = "node:1"
    assert r.deliver(batch(10, 1, "a", prev=0, msg_id="node:1")) == 0
    assert not r.deferred  # its own echo: the publisher applies it
    assert r.deliver(batch(11, 2, "b", prev=10, msg_id="other:7")) == 0
    assert r.deferred  # another node's: read back after the publish
    r.inflight = None
    assert r.log.last_seq == 0


def test_a_read_back_skips_what_a_snapshot_covers_and_an_end_is_reported():
    r = replica()
    assert r.apply(batch(5, 1, "abc", prev=None)) == 3
    assert r.apply(batch(4, 1, "zz", prev=None)) == 0  # older than the newest applied
    ((_, _, payload),) = encode_batches([Event.delta("d"), Event.done()], 3)  # seq 3 again
    assert r.apply(StoredBatch(6, payload, 5, None)) == 1  # only seq 4 (done) is new
    assert r.log.terminal is not None and r.log.terminal.kind is Kind.DONE
    assert r.ended_at is not None
