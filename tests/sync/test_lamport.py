"""Lamport clocks and the session snapshot pipeline: triggers, packing, total-order apply."""

from __future__ import annotations

import pytest

from airlane.sync import (
    LamportClock,
    LocalSyncError,
    MalformedError,
    PipelineState,
    Snapshot,
    SnapshotPipeline,
    SnapshotReceiver,
    Trigger,
)


def test_lamport_clock_ticks_and_jumps_past_what_it_receives():
    clock = LamportClock()
    assert clock.tick() == 1
    assert clock.receive(7) == 8
    assert clock.receive(3) == 9
    assert clock.time == 9


def test_idle_trigger_fires_after_quiet_time_and_each_change_restarts_it():
    pipeline = SnapshotPipeline("agent-1", idle_ms=1_000)
    assert pipeline.state is PipelineState.CLEAN
    assert pipeline.get_timer() is None
    assert pipeline.update("step", 1, now_ms=0) is None
    assert pipeline.state is PipelineState.DIRTY
    assert pipeline.get_timer() == 1_000
    assert pipeline.update("step", 2, now_ms=600) is None
    assert pipeline.poll(1_000) is None  # the second change restarted the quiet period
    snapshot = pipeline.poll(pipeline.get_timer())
    assert snapshot == Snapshot(1, "agent-1", {"step": 2}, Trigger.IDLE)
    assert pipeline.state is PipelineState.CLEAN
    assert pipeline.poll(10_000) is None


def test_a_key_change_snapshots_at_once_and_unchanged_values_do_nothing():
    pipeline = SnapshotPipeline("agent-1", is_key=lambda key: key.startswith("plan"))
    pipeline.update("scratch", "x", now_ms=0)
    snapshot = pipeline.update("plan.goal", "ship", now_ms=5)
    assert snapshot is not None
    assert snapshot.trigger is Trigger.KEY_CHANGE
    assert snapshot.state == {"scratch": "x", "plan.goal": "ship"}  # the whole state
    assert pipeline.get_timer() is None  # pending changes went with it
    assert pipeline.update("plan.goal", "ship", now_ms=6) is None  # not a change
    removal = pipeline.discard("plan.goal", now_ms=7)
    assert removal is not None
    assert removal.state == {"scratch": "x"}
    assert removal.stamp > snapshot.stamp
    assert pipeline.discard("plan.goal", now_ms=8) is None


def test_flush_and_state_copy():
    pipeline = SnapshotPipeline("a")
    assert pipeline.flush() is None
    pipeline.update("k", [1], now_ms=0)
    snapshot = pipeline.flush()
    assert snapshot is not None
    assert snapshot.trigger is Trigger.FLUSH
    pipeline.update("k", [2], now_ms=1)
    assert snapshot.state == {"k": [1]}  # a snapshot is a copy


def test_state_is_bounded():
    pipeline = SnapshotPipeline("a", max_keys=2)
    pipeline.update("a", 1, 0)
    pipeline.update("b", 1, 0)
    pipeline.update("a", 2, 0)  # replacing is fine
    with pytest.raises(LocalSyncError):
        pipeline.update("c", 1, 0)


def test_receiver_applies_newer_and_ignores_stale_and_duplicate():
    receiver = SnapshotReceiver()
    new, old = Snapshot(5, "a", {"v": 5}), Snapshot(3, "b", {"v": 3})
    assert receiver.receive(new, now_ms=0) == [new]
    assert receiver.receive(old, now_ms=1) == []
    assert receiver.receive(new, now_ms=2) == []
    assert receiver.current == new
    assert receiver.ignored == 2


def test_equal_stamps_are_ordered_by_origin_on_every_receiver():
    x, y = Snapshot(4, "ios", {"by": "ios"}), Snapshot(4, "web", {"by": "web"})
    first, second = SnapshotReceiver(), SnapshotReceiver()
    first.receive(x, 0)
    first.receive(y, 0)
    second.receive(y, 0)
    second.receive(x, 0)
    assert first.current == second.current == y


def test_out_of_order_snapshots_are_released_in_total_order_within_the_window():
    receiver = SnapshotReceiver(reorder_ms=50)
    arrivals = [Snapshot(3, "a", {"n": 3}), Snapshot(1, "a", {"n": 1}), Snapshot(2, "b", {})]
    assert receiver.receive(arrivals[0], now_ms=0) == []
    assert receiver.receive(arrivals[1], now_ms=10) == []
    assert receiver.get_timer() == 50
    assert receiver.receive(arrivals[2], now_ms=20) == []
    released = receiver.poll(50)  # snapshot 3 is due: it and everything before it go
    assert [s.stamp for s in released] == [1, 2, 3]
    assert receiver.get_timer() is None
    late = Snapshot(2, "z", {})
    assert receiver.receive(late, now_ms=60) == []  # ordered before what was applied
    assert receiver.ignored == 1


def test_a_full_reorder_buffer_releases_the_oldest_early():
    receiver = SnapshotReceiver(reorder_ms=1_000, max_buffered=2)
    receiver.receive(Snapshot(9, "a", {}), 0)
    receiver.receive(Snapshot(8, "a", {}), 0)
    released = receiver.receive(Snapshot(7, "a", {}), 0)
    assert [s.stamp for s in released] == [7]


def test_every_receiver_ends_on_the_same_snapshot_whatever_the_arrival_order():
    import itertools

    snapshots = [Snapshot(s, o, {"s": s, "o": o}) for s, o in [(1, "a"), (2, "b"), (2, "a")]]
    finals = set()
    for order in itertools.permutations(snapshots):
        receiver = SnapshotReceiver()
        for arrival, snapshot in enumerate(order):
            receiver.receive(snapshot, arrival)
        assert receiver.current is not None
        finals.add(receiver.current.order_key)
    assert finals == {(2, "b")}


def test_an_agent_that_has_seen_a_snapshot_stamps_its_next_one_after_it():
    clock = LamportClock()
    pipeline = SnapshotPipeline("web", clock=clock, is_key=lambda key: True)
    receiver = SnapshotReceiver(clock=clock)
    receiver.receive(Snapshot(41, "ios", {"x": 1}), 0)
    mine = pipeline.update("x", 2, now_ms=1)
    assert mine is not None
    assert mine.order_key > (41, "ios")


def test_snapshots_travel_as_json():
    snapshot = Snapshot(3, "a", {"k": [1, {"x": None}]}, Trigger.IDLE)
    assert Snapshot.from_dict(snapshot.to_dict()) == snapshot


@pytest.mark.parametrize(
    "data",
    [
        None,
        {"stamp": -1, "origin": "a", "state": {}},
        {"stamp": True, "origin": "a", "state": {}},
        {"stamp": 1, "origin": "", "state": {}},
        {"stamp": 1, "origin": "a", "state": []},
        {"stamp": 1, "origin": "a", "state": {"k": {1, 2}}},
        {"stamp": 1, "origin": "a", "state": {}, "trigger": "whim"},
    ],
)
def test_malformed_snapshots_are_the_peers_fault(data):
    with pytest.raises(MalformedError):
        Snapshot.from_dict(data)


def test_bad_configuration_is_the_callers_fault():
    with pytest.raises(LocalSyncError):
        SnapshotPipeline("a", idle_ms=0)
    with pytest.raises(LocalSyncError):
        SnapshotReceiver(reorder_ms=-1)
    with pytest.raises(LocalSyncError):
        LamportClock(-1)
