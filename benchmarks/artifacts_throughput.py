"""Artifact pipeline throughput: pack, verify and pull, against the machine's ceilings.

The ceilings are what any tool pays at least on this machine for the same bytes: a plain file
copy (``shutil.copyfile``), reading and hashing with SHA-256, and with XXH3-128. The pipeline:

- pack: copy into the store + content-defined chunking + XXH3 and Adler-32 per chunk + SHA-256
  per file and per artifact (`airlane.artifacts.packer`);
- verify: re-read and check every chunk, file and the artifact (`verify_directory`);
- pull: a real ``airlane serve --artifacts`` process on 127.0.0.1 and `pull` with 4 parallel
  chunk-aligned ranges into a fresh directory, every chunk verified, then SHA-256 and commit.

Files are in the page cache (each is read once before it is timed), so these are CPU ceilings,
not disk ones. Run:

    .venv/bin/python benchmarks/artifacts_throughput.py              # 512 MB
    .venv/bin/python benchmarks/artifacts_throughput.py --size-mb 64 --quick
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import mmap
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import xxhash
from safetensors.numpy import save_file

from airlane.artifacts.checksums import adler32_pieces
from airlane.artifacts.fetch import PullOptions, pull
from airlane.artifacts.packer import pack
from airlane.artifacts.verify import verify_directory


def _checkpoint(path: Path, size_mb: int) -> Path:
    """Random float32 weights in 64 tensors (random bytes: no chunk repeats)."""
    rng = np.random.default_rng(7)
    per_tensor = size_mb * 1024 * 1024 // 4 // 64
    tensors = {
        f"model.layers.{i}.mlp.weight": rng.standard_normal(per_tensor, dtype=np.float32)
        for i in range(64)
    }
    save_file(tensors, str(path))
    return path


def _best(runs: int, action: Callable[[], object]) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return min(times)


def _hash_file(path: Path, kind: str) -> None:
    with path.open("rb") as fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as data:
        view = memoryview(data)
        if kind == "sha256":
            hashlib.sha256(view).hexdigest()
        elif kind == "xxh3":
            xxhash.xxh3_128_hexdigest(view)
        else:
            adler32_pieces(view)
        view.release()


async def _pull_once(url: str, dest: Path) -> float:
    started = time.perf_counter()
    await pull(f"{url}/v1/artifacts", "bench", dest, "1", options=PullOptions(parallel=4))
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=512)
    parser.add_argument("--runs", type=int, default=3, help="best of this many")
    parser.add_argument("--quick", action="store_true", help="one run each (CI smoke)")
    args = parser.parse_args()
    runs = 1 if args.quick else args.runs
    with tempfile.TemporaryDirectory(prefix="airlane-bench-") as tmp:
        work = Path(tmp)
        source = _checkpoint(work / "model.safetensors", args.size_mb)
        size = source.stat().st_size
        source.read_bytes()  # into the page cache
        rows: list[tuple[str, float]] = []
        copy_target = work / "copy.safetensors"
        rows.append(
            (
                "ceiling: plain copy (shutil.copyfile)",
                _best(runs, lambda: shutil.copyfile(source, copy_target)),
            )
        )
        for kind, label in (
            ("sha256", "SHA-256"),
            ("xxh3", "XXH3-128"),
            ("adler", "Adler-32 per KiB"),
        ):
            rows.append(
                (f"ceiling: read + {label}", _best(runs, lambda k=kind: _hash_file(source, k)))
            )
        store = work / "store"
        counter = iter(range(1_000_000))

        def pack_once() -> None:
            version = f"v{next(counter)}"
            pack([source], store, name="scratch", version=version)
            shutil.rmtree(store / "scratch" / version)

        rows.append(("airlane pack (copy + chunk + hash)", _best(runs, pack_once)))
        pack([source], store, name="bench", version="1")
        version_dir = store / "bench" / "1"
        rows.append(("airlane verify", _best(runs, lambda: verify_directory(version_dir))))
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "airlane",
                "serve",
                "--port",
                "0",
                "--artifacts",
                str(store),
                "--airc-port",
                "-1",
                "--grpc-port",
                "-1",
                "--log-level",
                "warning",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert process.stdout is not None
            url = re.search(r"listening on (http://\S+)", process.stdout.readline())[1]  # type: ignore[index]
            pulls = []
            for attempt in range(runs):
                dest = work / f"dest{attempt}"
                pulls.append(asyncio.run(_pull_once(url, dest)))
                shutil.rmtree(dest)
            rows.append(("airlane pull (HTTP, 4 ranges, verified)", min(pulls)))
        finally:
            process.terminate()
            process.wait(10)
    print(f"{size / 1e6:.0f} MB safetensors file, best of {runs}, {os.cpu_count()} CPUs\n")
    print("| step | seconds | MB/s |")
    print("|---|---|---|")
    for label, seconds in rows:
        print(f"| {label} | {seconds:.3f} | {size / seconds / 1e6:,.0f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
