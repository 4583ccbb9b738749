"""A real ``nats-server -js`` for tests: a free port on 127.0.0.1, a temporary store.

`NatsServer` starts the Debian package's binary (``scripts/setup.sh`` installs it for the test
command); it can be killed and restarted on the same port and store directory, which is how the
tests show that nothing JetStream acknowledged is lost across a broker restart. Where the
binary is missing a test skips, except in CI (``CI=true``), where it fails.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from tests.brokerprocess import BrokerProcess, installed

__all__ = ["NatsServer", "nats_binary", "running_nats"]


def nats_binary() -> str:
    """The path of ``nats-server``; skips the test (fails it in CI) when it is missing."""
    return installed("nats-server", package="nats-server")


class NatsServer(BrokerProcess):
    """One JetStream-enabled NATS server with its own store directory."""

    HARD_RESTART = True

    def __init__(self, store_dir: Path, port: int | None = None) -> None:
        super().__init__(store_dir / "nats-server.log", port)
        self.binary = nats_binary()
        self.store_dir = store_dir

    @property
    def url(self) -> str:
        """The client URL, ``nats://127.0.0.1:PORT``."""
        return f"nats://127.0.0.1:{self.port}"

    def start(self, timeout: float = 10.0) -> None:
        """Start the server and wait until it accepts connections."""
        log = open(self.log_path, "ab")  # noqa: SIM115 (kept by Popen)
        self.process = subprocess.Popen(
            [
                self.binary,
                "-js",
                "-a",
                "127.0.0.1",
                "-p",
                str(self.port),
                "-sd",
                str(self.store_dir / "jetstream"),
                "--server_name",
                f"test-{self.port}",
            ],
            stdout=log,
            stderr=log,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"nats-server exited: {self.read_log()[-2000:]}")
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock,
            ):
                if sock.recv(4).startswith(b"INFO"):
                    return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"nats-server did not start in {timeout} s")


@contextlib.contextmanager
def running_nats() -> Iterator[NatsServer]:
    """A started `NatsServer` in a temporary directory, stopped and removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="airlane-nats-") as tmp:
        server = NatsServer(Path(tmp))
        server.start()
        try:
            yield server
        finally:
            server.stop()
