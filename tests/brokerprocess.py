"""`BrokerProcess`: what the tests' broker launchers share (`tests.natsserver.NatsServer`,
`tests.mosquitto.Mosquitto`): a free loopback port, the Debian package's binary (skipped
without it, failed in CI), and stopping, killing and restarting one process on the same port
and store."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

__all__ = ["BrokerProcess", "free_port", "installed"]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def installed(name: str, *paths: str, package: str) -> str:
    """The path of the binary ``name`` (on PATH or one of ``paths``); skips the test without
    it, except in CI (``CI=true``), where it fails."""
    found = shutil.which(name) or next((p for p in paths if os.access(p, os.X_OK)), None)
    if found is None:
        message = f"{name} is not installed (Debian package {package}; scripts/setup.sh)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return found


class BrokerProcess:
    """One broker process; subclasses `start` it and name its ``log_path``."""

    HARD_RESTART = False
    """Whether `restart` kills (a crash) rather than stops, unless told."""

    def __init__(self, log_path: Path, port: int | None = None) -> None:
        self.log_path = log_path
        self.port = port or free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 10.0) -> None:
        """Start the broker and wait until it accepts connections."""
        raise NotImplementedError

    def kill(self) -> None:
        """Stop the broker with SIGKILL (a crash, for its store too)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)

    def stop(self) -> None:
        """Stop the broker gracefully (SIGTERM), SIGKILL after 10 s."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    def restart(self, *, hard: bool | None = None) -> None:
        """Kill (``hard``) or stop, and start again on the same port and store."""
        if self.HARD_RESTART if hard is None else hard:
            self.kill()
        else:
            self.stop()
        self.start()

    def read_log(self) -> str:
        """What the broker has written to its log."""
        path = self.log_path
        return path.read_text(errors="replace") if path.exists() else ""
