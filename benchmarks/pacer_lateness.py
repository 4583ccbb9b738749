"""How late the shared `Pacer` wakes paced sleepers, next to one ``asyncio.sleep`` per wait.

N sleepers, each with a random phase, wake every ``interval_ms`` for ``rounds`` rounds; the
script prints the distribution of (wake time - deadline). The pacer is never early (it sets
its one timer for the next whole millisecond of the loop's clock); ``asyncio.sleep`` on
uvloop can wake up to a millisecond before its deadline.

    .venv/bin/python benchmarks/pacer_lateness.py --sleepers 100 --rounds 50
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from collections.abc import Awaitable, Callable

import uvloop

from airlane.backends.pacing import Pacer


async def _measure(
    sleep_until: Callable[[int], Awaitable[None]], sleepers: int, rounds: int, interval_ns: int
) -> list[int]:
    lateness: list[int] = []

    async def sleeper() -> None:
        start = time.monotonic_ns() + random.randrange(interval_ns)
        for index in range(rounds):
            deadline = start + index * interval_ns
            await sleep_until(deadline)
            lateness.append(time.monotonic_ns() - deadline)

    await asyncio.gather(*(sleeper() for _ in range(sleepers)))
    return sorted(lateness)


async def _asyncio_sleep_until(deadline_ns: int) -> None:
    await asyncio.sleep(max(0.0, (deadline_ns - time.monotonic_ns()) / 1e9))


def _report(name: str, lateness: list[int]) -> None:
    def quantile(q: float) -> float:
        return lateness[min(len(lateness) - 1, int(q * len(lateness)))] / 1e6

    print(
        f"{name:>14}: lateness p50 {quantile(0.5):.3f} ms, p90 {quantile(0.9):.3f} ms, "
        f"p99 {quantile(0.99):.3f} ms, min {lateness[0] / 1e6:.3f} ms, "
        f"max {lateness[-1] / 1e6:.3f} ms"
    )


async def run(sleepers: int, rounds: int, interval_ms: float) -> None:
    """Measure both ways of sleeping and print them."""
    interval_ns = int(interval_ms * 1e6)
    pacer = Pacer.for_loop(None)
    _report("Pacer", await _measure(pacer.sleep_until, sleepers, rounds, interval_ns))
    _report("asyncio.sleep", await _measure(_asyncio_sleep_until, sleepers, rounds, interval_ns))


def main() -> None:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sleepers", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=50, help="wake-ups per sleeper (<= 10000)")
    parser.add_argument("--interval-ms", type=float, default=20.0)
    args = parser.parse_args()
    if not (1 <= args.sleepers <= 10_000 and 1 <= args.rounds <= 10_000):
        parser.error("--sleepers and --rounds must be between 1 and 10000")
    uvloop.run(run(args.sleepers, args.rounds, args.interval_ms))


if __name__ == "__main__":
    main()
