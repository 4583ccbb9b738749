"""The Cortex-M4 measurements of docs/airc-c.md come from benchmarks/airc_c_fit.py: it runs
here (Debian's arm-none-eabi-gcc and QEMU, which ./scripts/setup.sh --test installs), the
bare-metal program passes its own checks under the emulated M4, and the RAM promise holds."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_the_device_profile_fits_the_seed_ram_budget_and_parses_on_an_emulated_m4(
    tmp_path: Path,
) -> None:
    for tool in ("arm-none-eabi-gcc", "qemu-system-arm"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is missing: ./scripts/setup.sh --test installs it")
    out = tmp_path / "fit.json"
    subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "airc_c_fit.py"),
            "--no-host",
            "--json",
            str(out),
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    results = json.loads(out.read_text())
    assert results["fits"]["ram"]  # docs/airc-c.md: within the seed's 3.2 KB
    assert results["ram"]["conn"] + results["ram"]["out"] <= 3.2 * 1024
    assert results["sizes"]["totals"]["data"] == 0 and results["sizes"]["totals"]["bss"] == 0
    cases = results["parse"]
    assert len(cases) == 5  # each case delivered what it should (else the program exits 1)
    # More payload costs more: the count is of the parse, not of a constant.
    assert (
        cases["decoder, largest frame"]["instructions"]
        > cases["decoder, empty frame"]["instructions"] + 256
    )
    assert results["sizes"]["stack"]["worst"]["airc_receive"] > 0
