"""CRDT benchmark: Airlane's LWW set and map against pycrdt's Y.Map, same logical operations.

One workload: ``--replicas`` replicas (default 3) share ``--ops`` operations (adds, removes and
updates over ``--keys`` keys, from a seeded RNG), issued while they are partitioned from each
other. For each structure (an LWW element set vs a Y.Map of ``key -> True``; an LWW map vs a
Y.Map of ``key -> value``) it measures:

- **local ops/s**: applying every replica's own operations locally (Airlane: one `Op` each;
  pycrdt: one transaction, i.e. one Yjs update, each);
- **convergence after the partition heals**: every replica pulls from every other what it
  lacks (Airlane: ``delta_since(version)`` -> JSON bytes -> ``apply_delta``; pycrdt:
  ``get_update(state_vector)`` -> ``apply_update``) until all hold the same state; the time,
  the bytes exchanged and whether they agree;
- **metadata overhead**: the encoded full state (Airlane: the JSON of every winning op and
  tombstone plus the version vector; pycrdt: ``get_update()``) against the bare payload (the
  JSON of the live keys and values), and tracemalloc of one converged Airlane replica (pycrdt
  keeps its document in Rust memory, which tracemalloc does not see: reported as null).

Each timing is the median of ``--repeat`` runs, each on fresh replicas; the whole run stops
repeating once ``--max-seconds`` has passed.

    .venv/bin/python benchmarks/crdt_bench.py                 # ~10-20 s
    .venv/bin/python benchmarks/crdt_bench.py --quick         # < 3 s, a smoke test
    .venv/bin/python benchmarks/crdt_bench.py --json out.json # also write the results
    .venv/bin/python benchmarks/crdt_bench.py --json -        # JSON on stdout, no table
"""

from __future__ import annotations

import argparse
import gc
import json
import platform
import random
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import orjson
import pycrdt

from airlane.sync import Delta, HybridClock, LWWElementSet, LWWMap

MAX_OPS = 1_000_000
MAX_KEYS = 100_000
MAX_REPLICAS = 16
START_MS = 1_700_000_000_000

Workload = list[tuple[int, str, str, int]]  # (replica, action, key, value)


@dataclass(frozen=True)
class Config:
    replicas: int
    ops: int
    keys: int
    seed: int
    repeat: int
    max_seconds: float


def make_workload(config: Config, structure: str) -> Workload:
    """The same logical operations for both libraries: 60 % updates (map) or adds (set),
    40 % removes, spread over the replicas and keys at random."""
    rng = random.Random(f"{config.seed}:{structure}")
    write, removal = ("set", "delete") if structure == "map" else ("add", "remove")
    return [
        (
            rng.randrange(config.replicas),
            write if rng.random() < 0.6 else removal,
            f"key-{rng.randrange(config.keys)}",
            rng.randrange(1_000_000),
        )
        for _ in range(config.ops)
    ]


class AirlaneSide:
    """Airlane replicas for one run."""

    name = "airlane"

    def __init__(self, structure: str, replicas: int) -> None:
        kind = LWWMap if structure == "map" else LWWElementSet
        self.replicas: list[Any] = [kind(HybridClock(f"r{i}")) for i in range(replicas)]
        self.structure = structure
        self.now = [START_MS] * replicas

    def apply_local(self, workload: Workload) -> None:
        replicas, now = self.replicas, self.now
        for replica, action, key, value in workload:
            now[replica] += 1  # simulated wall clock: one ms per op
            target = replicas[replica]
            if action == "set":
                target.set(key, value, now[replica])
            elif action == "add":
                target.add(key, now[replica])
            elif action == "remove":
                target.remove(key, now[replica])
            else:
                target.delete(key, now[replica])

    def sync(self, receiver: int, sender: int) -> int:
        """Pull what ``receiver`` lacks from ``sender``, through JSON bytes; bytes sent."""
        target = self.replicas[receiver]
        wire = orjson.dumps(self.replicas[sender].delta_since(target.version).to_dict())
        target.apply_delta(Delta.from_dict(orjson.loads(wire)), max(self.now) + 1)
        return len(wire)

    def view(self, replica: int) -> object:
        target = self.replicas[replica]
        return target.to_dict() if self.structure == "map" else target.elements()

    def state_bytes(self, replica: int) -> int:
        return len(orjson.dumps(self.replicas[replica].delta_since(None).to_dict()))


