"""What the kernel says of this machine's TCP sockets, read from outside any process: for
tests that check a socket's lane marks (docs/lanes.md)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest


def ss_tos(port_of: str, port: int) -> str:
    """``ss --tos`` of the established TCP sockets whose ``port_of`` (``sport``: own port,
    ``dport``: peer's port) is ``port``: the DSCP shows as ``tos:0xa0`` (``tclass:`` on IPv6),
    ``SO_PRIORITY`` as ``class_id:0x6``. Without ss (iproute2) the test skips, except under
    ``CI=true``, where it fails."""
    if shutil.which("ss") is None:
        reason = "ss (iproute2) is not installed"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return subprocess.run(
        ["ss", "-tnH", "--tos", "state", "established", port_of, f"= :{port}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
