"""The TypeScript client (``clients/js``): where it is, and building it with its own compiler."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

CLIENT_DIR = Path(__file__).resolve().parents[2] / "clients" / "js"
TSC = CLIENT_DIR / "node_modules" / "typescript" / "bin" / "tsc"


def node_or_skip() -> str:
    """``node``, with the client's development packages installed (``scripts/setup.sh --test``
    runs ``npm ci`` there); skips without them, except under ``CI=true``, where it fails."""
    node = shutil.which("node")
    missing = None
    if node is None:
        missing = "node is not installed"
    elif not TSC.is_file():
        missing = f"run 'npm ci --prefix {CLIENT_DIR}' first"
    if missing is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(missing)
        pytest.skip(missing)
    assert node is not None
    return node


def build(node: str, *args: str) -> None:
    """Compile the client with ``tsc`` (``-p clients/js/tsconfig.json`` and ``args``); fails
    the test with the compiler's messages."""
    done = subprocess.run(
        [node, str(TSC), "-p", str(CLIENT_DIR / "tsconfig.json"), *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
