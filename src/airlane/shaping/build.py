"""Compiling the classifier (``lanes.bpf.c``, shipped in this package) with clang.

The object is cached by the source's hash, so a set-up step (``airlane shaping build``, which
``scripts/setup.sh`` runs) or the first ``attach`` pays for the compile once.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
from importlib import resources
from pathlib import Path

from airlane.shaping.errors import ShapingError

__all__ = ["SOURCE_NAME", "build_object", "default_cache_dir"]

SOURCE_NAME = "lanes.bpf.c"
_ARCH_INCLUDE = {"x86_64": "x86_64-linux-gnu", "aarch64": "aarch64-linux-gnu"}


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/airlane/bpf`` (``~/.cache/airlane/bpf``)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "airlane" / "bpf"


def build_object(cache_dir: Path | None = None) -> Path:
    """The compiled classifier: built now unless the cache holds this source's build."""
    source = resources.files("airlane.shaping").joinpath(SOURCE_NAME).read_bytes()
    digest = hashlib.sha256(source).hexdigest()[:16]
    cache = cache_dir or default_cache_dir()
    target = cache / f"lanes-{digest}.bpf.o"
    if target.is_file():
        return target
    clang = shutil.which("clang")
    if clang is None:
        raise ShapingError(
            "clang is not installed: the classifier is compiled at set-up "
            "(apt-get install clang libbpf-dev)"
        )
    if not Path("/usr/include/bpf/bpf_helpers.h").is_file():
        raise ShapingError("libbpf's headers are missing (apt-get install libbpf-dev)")
    cache.mkdir(parents=True, exist_ok=True)
    source_path = cache / f"lanes-{digest}.bpf.c"
    source_path.write_bytes(source)
    arch = _ARCH_INCLUDE.get(platform.machine(), f"{platform.machine()}-linux-gnu")
    partial = target.with_suffix(".tmp")
    done = subprocess.run(
        [clang, "-O2", "-g", "-Wall", "-Werror", "-target", "bpf",
         f"-I/usr/include/{arch}", "-c", str(source_path), "-o", str(partial)],
        capture_output=True,
        text=True,
        check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise ShapingError(f"clang could not compile the classifier: {done.stderr.strip()}")
    partial.replace(target)  # whole or not at all, for a concurrent attach
    return target
