"""What the WebRTC tests need: aiortc (the ``webrtc`` extra, which CI installs), and a gateway
inside a network lab (`airlane.bench.netlab`), where the peers' host candidates reach it
without any packet leaving the lab's namespaces."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

import pytest

from airlane.bench.netlab import NetLab, netlab_available

GATEWAY_LOG = "gateway.log"
PROBE = "import httpx, sys; httpx.get(sys.argv[1] + '/healthz', timeout=1).raise_for_status()"


def require_aiortc() -> ModuleType:
    """aiortc; skips the test without it, except under ``CI=true``, where it fails."""
    try:
        import aiortc
    except ImportError:
        reason = "aiortc is not installed (pip install 'airlane[webrtc]')"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    return aiortc


def need(reason: str | None) -> None:
    """Skip for ``reason`` (when not None), except under ``CI=true``, where it fails."""
    if reason is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)


@contextmanager
def gateway_in_lab(
    tmp_path: Path, port: int, config_text: str = ""
) -> Iterator[tuple[NetLab, str]]:
    """A network lab with ``airlane serve`` on side b (its address, ``port``, ``config_text``
    added to its configuration); the lab and the gateway's URL, once it answers ``/healthz``
    from side a."""
    require_aiortc()
    need(netlab_available())
    config = tmp_path / "airlane.toml"
    config.write_text(
        '[synthetic]\nttft_ms = 5.0\nitl_ms = 5.0\n[rules]\ndir = "rules"\n' + config_text
    )
    with NetLab() as lab, (tmp_path / GATEWAY_LOG).open("wb") as log:
        url = f"http://{lab.addr_b}:{port}"
        server = lab.popen(
            "b",
            [
                sys.executable, "-m", "airlane", "serve", "--host", lab.addr_b,
                "--port", str(port), "--config", str(config), "--log-level", "warning",
                "--airc-port", "-1", "--grpc-port", "-1", "--http3-port", "-1",
                "--rsocket-port", "-1",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
        )  # fmt: skip
        deadline = time.monotonic() + 20
        while lab.run("a", [sys.executable, "-c", PROBE, url], capture_output=True).returncode:
            assert server.poll() is None, "the gateway exited"
            assert time.monotonic() < deadline, "the gateway never answered /healthz"
            time.sleep(0.2)
        yield lab, url


def assert_ran(done: subprocess.CompletedProcess[str], tmp_path: Path) -> None:
    """``done`` (a peer run in the lab) exited 0; else fail with its stderr and the end of the
    log of the gateway that `gateway_in_lab` ran in ``tmp_path``."""
    if done.returncode != 0:
        (tmp_path / "peer.stderr").write_text(done.stderr)  # all of it, kept by pytest
        log = (tmp_path / GATEWAY_LOG).read_text(errors="replace")[-3000:]
        pytest.fail(f"exit {done.returncode}: {done.stderr[-3000:]}\ngateway log: {log}")
