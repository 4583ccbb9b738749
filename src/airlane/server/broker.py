"""`LocalBroker`: the ``nats-server -js`` that ``airlane serve --workers`` starts for its
workers where no hub is configured.

It stores under a directory of the one ``airlane serve`` runs in (`BROKER_DIR`), so that
streams survive a restart, and a store has one server at a time: the supervisor holds an
exclusive lock on the directory (``flock`` on its ``lock`` file) and hands it to the server
too, so the lock lasts while either lives. A second ``airlane serve --workers`` in the same
directory waits a moment for a previous broker still stopping, then says who holds the
store. The server picks its own port as it binds it and writes it down (a port found free
here and handed over could be taken in between); started again after it died, it binds
the same port, where the workers' clients reconnect. It dies with the supervisor
(`airlane.server.tether`).
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import logging
import os
import shutil
import tempfile
import time
from pathlib import Path

from airlane.server.tether import tethered

__all__ = ["BROKER_DIR", "BrokerError", "LocalBroker"]

log = logging.getLogger("airlane.workers")

BROKER_DIR = Path(".airlane/nats")
"""Where the broker keeps its streams (relative to the directory ``airlane serve`` runs in)."""
READY_S = 10.0
"""How long the started server has to say where it listens."""
LOCK_WAIT_S = 5.0
"""How long a start waits for the store's lock (a previous broker may still be stopping)."""
STOP_TIMEOUT_S = 30.0


class BrokerError(Exception):
    """What keeps the broker from starting, in one line for a person."""


class LocalBroker:
    """A started ``nats-server -js`` and the lock on its store. See the module docstring."""

    def __init__(
        self, binary: str, directory: Path, lock: int, ports_dir: Path | None = None
    ) -> None:
        self.binary = binary
        self.directory = directory
        """Where it stores (and logs)."""
        self.lock = lock
        """The descriptor holding the store's lock (the server holds a copy)."""
        if ports_dir is None:
            ports_dir = Path(tempfile.mkdtemp(prefix="airlane-nats-"))
        else:
            ports_dir.mkdir(mode=0o700)
        self.ports_dir = ports_dir
        """Where the server writes the port it bound (``--ports_file_dir``); removed at
        `stop`."""
        self.process: asyncio.subprocess.Process | None = None
        self.url = ""
        """``nats://127.0.0.1:<port>``, once it listens (the same after `restart`)."""

    @classmethod
    async def start(
        cls, directory: Path = BROKER_DIR, *, ports_dir: Path | None = None
    ) -> LocalBroker:
        """Start a server storing in ``directory``, on a port it picks; returns once it
        listens. It writes that port into ``ports_dir``, made here (inside the supervisor's
        `airlane.server.scratch.scratch_dir`, so that it goes with it however the supervisor
        ends; a temporary directory of its own by default).

        Raises:
            BrokerError: no ``nats-server`` is installed, another one uses the store, or
                it did not start in `READY_S`.
        """
        binary = shutil.which("nats-server")
        if binary is None:
            raise BrokerError(
                "--workers shares streams through a NATS JetStream broker: give --hub "
                "nats://host:4222, or install nats-server (Debian: apt-get install "
                "nats-server) and the workers get one of their own"
            )
        directory.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 (once, at start)
        broker = cls(binary, directory, await _lock_store(directory), ports_dir)
        try:
            await broker._run(-1)  # the port it binds, it picks: nothing can take it between
        except BaseException:
            await broker.stop()
            raise
        return broker

    async def restart(self) -> None:
        """Start the server again (it died) on its port and store: the workers' clients
        reconnect to the URL they know, and find what it had stored.

        Raises:
            BrokerError: it did not start in `READY_S` (its port was taken meanwhile?).
        """
        await self.wait()
        await self._run(int(self.url.rsplit(":", 1)[1]))

    async def wait(self) -> int:
        """Wait for the server to exit; its exit status."""
        assert self.process is not None
        return await self.process.wait()

    async def _run(self, port: int) -> None:
        log_path = self.directory / "nats-server.log"
        self.process = process = await asyncio.create_subprocess_exec(
            self.binary, "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", str(self.directory),
            "-l", str(log_path), "--ports_file_dir", str(self.ports_dir),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
            pass_fds=(self.lock,),  # the store stays locked while the server lives
            start_new_session=True,  # the supervisor stops it, after the workers
            preexec_fn=tethered(),
        )  # fmt: skip
        deadline = time.monotonic() + READY_S
        while time.monotonic() < deadline and process.returncode is None:
            url = self._written_url()
            if url is not None:
                self.url = url
                log.info("started nats-server on %s (storing in %s)", url, self.directory)
                return
            await asyncio.sleep(0.05)
        if process.returncode is None:
            process.kill()
            await process.wait()
        raise BrokerError(
            f"the nats-server started for the workers did not answer within {READY_S:g} "
            f"s (its log: {log_path})"
        )

    def _written_url(self) -> str | None:
        """The client URL the server wrote once it listened; None before (or while the
        file is being written)."""
        assert self.process is not None
        found = list(self.ports_dir.glob(f"*_{self.process.pid}.ports"))
        try:
            urls = json.loads(found[0].read_bytes())["nats"] if found else None
        except (OSError, ValueError, KeyError, TypeError):
            return None
        return str(urls[0]) if urls else None

    async def stop(self) -> None:
        """Stop the server (SIGTERM, SIGKILL after `STOP_TIMEOUT_S`), then let the store go."""
        process = self.process
        if process is not None and process.returncode is None:
            process.terminate()
            try:
                await asyncio.wait_for(process.wait(), STOP_TIMEOUT_S)
            except TimeoutError:
                process.kill()
                await process.wait()
        shutil.rmtree(self.ports_dir, ignore_errors=True)
        if self.lock >= 0:
            os.close(self.lock)
            self.lock = -1


async def _lock_store(directory: Path) -> int:
    """A descriptor holding the exclusive lock on ``directory``'s store, this process's pid
    written in it; waits up to `LOCK_WAIT_S` for a holder to let go.

    Raises:
        BrokerError: another process holds it still.
    """
    deadline = time.monotonic() + LOCK_WAIT_S
    while (fd := _try_lock(directory / "lock")) is None:
        if time.monotonic() >= deadline:
            raise _held_elsewhere(directory)
        await asyncio.sleep(0.1)
    return fd


def _try_lock(path: Path) -> int | None:
    """``path`` open and locked, this process's pid written in it; None if another holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _held_elsewhere(directory: Path) -> BrokerError:
    """The error for a store another process holds (named by the pid it wrote)."""
    try:
        holder = (directory / "lock").read_text(errors="replace").strip() or "unknown"
    except OSError:
        holder = "unknown"
    return BrokerError(
        f"another airlane serve --workers (pid {holder}), or its broker, keeps its streams "
        f"in {directory.resolve()}: stop it, start this one from another directory, or give "
        "both --hub nats://host:4222"
    )
