"""Property tests: whatever the delivery order, duplication, partition or sync style, every
LWW replica ends in the same state.

Invariants:
- applying the same ops in any order, any number of times, gives the same state;
- state merge is commutative, associative and idempotent, and delta sync gives what merge gives;
- under any schedule of local writes, delayed / duplicated / dropped ops and deltas, and GC at
  the causally stable point, replicas agree after healing with each other and with a replica
  that applied every op ever issued.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from airlane.sync import (
    Action,
    Bias,
    Delta,
    HybridClock,
    LWWElementSet,
    LWWMap,
    LWWRegister,
    Op,
    Stamp,
    stable_point,
)

NODES = ("ios", "android", "web")
FAR = 10**9  # "now" for replicas fed hand-made stamps: drift is not under test here
DRIFT = 10**6


@dataclass(frozen=True)
class Kind:
    name: str
    make: Callable[[HybridClock], Any]
    write: Callable[[Any, str, int, bool, int], Op]  # replica, key, value, removal, now
    observe: Callable[[Any], object]
    actions: tuple[Action, ...]


def _set_write(replica, key, value, removal, now):
    return replica.remove(key, now) if removal else replica.add(key, now)


def _map_write(replica, key, value, removal, now):
    return replica.delete(key, now) if removal else replica.set(key, value, now)


KINDS = [
    Kind(
        "set-add-wins",
        lambda clock: LWWElementSet(clock, bias=Bias.ADD_WINS),
        _set_write,
        lambda r: r.elements(),
        (Action.ADD, Action.REMOVE),
    ),
    Kind(
        "set-remove-wins",
        lambda clock: LWWElementSet(clock, bias=Bias.REMOVE_WINS),
        _set_write,
        lambda r: r.elements(),
        (Action.ADD, Action.REMOVE),
    ),
    Kind(
        "map-add-wins",
        LWWMap,
        _map_write,
        lambda r: r.to_dict(),
        (Action.SET, Action.DELETE),
    ),
    Kind(
        "map-remove-wins",
        lambda clock: LWWMap(clock, bias=Bias.REMOVE_WINS),
        _map_write,
        lambda r: r.to_dict(),
        (Action.SET, Action.DELETE),
    ),
    Kind(
        "register",
        LWWRegister,
        lambda replica, key, value, removal, now: replica.set(value, now),
        lambda r: r.value,
        (Action.SET,),
    ),
]
by_name = pytest.mark.parametrize("kind", KINDS, ids=[kind.name for kind in KINDS])


@st.composite
def raw_ops(draw, kind: Kind) -> Op:
    """Ops with hand-made stamps: small ranges, so exact ties (even reused stamps) happen."""
    action = draw(st.sampled_from(kind.actions))
    stamp = Stamp(draw(st.integers(1, 4)), draw(st.integers(0, 2)), draw(st.sampled_from("abc")))
    key = "" if kind.name == "register" else draw(st.sampled_from("xyz"))
    value = draw(st.integers(0, 3)) if action is Action.SET else None
    return Op(action, stamp, key, value)


def op_lists(kind: Kind, **bounds: int):
    return st.lists(raw_ops(kind), **bounds)


def built(kind: Kind, ops, node="p"):
    replica = kind.make(HybridClock(node, max_drift_ms=DRIFT))
    for op in ops:
        replica.apply(op, FAR)
    return replica


fast = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@by_name
@fast
@given(data=st.data())
def test_any_order_and_duplication_gives_the_same_state(kind, data):
    ops = data.draw(op_lists(kind, max_size=20))
    states = []
    for _ in range(3):
        order = data.draw(st.permutations(ops))
        extra = data.draw(st.lists(st.sampled_from(ops), max_size=5)) if ops else []
        states.append(built(kind, [*order, *extra]).entries())
    assert states[0] == states[1] == states[2]


@by_name
@fast
@given(data=st.data())
def test_state_merge_is_commutative_associative_and_idempotent(kind, data):
    a, b, c = (data.draw(op_lists(kind, max_size=10)) for _ in range(3))

    def merged(*parts):
        replica = built(kind, parts[0])
        for part in parts[1:]:
            replica.merge(built(kind, part, node="q"), FAR)
        return replica.entries()

    assert merged(a, b) == merged(b, a)
    left = built(kind, a)
    left.merge(built(kind, b, node="q"), FAR)
    left.merge(built(kind, c, node="r"), FAR)
    bc = built(kind, b, node="q")
    bc.merge(built(kind, c, node="r"), FAR)
    right = built(kind, a)
    right.merge(bc, FAR)
    assert left.entries() == right.entries()
    same = built(kind, a)
    same.merge(built(kind, a, node="q"), FAR)
    assert same.entries() == built(kind, a).entries()


@by_name
@fast
@given(data=st.data())
def test_delta_sync_gives_what_state_merge_gives(kind, data):
    a, b = (data.draw(op_lists(kind, max_size=12)) for _ in range(2))
    by_merge = built(kind, a)
    by_merge.merge(built(kind, b, node="q"), FAR)
    by_delta = built(kind, a)
    sender = built(kind, b, node="q")
    by_delta.apply_delta(Delta.from_dict(sender.delta_since(by_delta.version).to_dict()), FAR)
    assert by_delta.entries() == by_merge.entries()
    everything = built(kind, a)
    everything.apply_delta(sender.delta_since(None), FAR)
    assert everything.entries() == by_merge.entries()


steps = st.tuples(
    st.sampled_from(["write", "write", "write", "deliver", "deliver", "drop", "delta", "gc"]),
    st.integers(0, 2),  # replica
    st.integers(0, 2),  # other replica
    st.sampled_from("xy"),  # key
    st.integers(0, 3),  # value
    st.booleans(),  # removal / keep a duplicate in flight
    st.integers(0, 3),  # ms to advance simulated time
    st.integers(0, 10_000),  # which in-flight message
)


@by_name
@settings(max_examples=35, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_any_schedule_with_partitions_and_gc_converges(kind, data):
    skews = data.draw(st.tuples(*[st.integers(-3, 3)] * 3))
    replicas = [kind.make(HybridClock(node, max_drift_ms=DRIFT)) for node in NODES]
    log: list[Op] = []
    in_flight: list[tuple[int, Op | Delta]] = []
    now, collected = 1_000, False

    def deliver(target: int, message: Op | Delta) -> None:
        replica = replicas[target]
        if isinstance(message, Delta):
            replica.apply_delta(message, now + skews[target])
        else:
            replica.apply(message, now + skews[target])

    for action, i, j, key, value, flag, dt, pick in data.draw(
        st.lists(steps, min_size=15, max_size=45)
    ):
        now += dt
        if action == "write":
            op = kind.write(replicas[i], key, value, flag, now + skews[i])
            log.append(op)
            in_flight += [(other, op) for other in range(3) if other != i]
        elif action in ("deliver", "drop") and in_flight:
            index = pick % len(in_flight)
            target, message = in_flight[index]
            if action == "drop" or not flag:  # flag: leave a copy in flight (a duplicate)
                del in_flight[index]
            if action == "deliver":
                deliver(target, message)
        elif action == "delta" and i != j:
            # Usually against the receiver's version; sometimes against a third replica's, as
            # when one delta is published to a whole room.
            since = replicas[i if flag else pick % 3].version
            in_flight.append((i, replicas[j].delta_since(since)))
        elif action == "gc":
            stable = stable_point([r.version for r in replicas], NODES)
            collected = collected or replicas[i].gc(stable) > 0

    # Heal: what is still in flight arrives in any order, then anti-entropy by deltas.
    for index in data.draw(st.permutations(range(len(in_flight)))):
        deliver(*in_flight[index])
    for _ in range(2):
        for receiver in replicas:
            for sender in replicas:
                receiver.apply_delta(sender.delta_since(receiver.version), now)

    # Collect at the stable point everywhere, then any ops ever sent arrive once more, in any
    # order (late retransmissions): nothing a collected tombstone beat may come back.
    stable = stable_point([r.version for r in replicas], NODES)
    dropped = [r.gc(stable) for r in replicas]  # every replica collects
    collected = collected or any(dropped)
    late = data.draw(st.lists(st.sampled_from(log), max_size=len(log))) if log else []
    for op in late:
        for target in range(3):
            deliver(target, op)

    reference = built(kind, log, node="ref")
    observed = [kind.observe(r) for r in replicas]
    assert observed == [kind.observe(reference)] * 3
    if not collected:
        assert [r.entries() for r in replicas] == [reference.entries()] * 3
