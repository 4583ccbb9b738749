"""How much memory a gateway process holds, read from the kernel."""

from __future__ import annotations

from pathlib import Path


def rss_mib(pid: int) -> float:
    """Resident set size of process ``pid``, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")
