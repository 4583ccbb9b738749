"""Server subprocesses for ``airlane demo`` and ``airlane bench``: `ServerProcess` (any server
that prints ``listening on http://HOST:PORT`` when ready, such as the reference peers of
``airlane bench --compare``), `LocalGateway` (``airlane serve`` on a free loopback port); and
CPU pinning of processes (`pin_process`).

A server is started with ``--port 0`` and its URL read from its ready line (the gateway's
also names its AIRC/TCP listener: ``..., AIRC on tcp://HOST:PORT``). It is stopped with
SIGINT (a graceful shutdown), then killed if it does not exit in time. Its stdout and stderr go
to one temporary file, never a pipe: a pipe nobody reads once the server is up would fill and
block a chatty server. The file's tail is quoted if the server fails to start.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO
from urllib.parse import urlsplit

__all__ = [
    "DEFAULT_READY_TIMEOUT_S",
    "DEFAULT_STOP_TIMEOUT_S",
    "GatewayStartError",
    "LocalGateway",
    "ServerProcess",
    "pin_client",
    "pin_process",
    "pinning_plan",
]

DEFAULT_READY_TIMEOUT_S = 30.0
"""How long a starting server may take to print its URL."""
DEFAULT_STOP_TIMEOUT_S = 10.0
"""How long a graceful shutdown may take before the process is killed."""

READY_POLL_S = 0.02
"""How often the output file is read for the ready line while a server starts."""

_READY = re.compile(rb"listening on (http://\S+)")
_AIRC_READY = re.compile(r"AIRC on (tcp://[^\s,]+)")
_GRPC_READY = re.compile(r"gRPC on ([^\s,]+)")
_RSOCKET_READY = re.compile(r"RSocket on tcp://\[?([^\s,\]]+)\]?:(\d+)")
_MAX_READY_LINE = 4096
_TAIL_BYTES = 2000


class GatewayStartError(RuntimeError):
    """A server subprocess (the gateway or a reference peer) exited or stayed silent instead of
    becoming ready."""


class ServerProcess:
    """A server subprocess; use as ``with ServerProcess(command) as server: server.url``."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        name: str = "server",
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S,
    ) -> None:
        self.command = list(command)
        """The command line run."""
        self.name = name
        """What the server is called in messages."""
        self.url: str | None = None
        """The base URL, once ready."""
        self.ready_line = ""
        """The ready line from its URL on (as much of the line as had arrived), once ready."""
        self._cwd = cwd
        self._env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self._ready_timeout_s = ready_timeout_s
        self._process: subprocess.Popen[bytes] | None = None
        self._output: IO[bytes] | None = None

    @property
    def pid(self) -> int:
        """The server's process id."""
        if self._process is None:
            raise RuntimeError("the server is not running")
        return self._process.pid

    def __enter__(self) -> ServerProcess:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> str:
        """Start the process and wait for its URL.

        Raises:
            GatewayStartError: it could not be run, exited, or did not become ready in time.
        """
        self._output = tempfile.TemporaryFile()  # noqa: SIM115 - closed by stop()
        try:
            self._process = subprocess.Popen(
                self.command,
                stdin=subprocess.DEVNULL,
                stdout=self._output,
                stderr=subprocess.STDOUT,
                cwd=self._cwd,
                env=self._env,
            )
        except OSError as exc:
            self.stop()
            raise GatewayStartError(f"could not run {self.command[0]}: {exc}") from None
        try:
            self.url = self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self.url

    def stop(self) -> None:
        """Stop the server (SIGINT, then SIGKILL after a grace period); idempotent."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(DEFAULT_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._output is not None:
            self._output.close()
            self._output = None

    def kill(self) -> None:
        """Stop the server with SIGKILL (a crash, as its clients see it); idempotent."""
        process = self._process
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()
        self.stop()

    def _wait_ready(self) -> str:
        process, output = self._process, self._output
        assert process is not None and output is not None
        deadline = time.monotonic() + self._ready_timeout_s
        offset = 0
        pending = b""
        while True:
            # pread leaves the file offset alone: the child shares it and writes at it.
            data = os.pread(output.fileno(), 65536, offset)
            offset += len(data)
            pending = (pending + data)[-_MAX_READY_LINE:]
            match = _READY.search(pending)
            if match:
                line = pending[match.start() :].partition(b"\n")[0]
                self.ready_line = line.decode(errors="replace")
                return match.group(1).decode()
            if data:
                continue
            if process.poll() is not None or time.monotonic() >= deadline:
                break
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(READY_POLL_S)
        raise GatewayStartError(f"{self.name} did not become ready: {self.output_tail()}")

    def output_tail(self) -> str:
        """The last lines the server wrote (stdout and stderr), for error messages."""
        if self._output is None:
            return ""
        size = os.fstat(self._output.fileno()).st_size
        start = max(0, size - _TAIL_BYTES)
        tail = os.pread(self._output.fileno(), size - start, start)
        return tail.decode(errors="replace").strip() or "(no output)"


class LocalGateway(ServerProcess):
    """An ``airlane serve`` subprocess on a free loopback port (synthetic backend)."""

    def __init__(
        self,
        args: Sequence[str] = (),
        *,
        log_level: str = "warning",
        ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S,
        cwd: Path | None = None,
    ) -> None:
        super().__init__(
            [sys.executable, "-m", "airlane", "serve", "--port", "0", "--log-level", log_level,
             *args],
            name="airlane serve",
            ready_timeout_s=ready_timeout_s,
            cwd=cwd,
        )  # fmt: skip
        self.airc: tuple[str, int] | None = None
        """Host and port of its AIRC/TCP listener, once ready (None if it has none)."""
        self.grpc: str | None = None
        """``host:port`` of its gRPC listener, once ready (None if it has none)."""
        self.rsocket: tuple[str, int] | None = None
        """Host and port of its RSocket/TCP listener, once ready (None if it has none)."""

    def __enter__(self) -> LocalGateway:
        self.start()
        return self

    def start(self) -> str:
        """Start the gateway; read its URL and its AIRC/TCP address from the ready line.

        Raises:
            GatewayStartError: it could not be run, exited, or did not become ready in time.
        """
        url = super().start()
        match = _AIRC_READY.search(self.ready_line)
        self.airc = None
        if match is not None:
            parts = urlsplit(match.group(1))
            with contextlib.suppress(ValueError):
                if parts.hostname is not None and parts.port is not None:
                    self.airc = (parts.hostname, parts.port)
        grpc = _GRPC_READY.search(self.ready_line)
        self.grpc = grpc.group(1) if grpc is not None else None
        rsocket = _RSOCKET_READY.search(self.ready_line)
        self.rsocket = (rsocket[1], int(rsocket[2])) if rsocket is not None else None
        return url


def pinning_plan() -> tuple[set[int], set[int]] | None:
    """``(server cpus, client cpus)``: the first two CPUs this process may use, one each, so
    that gateway and load client never compete for a core; None with fewer than two."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None
    return {cpus[0]}, {cpus[1]}


def pin_client() -> tuple[set[int] | None, dict[str, list[int]] | None]:
    """Pin this process (the load client) to its core of `pinning_plan`; return the server
    cores, for `pin_process` on each server started, and the pinning as a report records it.
    ``(None, None)`` with fewer than two cores."""
    plan = pinning_plan()
    if plan is None:
        return None, None
    server_cpus, client_cpus = plan
    pin_process(os.getpid(), client_cpus)
    return server_cpus, {"server": sorted(server_cpus), "client": sorted(client_cpus)}


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
