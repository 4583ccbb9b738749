"""`NodeTable`: liveness and remote readers from heartbeats (time passed in)."""

from __future__ import annotations

from airlane.hub.jetstream.presence import Heartbeat, NodeTable


def test_heartbeats_round_trip_and_garbage_is_ignored():
    beat = Heartbeat("a", {"s": 2}, ["p"], partial=True)
    assert Heartbeat.from_bytes(beat.to_bytes()) == beat
    for junk in (b"", b"[]", b'{"readers": 1}', b'{"node": "a", "readers": {"s": "x"}}'):
        assert Heartbeat.from_bytes(junk) is None


def test_liveness_needs_time_to_tell():
    table = NodeTable("me", started=100.0, timeout_s=3.0)
    assert table.alive("me", 100.0) is True
    assert table.alive("x", 101.0) is None  # too early to call a stranger dead
    assert table.alive("x", 104.0) is False
    table.observe(Heartbeat("x"), 104.0)
    assert table.alive("x", 106.0) is True
    assert table.alive("x", 107.5) is False


def test_reader_counts_change_with_full_and_partial_beats_and_death():
    table = NodeTable("me", started=0.0, timeout_s=3.0)
    assert sorted(table.observe(Heartbeat("b", {"s": 1, "t": 2}), 1.0)) == [
        ("s", 0, 1),
        ("t", 0, 2),
    ]
    assert table.remote_readers("s") == 1
    assert table.observe(Heartbeat("b", {"s": 0}, partial=True), 1.5) == [("s", 1, 0)]
    assert table.remote_readers("t") == 1  # a partial beat leaves the others alone
    assert table.observe(Heartbeat("b", {}), 2.0) == [("t", 2, 0)]  # a full beat replaces
    table.observe(Heartbeat("b", {"u": 1}, ["gen"]), 2.5)
    dead, changes = table.expire(6.0)
    assert dead == ["b"] and changes == [("u", 1, 0)]
    assert table.producers["gen"] == "b" and table.alive("b", 6.0) is False


def test_a_leaving_node_is_forgotten_at_once_and_own_beats_are_ignored():
    table = NodeTable("me", started=0.0, timeout_s=3.0)
    table.observe(Heartbeat("b", {"s": 1}), 1.0)
    assert table.observe(Heartbeat("b", leaving=True), 1.1) == [("s", 1, 0)]
    assert table.alive("b", 4.0) is False
    assert table.observe(Heartbeat("me", {"s": 5}), 1.2) == []