class PycrdtSide:
    """pycrdt (Yjs) documents for one run, one Y.Map each."""

    name = "pycrdt"

    def __init__(self, structure: str, replicas: int) -> None:
        self.docs = [pycrdt.Doc() for _ in range(replicas)]
        self.maps = [doc.get("shared", type=pycrdt.Map) for doc in self.docs]
        self.structure = structure

    def apply_local(self, workload: Workload) -> None:
        maps = self.maps
        for replica, action, key, value in workload:
            target = maps[replica]
            if action == "set":
                target[key] = value
            elif action == "add":
                target[key] = True
            else:
                target.pop(key, None)  # Y.Map has no tombstone for a key never written

    def sync(self, receiver: int, sender: int) -> int:
        update = self.docs[sender].get_update(self.docs[receiver].get_state())
        self.docs[receiver].apply_update(update)
        return len(update)

    def view(self, replica: int) -> object:
        data = self.maps[replica].to_py() or {}
        return data if self.structure == "map" else frozenset(data)

    def state_bytes(self, replica: int) -> int:
        return len(self.docs[replica].get_update())


SIDES: dict[str, Callable[[str, int], Any]] = {"airlane": AirlaneSide, "pycrdt": PycrdtSide}


def payload_bytes(view: object) -> int:
    """The bare payload: the live keys (set) or keys and values (map), as JSON."""
    if isinstance(view, dict):
        return len(orjson.dumps(view))
    return len(orjson.dumps(sorted(view)))  # type: ignore[call-overload]


def one_run(side_name: str, structure: str, workload: Workload, replicas: int) -> dict[str, Any]:
    side = SIDES[side_name](structure, replicas)
    gc.collect()
    started = time.perf_counter()
    side.apply_local(workload)
    local_s = time.perf_counter() - started
    # Heal: every replica pulls from every other, round after round, until all agree.
    sent, rounds = 0, 0
    started = time.perf_counter()
    while True:
        rounds += 1
        for receiver in range(replicas):
            for sender in range(replicas):
                if sender != receiver:
                    sent += side.sync(receiver, sender)
        views = [side.view(r) for r in range(replicas)]
        if all(view == views[0] for view in views) or rounds == 3:
            break
    converge_s = time.perf_counter() - started
    return {
        "local_s": local_s,
        "converge_s": converge_s,
        "sync_bytes": sent,
        "rounds": rounds,
        "converged": all(view == views[0] for view in views),
        "live_keys": len(views[0]),  # type: ignore[arg-type]
        "state_bytes": side.state_bytes(0),
        "payload_bytes": payload_bytes(views[0]),
    }


def airlane_traced_bytes(structure: str, workload: Workload, replicas: int) -> int:
    """Python heap held by one converged Airlane replica (tracemalloc), built from the wire
    form so that every object it holds is allocated while tracing."""
    side = AirlaneSide(structure, replicas)
    side.apply_local(workload)
    for sender in range(1, replicas):
        side.sync(0, sender)
    wire = orjson.dumps(side.replicas[0].delta_since(None).to_dict())
    del side
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    fresh = (LWWMap if structure == "map" else LWWElementSet)(HybridClock("probe"))
    delta = Delta.from_dict(orjson.loads(wire))
    fresh.apply_delta(delta, START_MS + 10**9)
    del delta
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    del fresh
    return held


def measure(config: Config) -> dict[str, Any]:
    deadline = time.perf_counter() + config.max_seconds
    results: dict[str, Any] = {}
    for structure in ("set", "map"):
        workload = make_workload(config, structure)
        for side_name in SIDES:
            runs = []
            for _ in range(config.repeat):
                runs.append(one_run(side_name, structure, workload, config.replicas))
                if time.perf_counter() > deadline:
                    break
            last = runs[-1]
            local_s = statistics.median(run["local_s"] for run in runs)
            overhead = last["state_bytes"] / max(1, last["payload_bytes"]) - 1
            results[f"{side_name}-{structure}"] = {
                "library": side_name,
                "structure": "LWW" if side_name == "airlane" else "Y.Map",
                "runs": len(runs),
                "ops_per_s": round(config.ops / local_s),
                "converge_ms": round(statistics.median(r["converge_s"] for r in runs) * 1e3, 2),
                "converged": all(run["converged"] for run in runs),
                "sync_rounds": last["rounds"],
                "sync_bytes": last["sync_bytes"],
                "live_keys": last["live_keys"],
                "state_bytes": last["state_bytes"],
                "payload_bytes": last["payload_bytes"],
                "metadata_overhead_pct": round(overhead * 100, 1),
                "tracemalloc_bytes": (
                    airlane_traced_bytes(structure, workload, config.replicas)
                    if side_name == "airlane"
                    else None
                ),
            }
    return results


