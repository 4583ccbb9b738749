"""Helpers for the command-line tests: run ``python -m airlane ...`` as a user would."""

from __future__ import annotations

import os
import subprocess
import sys


def airlane(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
    """Run the CLI to completion; wide terminal so that rich does not wrap the tables."""
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"}
    return subprocess.run(
        [sys.executable, "-m", "airlane", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )
