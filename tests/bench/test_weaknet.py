"""The weak-network benchmark runs end to end at a smoke size: a gateway in one namespace of
the lab, a client in the other, one TCP and one HTTP/3 download each verified by SHA-256.
Only that it completes is checked; what it measures is reported by the benchmark itself
(docs/http3.md), never asserted here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from airlane.bench.netlab import netlab_available

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(180)


def test_a_smoke_run_downloads_over_tcp_and_http3() -> None:
    reason = netlab_available()
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the network lab cannot run here: {reason}")
        pytest.skip(reason)
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "weaknet.py"), "--size-mb", "0.5",
         "--loss", "5", "--variants", "tcp-bbr,h3-airlane-bbr", "--timeout-s", "60",
         "--json", "-"],
        check=False, capture_output=True, text=True, timeout=170, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    cells = {cell["variant"]: cell for cell in result["cells"]}
    assert set(cells) == {"tcp-bbr", "h3-airlane-bbr"}
    assert all(len(cell["seconds"]) == 1 and not cell["failed"] for cell in cells.values())
    assert "| 5 % |" in done.stdout  # the report's table
