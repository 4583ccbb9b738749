"""Real gateway processes for integration tests: ``python -m airlane serve --port 0``.

Each server is a separate process on 127.0.0.1 with a free port, read from the line it prints
when it is ready, so the tests talk to exactly what a user runs.
"""

from __future__ import annotations

import contextlib
import os
import re
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

READY = re.compile(r"airlane listening on (https?://\S+)")
AIRC_READY = re.compile(r"AIRC on tcp(?:\+tls)?://([^\s,]+):(\d+)")
GRPC_READY = re.compile(r"gRPC on ([^\s,]+)")
H3_READY = re.compile(r"HTTP/3 on udp://\[?([^\s,\]]+)\]?:(\d+)")
RSOCKET_READY = re.compile(r"RSocket on tcp(?:\+tls)?://\[?([^\s,\]]+)\]?:(\d+)")
WAKU_READY = re.compile(r"Waku on (/\S+)")

FAST_SYNTHETIC = """
[synthetic]
ttft_ms = 5.0
itl_ms = 1.0
itl_jitter_ms = 0.5
"""
"""A config that makes the synthetic backend quick but still paced (tests)."""


@dataclass
class ServerProcess:
    """A running gateway: its base URL and process."""

    url: str
    process: subprocess.Popen[str]
    airc: tuple[str, int] | None = None
    """Host and port of the AIRC/TCP listener (None when it is off)."""
    grpc: str | None = None
    """``host:port`` of the gRPC listener (None when it is off)."""
    h3: tuple[str, int] | None = None
    """Host and UDP port of the HTTP/3 listener (None when it is off)."""
    rsocket: tuple[str, int] | None = None
    """Host and port of the RSocket/TCP listener (None when it is off)."""
    waku: str | None = None
    """The Waku node's multiaddr (None when it is off)."""

    @property
    def pid(self) -> int:
        return self.process.pid

    def kill(self) -> None:
        """Stop it hard (a crash, as far as clients can tell)."""
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()
        self.process.wait(10)


@contextlib.contextmanager
def run_server(
    *args: str,
    config: str = FAST_SYNTHETIC,
    timeout: float = 20.0,
    log_level: str = "warning",
    stderr: IO[str] | None = None,
) -> Iterator[ServerProcess]:
    """Start ``airlane serve --port 0 ARGS`` with ``config`` as its TOML file; stop it after.
    Its log goes to ``stderr`` (a file) when given, else to the test's stderr."""
    with tempfile.TemporaryDirectory() as tmp:
        config_path = Path(tmp) / "airlane.toml"
        config_path.write_text(config)
        command = [
            sys.executable,
            "-m",
            "airlane",
            "serve",
            "--port",
            "0",
            "--config",
            str(config_path),
            "--log-level",
            log_level,
            *args,
        ]
        with run_gateway(command, timeout=timeout, stderr=stderr) as running:
            yield running


@contextlib.contextmanager
def run_gateway(
    command: list[str],
    *,
    timeout: float = 20.0,
    stderr: IO[str] | None = None,
    cwd: Path | None = None,
) -> Iterator[ServerProcess]:
    """Start ``command``, a gateway that prints ``airlane serve``'s ready line; stop it
    after with SIGINT (killed if it does not stop within 10 s)."""
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        yield ready_server(process, timeout)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)


def ready_server(process: subprocess.Popen[str], timeout: float = 20.0) -> ServerProcess:
    """Wait for a started gateway's ready line (killed if it does not come in time)."""
    line = _wait_ready(process, timeout)
    match = READY.search(line)
    assert match is not None
    airc = AIRC_READY.search(line)
    grpc = GRPC_READY.search(line)
    h3 = H3_READY.search(line)
    rsocket = RSOCKET_READY.search(line)
    waku = WAKU_READY.search(line)
    return ServerProcess(
        match.group(1),
        process,
        (airc[1], int(airc[2])) if airc else None,
        grpc[1] if grpc else None,
        (h3[1], int(h3[2])) if h3 else None,
        (rsocket[1], int(rsocket[2])) if rsocket else None,
        waku[1] if waku else None,
    )


def _wait_ready(process: subprocess.Popen[str], timeout: float) -> str:
    assert process.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"airlane serve exited with {process.returncode} before ready")
        if selector.select(timeout=0.1):
            line = process.stdout.readline()
            if READY.search(line):
                return line
    process.kill()
    raise RuntimeError("airlane serve did not print its URL in time")
