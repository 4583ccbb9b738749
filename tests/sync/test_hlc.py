"""Hybrid logical clocks: total order, encodings that sort like stamps, the update rules,
counter overflow and drift rejection."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airlane.sync import ClockDriftError, HybridClock, LocalSyncError, MalformedError, Stamp
from airlane.sync.hlc import MAX_COUNTER, MAX_WALL_MS

nodes = st.text(alphabet="abcxyz019._:-", min_size=1, max_size=8)
stamps = st.builds(
    Stamp,
    st.integers(0, MAX_WALL_MS),
    st.integers(0, MAX_COUNTER),
    nodes,
)


def test_stamps_order_by_wall_then_counter_then_node():
    assert Stamp(1, 9, "z") < Stamp(2, 0, "a")
    assert Stamp(2, 0, "z") < Stamp(2, 1, "a")
    assert Stamp(2, 1, "a") < Stamp(2, 1, "b")


@given(stamps, stamps)
def test_encodings_round_trip_and_sort_like_stamps(a, b):
    assert Stamp.decode(a.encode()) == a
    assert Stamp.from_bytes(a.to_bytes()) == a
    assert (a < b) == (a.encode() < b.encode()) == (a.to_bytes() < b.to_bytes())
    assert Stamp.from_logical(a.logical, a.node) == a


def test_encoded_forms_are_compact():
    stamp = Stamp(1_700_000_000_000, 3, "ios")
    assert stamp.encode() == "018bcfe56800.0003.ios"
    assert len(stamp.to_bytes()) == 8 + 3


@pytest.mark.parametrize(
    "text",
    [
        "",
        "018bcfe56800.0003.",
        "018BCFE56800.0003.ios",
        "18bcfe56800.0003.ios",
        "018bcfe56800-0003-ios",
        "018bcfe56800.0003.i os",
        "+18bcfe56800.0003.ios",
        None,
    ],
)
def test_decoding_garbage_is_the_peers_fault(text):
    with pytest.raises(MalformedError):
        Stamp.decode(text)


@pytest.mark.parametrize("data", [b"", b"\x00" * 8, b"\x00" * 8 + "é".encode()])
def test_decoding_garbage_bytes_is_the_peers_fault(data):
    with pytest.raises(MalformedError):
        Stamp.from_bytes(data)


def test_bad_fields_are_the_callers_fault():
    with pytest.raises(LocalSyncError):
        Stamp(-1, 0, "a")
    with pytest.raises(LocalSyncError):
        Stamp(0, MAX_COUNTER + 1, "a")
    with pytest.raises(LocalSyncError):
        Stamp(0, 0, "")
    with pytest.raises(LocalSyncError, match="reserved"):
        HybridClock("~arbiter")


def test_local_events_follow_wall_time_and_tick_within_a_millisecond():
    clock = HybridClock("ios")
    assert clock.last is None
    assert clock.now(100) == Stamp(100, 0, "ios")
    assert clock.now(100) == Stamp(100, 1, "ios")
    assert clock.now(250) == Stamp(250, 0, "ios")
    # Wall time going backwards (NTP step) never makes the clock go backwards.
    assert clock.now(90) == Stamp(250, 1, "ios")
    assert clock.last == Stamp(250, 1, "ios")


def test_receive_orders_everything_after_the_remote_stamp():
    clock = HybridClock("web")
    clock.now(100)
    merged = clock.receive(Stamp(130, 7, "ios"), 110)  # the remote is 20 ms ahead
    assert merged == Stamp(130, 8, "web")
    assert clock.now(115) > Stamp(130, 7, "ios")
    # Once wall time passes the remote's, the clock is back on wall time.
    assert clock.now(200) == Stamp(200, 0, "web")


def test_receive_of_an_older_stamp_still_ticks():
    clock = HybridClock("web")
    clock.now(500)
    assert clock.receive(Stamp(100, 0, "ios"), 500) == Stamp(500, 1, "web")


def test_counter_overflow_carries_into_wall_time():
    clock = HybridClock("ios")
    clock.receive(Stamp(1000, MAX_COUNTER - 1, "web"), 1000)
    assert clock.last == Stamp(1000, MAX_COUNTER, "ios")
    carried = clock.now(1000)
    assert carried == Stamp(1001, 0, "ios")
    assert carried > Stamp(1000, MAX_COUNTER, "web")
    # The next millisecond of real time is absorbed: no stamp is ever repeated.
    assert clock.now(1001) == Stamp(1001, 1, "ios")


def test_a_stamp_too_far_ahead_is_refused_and_changes_nothing():
    clock = HybridClock("ios", max_drift_ms=1_000)
    clock.now(10_000)
    before = clock.last
    with pytest.raises(ClockDriftError) as caught:
        clock.receive(Stamp(11_001, 0, "web"), 10_000)
    assert caught.value.remote_wall_ms - caught.value.local_wall_ms == 1_001
    assert "1001 ms ahead" in str(caught.value)
    assert clock.last == before
    # At the limit it is accepted.
    assert clock.receive(Stamp(11_000, 0, "web"), 10_000) == Stamp(11_000, 1, "ios")


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 50), st.integers(0, 3)), max_size=60))
def test_every_stamp_issued_is_greater_than_everything_before(events):
    clock = HybridClock("a", max_drift_ms=10_000)
    seen: list[Stamp] = []
    wall = 1
    for is_receive, step, counter in events:
        wall += step - 10 if step > 40 else step  # wall time sometimes steps back
        wall = max(wall, 0)
        if is_receive:
            remote = Stamp(wall + step, counter, "b")
            issued = clock.receive(remote, wall)
            seen.append(remote)
        else:
            issued = clock.now(wall)
        assert all(issued > s for s in seen)
        assert issued.wall_ms >= wall
        seen.append(issued)
