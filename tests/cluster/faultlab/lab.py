"""One run of the lab: start the cluster, run the clients under a seed's faults, check.

``python -m tests.cluster.faultlab --seeds 1-50`` runs seeds in a row (outside the test suite);
`run_seed` is what the suite's test calls for a fixed handful.
"""

from __future__ import annotations

import asyncio
import random
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.cluster.faultlab.checks import check_all
from tests.cluster.faultlab.cluster import NODE_TIMEOUT_S, Cluster
from tests.cluster.faultlab.schedule import draw, inflict
from tests.cluster.faultlab.workload import Workload

__all__ = ["Outcome", "run_seed"]

DURATION_S = 12.0
"""How long faults keep coming."""


@dataclass
class Outcome:
    """What one seed did and found."""

    seed: int
    problems: list[str] = field(default_factory=list)
    log: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """What the run saw that is neither a fault nor a problem."""
    took_s: float = 0.0
    counts: dict[str, int] = field(default_factory=dict)

    def report(self) -> str:
        """A readable account, with the command that replays it."""
        verdict = "ok" if not self.problems else f"{len(self.problems)} problem(s)"
        lines = [f"seed {self.seed}: {verdict} in {self.took_s:.0f} s {self.counts}"]
        lines += [f"  fault {line}" for line in self.log]
        lines += [f"  note  {note}" for note in self.notes]
        lines += [f"  PROBLEM {problem}" for problem in self.problems[:40]]
        if self.problems:
            lines.append(f"  replay: python -m tests.cluster.faultlab --seeds {self.seed}")
        return "\n".join(lines)


async def run_seed(seed: int, *, duration: float = DURATION_S, keep: Path | None = None) -> Outcome:
    """Run seed ``seed``; node and broker logs go to ``keep`` if given (else a temporary
    directory, removed)."""
    started = time.monotonic()
    outcome = Outcome(seed)
    with tempfile.TemporaryDirectory(prefix=f"airlane-faults-{seed}-") as tmp:
        workdir = keep or Path(tmp)
        cluster = Cluster(workdir)
        workload = Workload(cluster, random.Random(seed))
        try:
            await cluster.start()
            await workload.setup()
            workload.start()
            try:
                await inflict(cluster, draw(seed, cluster.slots, duration), outcome.log)
            finally:
                await workload.stop()
            # Everything is up again; let every node see every other before checking.
            await asyncio.sleep(NODE_TIMEOUT_S * 2)
            outcome.problems = await check_all(cluster, workload)
        finally:
            await workload.aclose()
            await cluster.stop()
        ledger = workload.ledger
        outcome.counts = {
            "acked publishes": sum(len(acked) for acked in ledger.published.values()),
            "generations": len(ledger.generations),
            "resuming reads": len(ledger.reads),
            "log records": len(ledger.log_appended),
            "deliveries": len(ledger.deliveries),
            "room ops": len(workload.rooms.acked),
            "yjs words": len(workload.yjs.confirmed),
        }
        if ledger.ack_in_doubt:  # rare, and not work done: a note, not a count
            outcome.notes.append(f"{len(ledger.ack_in_doubt)} group acks got no answer")
    outcome.took_s = time.monotonic() - started
    return outcome
