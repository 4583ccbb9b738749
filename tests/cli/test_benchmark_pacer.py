"""benchmarks/pacer_lateness.py runs and reports a pacer that is never early."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "pacer_lateness.py"


def test_pacer_lateness_smoke() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--sleepers", "5", "--rounds", "3", "--interval-ms", "2"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    pacer = re.search(r"Pacer: lateness .* min (-?[\d.]+) ms", result.stdout)
    assert pacer is not None, result.stdout
    assert float(pacer.group(1)) >= 0.0
    assert "asyncio.sleep: lateness" in result.stdout
