"""LWW set, register and map: ties and bias, ops as data, delta sync, drift refusal, GC."""

from __future__ import annotations

import orjson
import pytest

from airlane.sync import (
    Action,
    Bias,
    ClockDriftError,
    Delta,
    HybridClock,
    LocalSyncError,
    LWWElementSet,
    LWWMap,
    LWWRegister,
    MalformedError,
    Op,
    Stamp,
    VersionVector,
    stable_point,
)

NOW = 10_000


def pair(kind, **options):
    return kind(HybridClock("a"), **options), kind(HybridClock("b"), **options)


def exchange(x, y, op_x, op_y):
    x.apply(op_y, NOW)
    y.apply(op_x, NOW)


@pytest.mark.parametrize(("bias", "present"), [(Bias.ADD_WINS, True), (Bias.REMOVE_WINS, False)])
def test_add_and_remove_at_the_same_time_follow_the_bias(bias, present):
    a, b = pair(LWWElementSet, bias=bias)
    # Same wall time, both counters 0: a tie on HLC time, across nodes.
    exchange(a, b, a.add("x", NOW), b.remove("x", NOW))
    assert ("x" in a) is present
    assert ("x" in b) is present
    assert a.entries() == b.entries()


@pytest.mark.parametrize("bias", list(Bias))
def test_the_later_stamp_wins_whatever_the_bias(bias):
    a, b = pair(LWWElementSet, bias=bias)
    exchange(a, b, a.add("x", NOW), b.remove("x", NOW + 1))
    assert "x" not in a
    assert "x" not in b
    a2, b2 = pair(LWWElementSet, bias=bias)
    exchange(a2, b2, a2.remove("x", NOW), b2.add("x", NOW + 1))
    assert "x" in a2
    assert "x" in b2


def test_a_remove_after_seeing_the_add_wins_even_with_a_slow_wall_clock():
    a, b = pair(LWWElementSet)
    add = a.add("x", NOW)
    b.apply(add, NOW - 5_000)  # b's wall clock is 5 s behind
    remove = b.remove("x", NOW - 5_000)
    assert remove.stamp > add.stamp  # the HLC carried causality past the slow clock
    a.apply(remove, NOW)
    assert "x" not in a


def test_concurrent_writes_at_the_same_time_are_decided_by_node_id():
    a, b = pair(LWWRegister)
    exchange(a, b, a.set("from a", NOW), b.set("from b", NOW))
    assert a.value == b.value == "from b"
    m1, m2 = pair(LWWMap)
    exchange(m1, m2, m1.set("k", 1, NOW), m2.set("k", 2, NOW))
    assert m1.to_dict() == m2.to_dict() == {"k": 2}


def test_a_reused_stamp_is_still_decided_the_same_everywhere():
    stamp = Stamp(NOW, 0, "faulty")
    first, second = Op(Action.SET, stamp, "k", "x"), Op(Action.SET, stamp, "k", "y")
    a, b = pair(LWWMap)
    a.apply(first, NOW)
    a.apply(second, NOW)
    b.apply(second, NOW)
    b.apply(first, NOW)
    assert a.entries() == b.entries()


def test_map_reads_and_deletes():
    m = LWWMap(HybridClock("a"))
    m.set("title", "draft", NOW)
    m.set("tags", ["a", {"b": None}], NOW)
    m.delete("title", NOW + 1)
    m.delete("never-set", NOW + 1)
    assert m.to_dict() == {"tags": ["a", {"b": None}]}
    assert "title" not in m
    assert m.get("title", "gone") == "gone"
    assert len(m) == 1
    assert [(op.key, op.action) for op in m.entries()] == [
        ("never-set", Action.DELETE),
        ("tags", Action.SET),
        ("title", Action.DELETE),
    ]


def test_set_reads():
    s = LWWElementSet(HybridClock("a"))
    for element in "cab":
        s.add(element, NOW)
    s.remove("a", NOW)
    assert list(s) == ["b", "c"]
    assert len(s) == 2
    assert s.elements() == {"b", "c"}
    assert 3 not in s


def test_register_reads():
    r = LWWRegister(HybridClock("a"))
    assert r.value is None
    assert r.stamp is None
    op = r.set({"model": "m", "step": 3}, NOW)
    assert r.value == {"model": "m", "step": 3}
    assert r.stamp == op.stamp


def test_ops_travel_as_json():
    m = LWWMap(HybridClock("ios"))
    ops = [m.set("k", {"nested": [1, 2.5, "x", None, True]}, NOW), m.delete("k", NOW)]
    for op in ops:
        wire = orjson.dumps(op.to_dict())
        assert Op.from_dict(orjson.loads(wire)) == op
    assert "value" not in ops[1].to_dict()


@pytest.mark.parametrize(
    "data",
    [
        None,
        [],
        {"action": "explode", "stamp": "000000000001.0000.a", "key": "k"},
        {"action": ["add"], "stamp": "000000000001.0000.a", "key": "k"},
        {"action": "add", "stamp": "yesterday", "key": "k"},
        {"action": "add", "stamp": "000000000001.0000.a", "key": 7},
        {"action": "add", "stamp": "000000000001.0000.a", "key": "k", "value": 1},
        {"action": "set", "stamp": "000000000001.0000.a", "key": "k", "value": 1 << 70},
        {"action": "set", "stamp": "000000000000.0000.a", "key": "k", "value": 1},
    ],
)
def test_malformed_ops_are_the_peers_fault(data):
    with pytest.raises(MalformedError):
        Op.from_dict(data)


def test_deeply_nested_values_are_refused():
    value: list = []
    for _ in range(40):
        value = [value]
    with pytest.raises(LocalSyncError, match="deeper"):
        LWWMap(HybridClock("a")).set("k", value, NOW)


def test_a_structure_refuses_ops_of_another_kind_and_stays_unchanged():
    s = LWWElementSet(HybridClock("a"))
    s.add("x", NOW)
    before = s.entries()
    set_op = Op(Action.SET, Stamp(NOW, 5, "b"), "x", 1)
    with pytest.raises(MalformedError):
        s.apply(set_op, NOW)
    with pytest.raises(MalformedError):
        LWWRegister(HybridClock("a")).apply(Op(Action.SET, Stamp(NOW, 5, "b"), "k", 1), NOW)
    assert s.entries() == before


def test_ops_from_a_clock_too_far_ahead_are_refused_atomically():
    m = LWWMap(HybridClock("a", max_drift_ms=1_000))
    m.set("k", "mine", NOW)
    ahead = HybridClock("b")
    fine, too_far = ahead.now(NOW), ahead.now(NOW + 60_000)
    delta = Delta(
        (Op(Action.SET, fine, "j", 1), Op(Action.SET, too_far, "k", "theirs")),
        VersionVector(),
        VersionVector({"b": too_far.logical}),
    )
    with pytest.raises(ClockDriftError):
        m.apply_delta(delta, NOW)
    assert m.to_dict() == {"k": "mine"}
    assert "b" not in m.version


def test_merge_needs_the_same_kind_and_bias():
    with pytest.raises(LocalSyncError):
        LWWMap(HybridClock("a")).merge(LWWMap(HybridClock("b"), bias=Bias.REMOVE_WINS), NOW)


def test_delta_since_sends_only_what_the_peer_lacks():
    a, b = pair(LWWMap)
    for i in range(5):
        a.set(f"k{i}", i, NOW + i)
    first = a.delta_since(b.version)
    assert len(first.ops) == 5
    b.apply_delta(Delta.from_dict(orjson.loads(orjson.dumps(first.to_dict()))), NOW + 10)
    assert b.to_dict() == a.to_dict()
    assert b.version["a"] >= a.version["a"]
    a.set("k1", "new", NOW + 20)
    second = a.delta_since(b.version)
    assert [op.key for op in second.ops] == ["k1"]
    # Nothing new: an empty delta.
    b.apply_delta(second, NOW + 20)
    assert a.delta_since(b.version).ops == ()


def test_delta_since_a_stamp_sends_everything_after_it():
    m = LWWMap(HybridClock("a"))
    ops = [m.set(f"k{i}", i, NOW + i) for i in range(4)]
    assert [op.key for op in m.delta_since(ops[1].stamp).ops] == ["k2", "k3"]
    assert len(m.delta_since().ops) == 4


def test_a_delta_computed_against_a_version_the_receiver_lacks_does_not_advance_it():
    a, b = pair(LWWMap)
    a.set("x", 1, NOW)
    a.set("y", 2, NOW + 1)
    # A delta computed as if b already had everything up to a's first op.
    skipping = a.delta_since(VersionVector({"a": a.entries()[0].stamp.logical}))
    b.apply_delta(skipping, NOW + 2)
    assert b.to_dict() == {"y": 2}
    assert b.version["a"] == 0  # b cannot claim a's earlier op
    b.apply_delta(a.delta_since(b.version), NOW + 3)
    assert b.to_dict() == {"x": 1, "y": 2}


def test_single_remote_ops_do_not_advance_the_version():
    a, b = pair(LWWElementSet)
    b.apply(a.add("x", NOW), NOW)
    assert b.version["a"] == 0
    assert b.version["b"] > 0  # its own clock reading


def test_gc_drops_only_causally_stable_tombstones_and_nothing_resurrects():
    replicas = [LWWElementSet(HybridClock(n)) for n in ("ios", "android", "web")]
    ios, android, web = replicas
    old_add = ios.add("x", NOW)
    ios.remove("x", NOW + 1)
    web.remove("y", NOW + 2)

    def sync_all():
        for receiver in replicas:
            for sender in replicas:
                receiver.apply_delta(sender.delta_since(receiver.version), NOW + 100)

    sync_all()
    sync_all()
    live = [r.node for r in replicas]
    stable = stable_point([r.version for r in replicas], live)
    assert stable >= Stamp(NOW + 2, 0, "web").logical
    late = android.remove("z", NOW + 200)  # after the stable point: its tombstone stays
    dropped = [r.gc(stable) for r in replicas]
    assert dropped == [2, 2, 2]
    assert {op.key for op in android.entries()} == {"z"}
    # A re-sent old add (a retransmission, a stale delta) cannot resurrect "x".
    for r in replicas:
        r.apply(old_add, NOW + 300)
        r.apply(late, NOW + 300)
        assert r.elements() == frozenset()
        assert r.version.floor == stable
    # Stale deltas from before GC change nothing either.
    stale = Delta((old_add,), VersionVector(), VersionVector())
    assert ios.apply_delta(stale, NOW + 300) == 0


def test_gc_keeps_bounded_version_vectors():
    a, b = pair(LWWMap)
    a.set("k", 1, NOW)
    b.apply_delta(a.delta_since(b.version), NOW)
    a.apply_delta(b.delta_since(a.version), NOW)
    stable = stable_point([a.version, b.version], ["a", "b"])
    a.gc(stable)
    assert a.version.floor == stable
    assert len(a.version) <= 2
