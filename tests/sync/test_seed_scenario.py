"""The seed's cross-device scenario (chapter 3.1), as a deterministic simulation.

Three replicas ("ios", "android", "web") each hold a shared workspace: an LWW element set
(tags) and an LWW map (document fields). 127 concurrent operations are issued at random times
on random devices, broadcast with per-device latency, while "web" is partitioned away from the
other two for part of the run (messages across the cut are lost). Every 250 ms each replica
pulls a delta from each peer (anti-entropy). After the partition heals, every replica must
hold exactly the same state as a replica that saw every op: 0 % divergence. The simulated
convergence time (from heal or last op, whichever is later, to agreement) is reported.

Everything is seeded: the RNG, the clocks (simulated, skewed per device) and the network.
"""

from __future__ import annotations

import heapq
import itertools
import random
from dataclasses import dataclass, field

from airlane.sync import Delta, HybridClock, LWWElementSet, LWWMap, Op

DEVICES = {  # mean and spread of one-way latency (seed table 3.1), and wall clock skew
    "ios": (83, 12, +15),
    "android": (117, 29, -40),
    "web": (96, 18, +5),
}
OPS = 127
OPS_WINDOW_MS = 2_000
PARTITION_MS = (500, 1_400)  # web cut off from ios and android
ANTI_ENTROPY_MS = 250
KEYS = [f"field-{i}" for i in range(8)]
TAGS = [f"tag-{i}" for i in range(8)]


@dataclass
class Replica:
    name: str
    clock: HybridClock = field(init=False)
    tags: LWWElementSet = field(init=False)
    doc: LWWMap = field(init=False)

    def __post_init__(self) -> None:
        self.clock = HybridClock(self.name)
        self.tags = LWWElementSet(self.clock)
        self.doc = LWWMap(self.clock)

    def state(self) -> tuple[object, ...]:
        return (self.tags.elements(), self.doc.to_dict())


@dataclass(frozen=True)
class Outcome:
    mean_propagation_ms: float
    divergent_keys: int
    total_keys: int
    convergence_ms: int
    messages_lost: int
    ties_on_time: int


def simulate(seed: int) -> Outcome:
    rng = random.Random(seed)
    replicas = {name: Replica(name) for name in DEVICES}
    queue: list[tuple[int, int, str, object]] = []
    order = itertools.count()

    def at(when: int, kind: str, payload: object) -> None:
        heapq.heappush(queue, (when, next(order), kind, payload))

    def wall(name: str, now: int) -> int:
        return 1_700_000_000_000 + now + DEVICES[name][2]

    def cut(a: str, b: str, now: int) -> bool:
        return PARTITION_MS[0] <= now < PARTITION_MS[1] and "web" in (a, b) and a != b

    def send(src: str, dst: str, now: int, message: object) -> bool:
        if cut(src, dst, now):
            return False
        mean, spread, _ = DEVICES[dst]
        at(now + max(1, round(rng.gauss(mean, spread))), "deliver", (dst, message))
        return True

    log: list[tuple[str, Op]] = []
    for _ in range(OPS):
        at(rng.randrange(OPS_WINDOW_MS), "write", rng.choice(list(DEVICES)))
    for tick in range(0, OPS_WINDOW_MS + 3_000, ANTI_ENTROPY_MS):
        at(tick, "anti-entropy", None)

    lost = 0
    last_write = 0
    pending: dict[tuple[str, Op], int] = {}  # op -> when it was issued, until all have it
    propagation: list[int] = []
    agreed_since: int | None = None
    while queue:
        now, _, kind, payload = heapq.heappop(queue)
        if kind == "write":
            name = str(payload)
            replica, last_write = replicas[name], now
            target, op = _random_write(rng, replica, wall(name, now))
            log.append((target, op))
            pending[target, op] = now
            for peer in DEVICES:
                if peer != name:
                    lost += not send(name, peer, now, (target, op))
        elif kind == "deliver":
            dst, message = payload  # type: ignore[misc]
            _receive(replicas[dst], message, wall(dst, now))
        else:  # each replica pulls from each peer: the peer computes a delta against its version
            for name, replica in replicas.items():
                for peer in DEVICES:
                    if peer != name and not cut(name, peer, now):
                        deltas = (
                            replicas[peer].tags.delta_since(replica.tags.version),
                            replicas[peer].doc.delta_since(replica.doc.version),
                        )
                        send(peer, name, now, ("deltas", deltas))
        for (target, op), issued in list(pending.items()):
            if all(_holds(replica, target, op) for replica in replicas.values()):
                propagation.append(now - issued)
                del pending[target, op]
        states = [replica.state() for replica in replicas.values()]
        agreed = all(state == states[0] for state in states)
        if agreed and agreed_since is None:
            agreed_since = now
        elif not agreed:
            agreed_since = None

    reference = Replica("ref")
    for target, op in log:
        _receive(reference, (target, op), wall("ios", OPS_WINDOW_MS + 10_000))
    expected_tags, expected_doc = reference.state()
    divergent = 0
    for replica in replicas.values():
        tags, doc = replica.state()
        divergent += len(set(expected_tags) ^ set(tags))  # type: ignore[arg-type]
        divergent += sum(doc.get(k) != expected_doc.get(k) for k in set(doc) | set(expected_doc))  # type: ignore[union-attr]
    assert agreed_since is not None
    assert not pending
    mean_propagation = sum(propagation) / len(propagation)
    start = max(PARTITION_MS[1], last_write)
    ties = _ties([op for _, op in log])
    return Outcome(
        mean_propagation, divergent, len(TAGS) + len(KEYS), max(0, agreed_since - start), lost, ties
    )


