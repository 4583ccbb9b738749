"""Version vectors and vector clocks: compare, merge, the floor, and retirement."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airlane.sync import Causality, LocalSyncError, MalformedError, VersionVector, stable_point

BEFORE, AFTER, EQUAL, CONCURRENT = (
    Causality.BEFORE,
    Causality.AFTER,
    Causality.EQUAL,
    Causality.CONCURRENT,
)

vectors = st.builds(
    VersionVector,
    st.dictionaries(st.sampled_from("abcd"), st.integers(0, 6), max_size=4),
    st.integers(0, 3),
)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ({}, {}, EQUAL),
        ({"a": 1}, {"a": 1}, EQUAL),
        ({"a": 1}, {"a": 2}, BEFORE),
        ({"a": 2}, {"a": 1}, AFTER),
        ({"a": 1}, {"a": 1, "b": 1}, BEFORE),
        ({"a": 2}, {"a": 1, "b": 1}, CONCURRENT),
        ({"a": 1, "b": 0}, {"a": 1}, EQUAL),  # a zero entry is no entry
        ({"x": 3}, {"y": 3}, CONCURRENT),
    ],
)
def test_compare(a, b, expected):
    assert VersionVector(a).compare(VersionVector(b)) is expected


def test_increment_and_merge():
    clock = VersionVector().increment("llm").increment("llm")
    other = VersionVector({"unet": 1})
    merged = clock.merge(other).increment("unet")
    assert merged == VersionVector({"llm": 2, "unet": 2})
    assert clock.compare(merged) is BEFORE
    assert merged.dominates(other)
    assert not other.dominates(merged)


@given(vectors, vectors)
def test_compare_is_antisymmetric_and_merge_is_the_least_upper_bound(a, b):
    flipped = {BEFORE: AFTER, AFTER: BEFORE, EQUAL: EQUAL, CONCURRENT: CONCURRENT}
    assert b.compare(a) is flipped[a.compare(b)]
    assert (a.compare(b) is EQUAL) == (a == b)
    merged = a.merge(b)
    assert merged.dominates(a)
    assert merged.dominates(b)
    assert merged == b.merge(a)
    for actor in set(a) | set(b) | {"zz"}:
        assert merged[actor] == max(a[actor], b[actor])


@given(vectors)
def test_dict_round_trip(vector):
    assert VersionVector.from_dict(vector.to_dict()) == vector
    assert hash(VersionVector.from_dict(vector.to_dict())) == hash(vector)


@pytest.mark.parametrize(
    "data",
    [
        None,
        [],
        {"entries": []},
        {"entries": {"a": -1}},
        {"entries": {"a": "1"}},
        {"entries": {"": 1}},
        {"entries": {}, "floor": -2},
        {"entries": {"a": True}},
    ],
)
def test_malformed_vectors_are_the_peers_fault(data):
    with pytest.raises(MalformedError):
        VersionVector.from_dict(data)


def test_the_floor_is_what_every_actor_reads_at_least():
    vector = VersionVector({"a": 9, "b": 2}, floor=4)
    assert vector["a"] == 9
    assert vector["b"] == 4  # covered by the floor
    assert vector["never-seen"] == 4
    assert dict(vector.entries) == {"a": 9}  # entries at or below the floor are dropped
    assert vector == VersionVector({"a": 9}, floor=4)
    # A new actor starts above the floor.
    assert vector.increment("joiner")["joiner"] == 5
    # Floors compare as "every actor not named".
    assert VersionVector({"a": 9}).compare(vector) is BEFORE


def test_retired_actors_are_folded_into_the_floor_and_growth_stays_bounded():
    live = {"ios", "web"}
    replicas = {
        "ios": VersionVector({"ios": 40, "web": 35, "android": 12}),
        "web": VersionVector({"ios": 38, "web": 41, "android": 12}),
    }
    # android left after its event 12, and every live replica covers it: it is retired, so
    # it is no longer part of the stability minimum.
    assert all(vector["android"] >= 12 for vector in replicas.values())
    stable = stable_point(replicas.values(), live)
    assert stable == 35
    folded = {name: vector.fold(stable) for name, vector in replicas.items()}
    assert all("android" not in vector for vector in folded.values())
    assert folded["ios"] == VersionVector({"ios": 40}, floor=35)
    # Folding changed no comparison between the live replicas' vectors.
    assert folded["ios"].compare(folded["web"]) is replicas["ios"].compare(replicas["web"])
    # Many actors come and go while the live ones keep writing; each transient retires right
    # after its one event, and the vector stays about as big as the live set.
    vector = folded["ios"]
    for step in range(100):
        now = 50 + step
        vector = vector.advance("ios", now).advance("web", now).advance(f"agent-{step}", now - 1)
        vector = vector.fold(min(vector[actor] for actor in live))
        assert len(vector) <= len(live) + 1
    assert set(vector) <= {"ios", "web", "agent-99"}


def test_fold_never_lowers_the_floor():
    vector = VersionVector({"a": 9}, floor=4)
    assert vector.fold(2) is vector


def test_stable_point_needs_something_to_take_the_minimum_of():
    with pytest.raises(LocalSyncError):
        stable_point([], ["a"])
    with pytest.raises(LocalSyncError):
        stable_point([VersionVector()], [])


def test_bad_entries_are_the_callers_fault():
    with pytest.raises(LocalSyncError):
        VersionVector({"a": -1})
    with pytest.raises(LocalSyncError):
        VersionVector(floor=-1)
