"""`LocalGateway`: an ``airlane serve`` subprocess on a free loopback port, for the demo and
for ``airlane bench --spawn``; and CPU pinning of processes (`pin_process`).

The gateway is started as ``python -m airlane serve --port 0`` and its URL read from the line
it prints when ready (``airlane listening on URL``). It is stopped with SIGINT (a graceful
shutdown), then killed if it does not exit in time. Its stderr goes to a temporary file whose
tail is quoted if it fails to start.
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import IO

__all__ = [
    "DEFAULT_READY_TIMEOUT_S",
    "GatewayStartError",
    "LocalGateway",
    "pin_process",
    "pinning_plan",
]

DEFAULT_READY_TIMEOUT_S = 30.0
"""How long a starting gateway may take to print its URL."""
DEFAULT_STOP_TIMEOUT_S = 10.0
"""How long a graceful shutdown may take before the process is killed."""

_READY = re.compile(rb"airlane listening on (http://\S+)")
_MAX_READY_LINE = 4096


class GatewayStartError(RuntimeError):
    """The gateway subprocess exited or stayed silent instead of becoming ready."""


class LocalGateway:
    """A gateway subprocess; use as ``with LocalGateway() as gateway: gateway.url``."""

    def __init__(
        self,
        args: Sequence[str] = (),
        *,
        log_level: str = "warning",
        ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S,
    ) -> None:
        self.command = [
            sys.executable, "-m", "airlane", "serve", "--port", "0", "--log-level", log_level, *args
        ]  # fmt: skip
        """The command line run."""
        self.url: str | None = None
        """The base URL, once ready."""
        self._ready_timeout_s = ready_timeout_s
        self._process: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None

    @property
    def pid(self) -> int:
        """The gateway's process id."""
        if self._process is None:
            raise RuntimeError("the gateway is not running")
        return self._process.pid

    def __enter__(self) -> LocalGateway:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> str:
        """Start the process and wait for its URL.

        Raises:
            GatewayStartError: it exited or did not become ready in time.
        """
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed by stop()
        self._process = subprocess.Popen(
            self.command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        try:
            self.url = self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self.url

    def stop(self) -> None:
        """Stop the gateway (SIGINT, then SIGKILL after a grace period); idempotent."""
        process, self._process = self._process, None
        if process is not None:
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
                try:
                    process.wait(DEFAULT_STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
            if process.stdout is not None:
                process.stdout.close()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def _wait_ready(self) -> str:
        process = self._process
        assert process is not None and process.stdout is not None
        deadline = time.monotonic() + self._ready_timeout_s
        pending = b""
        while (left := deadline - time.monotonic()) > 0:
            readable, _, _ = select.select([process.stdout], [], [], min(left, 0.1))
            if readable:
                data = os.read(process.stdout.fileno(), 4096)
                if not data:
                    break
                pending += data
                match = _READY.search(pending)
                if match:
                    return match.group(1).decode()
                pending = pending[-_MAX_READY_LINE:]
            elif process.poll() is not None:
                break
        raise GatewayStartError(f"airlane serve did not become ready: {self._stderr_tail()}")

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0, os.SEEK_END)
        size = self._stderr.tell()
        self._stderr.seek(max(0, size - 2000))
        return self._stderr.read().decode(errors="replace").strip() or "(no output)"


def pinning_plan() -> tuple[set[int], set[int]] | None:
    """``(server cpus, client cpus)``: the first two CPUs this process may use, one each, so
    that gateway and load client never compete for a core; None with fewer than two."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None
    return {cpus[0]}, {cpus[1]}


def pin_process(pid: int, cpus: set[int]) -> None:
    """Restrict every thread of ``pid`` to ``cpus`` (threads it starts later inherit it).

    ``sched_setaffinity`` applies to one thread; on Linux each thread is listed under
    ``/proc/<pid>/task``. A thread that exits meanwhile is skipped.
    """
    try:
        threads = [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        threads = [pid]
    for tid in threads:
        with contextlib.suppress(ProcessLookupError):
            os.sched_setaffinity(tid, cpus)