def _random_write(rng: random.Random, replica: Replica, wall_ms: int) -> tuple[str, Op]:
    roll = rng.random()
    if roll < 0.3:
        return "tags", replica.tags.add(rng.choice(TAGS), wall_ms)
    if roll < 0.5:
        return "tags", replica.tags.remove(rng.choice(TAGS), wall_ms)
    if roll < 0.85:
        return "doc", replica.doc.set(rng.choice(KEYS), rng.randrange(1_000), wall_ms)
    return "doc", replica.doc.delete(rng.choice(KEYS), wall_ms)


def _receive(replica: Replica, message: object, wall_ms: int) -> None:
    target, body = message  # type: ignore[misc]
    if target == "deltas":
        tags_delta, doc_delta = body
        assert isinstance(tags_delta, Delta)
        replica.tags.apply_delta(tags_delta, wall_ms)
        replica.doc.apply_delta(doc_delta, wall_ms)
    elif target == "tags":
        replica.tags.apply(body, wall_ms)
    else:
        replica.doc.apply(body, wall_ms)


def _holds(replica: Replica, target: str, op: Op) -> bool:
    """True once ``replica`` holds ``op`` or a later op on its key (or, on a tie in HLC time,
    a competing op: the bias or node id then decides, the same way everywhere)."""
    entry = (replica.tags if target == "tags" else replica.doc).entry(op.key)
    return entry is not None and entry.stamp.logical >= op.stamp.logical


def _ties(ops: list[Op]) -> int:
    times = [op.stamp.wall_ms for op in ops]
    return len(times) - len(set(times))


def test_127_concurrent_ops_across_three_devices_converge_with_zero_divergence():
    outcome = simulate(seed=2026)
    assert outcome.divergent_keys == 0
    assert outcome.messages_lost > 0  # the partition really cut something
    # Pull anti-entropy every 250 ms plus one-way latency bounds the time to agree after heal.
    assert outcome.convergence_ms <= ANTI_ENTROPY_MS + 2 * 200
    print(
        f"\nseed scenario: {OPS} ops, 3 replicas, divergence "
        f"{outcome.divergent_keys / outcome.total_keys:.0%}, simulated convergence "
        f"{outcome.convergence_ms} ms after heal, mean op propagation "
        f"{outcome.mean_propagation_ms:.0f} ms, {outcome.messages_lost} messages lost"
    )


def test_the_simulation_is_deterministic_and_converges_for_other_seeds():
    assert simulate(seed=7) == simulate(seed=7)
    for seed in range(5):
        assert simulate(seed).divergent_keys == 0
