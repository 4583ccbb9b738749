"""Zero-copy tensor handoff between processes (CUDA IPC) vs the host round trip.

The seed article (3.3) reports CUDA IPC taking a ResNet-50 gradient sync from 23 ms to 4 ms.
This measures the same handoff, a 25.6 M float32 gradient from a producer process to a
consumer process on one GPU, both ways (`airlane.artifacts.gpu_handoff`):

    .venv/bin/python benchmarks/cuda_ipc.py                 # needs PyTorch with CUDA
    .venv/bin/python benchmarks/cuda_ipc.py --device cpu    # the same paths in host memory
    .venv/bin/python benchmarks/cuda_ipc.py --quick         # a smoke run (small tensor)
    python3 benchmarks/cuda_ipc.py --json                   # on a GPU box without Airlane

Prints a table and, with --json, the raw numbers.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

try:
    from airlane.artifacts.gpu_handoff import (
        RESNET50_PARAMETERS,
        cuda_available,
        measure_handoff,
    )
except ImportError:  # a GPU machine with PyTorch but not Airlane's dependencies: the module
    # needs only PyTorch, so load it on its own (spawned consumers find it through sys.path).
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src" / "airlane" / "artifacts"))
    from gpu_handoff import RESNET50_PARAMETERS, cuda_available, measure_handoff  # type: ignore[no-redef]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default=None, help="cuda, cuda:N or cpu (default: cuda if any)")
    parser.add_argument("--numel", type=int, default=RESNET50_PARAMETERS)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--quick", action="store_true", help="1 M elements, 3 repeats")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    device = args.device or ("cuda" if cuda_available() else "cpu")
    numel, repeats = (1_000_000, 3) if args.quick else (args.numel, args.repeats)
    try:
        report = measure_handoff(device=device, numel=numel, repeats=repeats)
    except RuntimeError as exc:
        print(f"cannot measure: {exc}", file=sys.stderr)
        return 1
    body = report.to_json()
    if args.json:
        print(json.dumps(body, indent=2))
        return 0
    print(
        f"{body['megabytes']:.1f} MB float32 on {report.device_name} ({device}), "
        f"{repeats} handoffs each after one cold one\n"
    )
    print("| path | first ms | median ms | min ms | max ms |")
    print("|---|---|---|---|---|")
    for label, first, values in (
        (
            "zero-copy (IPC handle)" if device != "cpu" else "shared memory",
            report.shared_first_ms,
            report.shared_ms,
        ),
        (
            "host round trip" if device != "cpu" else "pickled bytes",
            report.copy_first_ms,
            report.copy_ms,
        ),
    ):
        print(
            f"| {label} | {first:.2f} | {sorted(values)[len(values) // 2]:.2f} | "
            f"{min(values):.2f} | {max(values):.2f} |"
        )
    print(f"\nspeed-up of the zero-copy path: {body['speedup']:.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