def run_all(config: Config) -> dict[str, Any]:
    started = time.perf_counter()
    results = measure(config)
    return {
        "benchmark": "crdt",
        "workload": {
            "replicas": config.replicas,
            "ops": config.ops,
            "keys": config.keys,
            "seed": config.seed,
            "mix": "60% add/update, 40% remove/delete; issued while partitioned",
        },
        "results": results,
        "environment": {
            "python": platform.python_version(),
            "pycrdt": metadata.version("pycrdt"),
            "machine": platform.machine(),
        },
        "elapsed_s": round(time.perf_counter() - started, 2),
    }


def print_table(report: dict[str, Any]) -> None:
    workload = report["workload"]
    print(
        f"CRDT benchmark: {workload['replicas']} replicas, {workload['ops']} ops over "
        f"{workload['keys']} keys ({workload['mix']})"
    )
    header = (
        f"{'library-structure':<16} {'ops/s':>10} {'converge ms':>12} {'sync KB':>9} "
        f"{'state KB':>9} {'payload KB':>11} {'overhead':>9} {'heap KB':>8}  agree"
    )
    print(header)
    print("-" * len(header))
    for name, row in report["results"].items():
        heap = row["tracemalloc_bytes"]
        print(
            f"{name:<16} {row['ops_per_s']:>10,} {row['converge_ms']:>12.1f} "
            f"{row['sync_bytes'] / 1024:>9.1f} {row['state_bytes'] / 1024:>9.1f} "
            f"{row['payload_bytes'] / 1024:>11.1f} {row['metadata_overhead_pct']:>8.0f}% "
            f"{'-' if heap is None else f'{heap / 1024:.0f}':>8}  {row['converged']}"
        )
    print(f"elapsed {report['elapsed_s']} s; pycrdt {report['environment']['pycrdt']}")


def main() -> None:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small workload: a smoke test")
    parser.add_argument("--replicas", type=int, default=3, help="replicas (default 3)")
    parser.add_argument("--ops", type=int, default=None, help="operations (default 30000)")
    parser.add_argument("--keys", type=int, default=None, help="distinct keys (default 1000)")
    parser.add_argument("--seed", type=int, default=2026, help="workload RNG seed")
    parser.add_argument("--repeat", type=int, default=None, help="runs per timing (median)")
    parser.add_argument(
        "--max-seconds", type=float, default=120.0, help="stop repeating after this long"
    )
    parser.add_argument(
        "--json", type=Path, default=None, help="write the results here ('-': stdout only)"
    )
    args = parser.parse_args()
    config = Config(
        replicas=args.replicas,
        ops=args.ops or (600 if args.quick else 30_000),
        keys=args.keys or (50 if args.quick else 1_000),
        seed=args.seed,
        repeat=args.repeat or (1 if args.quick else 3),
        max_seconds=args.max_seconds,
    )
    if not (
        2 <= config.replicas <= MAX_REPLICAS
        and 1 <= config.ops <= MAX_OPS
        and 1 <= config.keys <= MAX_KEYS
        and config.repeat >= 1
    ):
        parser.error(
            f"need 2..{MAX_REPLICAS} replicas, 1..{MAX_OPS} ops, 1..{MAX_KEYS} keys, repeat >= 1"
        )
    report = run_all(config)
    document = json.dumps(report, indent=2)
    if args.json is not None and str(args.json) == "-":
        print(document)
        return
    print_table(report)
    if args.json is not None:
        args.json.write_text(document + "\n")
        print(f"results written to {args.json}")


if __name__ == "__main__":
    sys.exit(main())
