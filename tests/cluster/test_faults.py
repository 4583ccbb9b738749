"""The fault-injection lab (`tests.cluster.faultlab`) on a fixed handful of seeds.

Each seed runs a broker and three gateway nodes as real processes under its own schedule of
SIGKILLs and restarts (same and new node id), broker SIGKILLs, pauses longer than the heartbeat
timeout and partitions from the broker, while clients publish, generate, resume across nodes and
consume a group; then it checks every promise on every node. Many more seeds run outside the
suite: ``python -m tests.cluster.faultlab --seeds 1-50``.
"""

from __future__ import annotations

import pytest

from tests.cluster.faultlab.lab import run_seed
from tests.natsserver import nats_binary

SUITE_SEEDS = (2, 7, 10)
"""Between them: every fault kind, a node restarted under its id before and after the
timeout, and the broker killed while nodes were down."""


@pytest.mark.timeout(240)
@pytest.mark.parametrize("seed", SUITE_SEEDS)
async def test_every_promise_holds_under_a_seeded_fault_schedule(seed: int) -> None:
    nats_binary()  # fails in CI, skips elsewhere, when nats-server is missing
    outcome = await run_seed(seed)
    assert not outcome.problems, outcome.report()
    assert all(outcome.counts.values()), outcome.report()  # the clients really did work
