"""A fault schedule drawn from a seed: the same seed gives the same faults at the same times."""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass

from tests.cluster.faultlab.cluster import NODE_TIMEOUT_S, Cluster

__all__ = ["FAULTS", "Fault", "draw", "inflict"]

FAULTS = ("kill-same-id", "kill-new-id", "kill-broker", "pause", "partition")


@dataclass(frozen=True)
class Fault:
    """One fault: when it starts (seconds into the schedule), what, to which slot, how long."""

    at: float
    kind: str
    slot: str
    hold: float
    """How long the node (or broker) stays down, paused or cut off."""

    def __str__(self) -> str:
        return f"{self.at:5.1f}s {self.kind:<13} {self.slot} for {self.hold:.1f}s"


def draw(seed: int, slots: list[str], duration: float) -> list[Fault]:
    """The faults of ``seed``: one at a time, from 1 s in until ``duration``."""
    rng = random.Random(seed)
    faults, at = [], 1.0
    while at < duration:
        kind = rng.choice(FAULTS)
        if kind in ("pause", "partition"):  # longer than the timeout: the node is declared dead
            hold = rng.uniform(NODE_TIMEOUT_S * 1.5, NODE_TIMEOUT_S * 3)
        elif kind == "kill-broker":
            hold = rng.uniform(0.2, 1.5)
        else:  # restarted quickly (often before the timeout) or after it
            hold = rng.uniform(0.0, NODE_TIMEOUT_S * 2)
        faults.append(Fault(round(at, 2), kind, rng.choice(slots), round(hold, 2)))
        at += hold + rng.uniform(0.5, 1.5)
    return faults


async def inflict(cluster: Cluster, faults: list[Fault], log: list[str]) -> None:
    """Run the schedule against ``cluster``, each fault undone after its hold."""
    start = time.monotonic()
    for fault in faults:
        await asyncio.sleep(max(0.0, start + fault.at - time.monotonic()))
        log.append(f"{fault} (began at {time.monotonic() - start:.1f}s)")
        slot = fault.slot
        if fault.kind.startswith("kill-") and fault.kind != "kill-broker":
            await cluster.kill_node(slot)
            await asyncio.sleep(fault.hold)
            await cluster.restart_node(slot, same_id=fault.kind == "kill-same-id")
        elif fault.kind == "kill-broker":
            await cluster.kill_broker()
            await asyncio.sleep(fault.hold)
            await cluster.start_broker()
        elif fault.kind == "pause":
            began = time.monotonic()
            cluster.pause(slot)
            await asyncio.sleep(fault.hold)
            cluster.resume(slot)
            cluster.current[slot].troubled.append((began, time.monotonic()))
        else:
            began = time.monotonic()
            cluster.relays[slot].cut()
            await asyncio.sleep(fault.hold)
            cluster.relays[slot].heal()
            cluster.current[slot].troubled.append((began, time.monotonic()))
