"""``python -m tests.cluster.faultlab --seeds 1-50 [--duration 12] [--keep DIR]``."""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
from pathlib import Path

from tests.cluster.faultlab.lab import DURATION_S, run_seed


def seeds(text: str) -> list[int]:
    """``7``, ``1-50`` or ``3,9,12``."""
    out: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        out.extend(range(int(low), int(high or low) + 1))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seeds", type=seeds, default=seeds("1-50"))
    parser.add_argument("--duration", type=float, default=DURATION_S)
    parser.add_argument("--keep", type=Path, help="keep each seed's logs under DIR/<seed>")
    parser.add_argument("--keep-going", action="store_true", help="do not stop at a failure")
    args = parser.parse_args()
    failed = []
    for seed in args.seeds:
        keep = None
        if args.keep is not None:
            keep = args.keep / str(seed)
            shutil.rmtree(keep, ignore_errors=True)  # a broker store from an earlier run
            keep.mkdir(parents=True)
        outcome = asyncio.run(run_seed(seed, duration=args.duration, keep=keep))
        print(outcome.report(), flush=True)
        if outcome.problems:
            failed.append(seed)
            if not args.keep_going:
                break
    print(f"failed seeds: {failed}" if failed else f"all {len(args.seeds)} seeds passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
