"""A real Mosquitto broker for tests: a free port on 127.0.0.1, its own config and store.

`Mosquitto` runs the Debian package's binary (``scripts/setup.sh`` installs it for the test
command) with persistence on, so that it can be restarted (gracefully, or killed) on the same
port and keep the sessions and queued messages it had saved. Where the binary is missing a
test skips, except in CI (``CI=true``), where it fails.
"""

from __future__ import annotations

import contextlib
import getpass
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from tests.brokerprocess import BrokerProcess, installed

__all__ = ["Mosquitto", "mosquitto_binary", "running_mosquitto"]


def mosquitto_binary() -> str:
    """The path of ``mosquitto``; skips the test (fails it in CI) when it is missing."""
    return installed("mosquitto", "/usr/sbin/mosquitto", package="mosquitto")


class Mosquitto(BrokerProcess):
    """One broker with its own directory (config, persistence file, log)."""

    def __init__(
        self,
        directory: Path,
        port: int | None = None,
        extra: str = "",
        *,
        listener: str = "",
        allow_anonymous: bool = True,
    ) -> None:
        """``extra``: config lines appended at the end. ``listener``: lines that follow the
        ``listener PORT 127.0.0.1`` line, for that listener (TLS: ``cafile``, ``certfile``,
        ``keyfile``, ``require_certificate``). ``allow_anonymous=False`` asks every client
        for a login (give ``password_file`` in ``extra``). Files the broker reads belong in
        ``directory``: it runs as the current user."""
        super().__init__(directory / "mosquitto.log", port)
        self.binary = mosquitto_binary()
        self.directory = directory
        self.extra = extra
        self.listener = listener if not listener or listener.endswith("\n") else listener + "\n"
        self.allow_anonymous = allow_anonymous

    @property
    def url(self) -> str:
        """``mqtt://127.0.0.1:PORT``."""
        return f"mqtt://127.0.0.1:{self.port}"

    def start(self, timeout: float = 10.0) -> None:
        """Start the broker and wait until it accepts connections."""
        config = self.directory / "mosquitto.conf"
        anonymous = "true" if self.allow_anonymous else "false"
        config.write_text(
            f"listener {self.port} 127.0.0.1\n"
            f"{self.listener}"
            # Run as root, mosquitto would drop to its own user, who cannot write here.
            f"user {getpass.getuser()}\n"
            f"allow_anonymous {anonymous}\n"
            "persistence true\n"
            f"persistence_location {self.directory}/\n"
            # Saved at every change, so a killed broker keeps what it had acknowledged.
            "autosave_interval 1\n"
            "autosave_on_changes true\n"
            "max_queued_messages 100000\n"
            "log_type error\nlog_type warning\nlog_type notice\n"
            f"log_dest file {self.directory}/mosquitto.log\n" + self.extra
        )
        self.process = subprocess.Popen(
            [self.binary, "-c", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"mosquitto exited: {self.read_log()[-2000:]}")
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"mosquitto did not start in {timeout} s")


@contextlib.contextmanager
def running_mosquitto(
    extra: str = "", *, listener: str = "", allow_anonymous: bool = True
) -> Iterator[Mosquitto]:
    """A started `Mosquitto` in a temporary directory, stopped and removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="airlane-mosquitto-") as tmp:
        broker = Mosquitto(
            Path(tmp), extra=extra, listener=listener, allow_anonymous=allow_anonymous
        )
        broker.start()
        try:
            yield broker
        finally:
            broker.stop()
