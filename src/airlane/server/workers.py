"""`run_workers`: ``airlane serve --workers N``, N gateway processes on one set of ports.

One Python process serves from one core. To use a machine's cores, the supervisor (this
process, which serves nothing itself) starts N workers (`airlane.server.worker`), each a whole
gateway whose listeners are bound with ``SO_REUSEPORT``: the kernel spreads new connections
over them. Streams live in the hub they share, so a stream one worker produces is read,
resumed and cancelled through any other, as across the nodes of a cluster (each worker is a
node, ``<node id>-w<i>``). Where no hub is configured, the supervisor starts a real broker
for them, ``nats-server -js`` on a free loopback port, storing under ``.airlane/nats``.

The supervisor fixes the listeners' ports first (a free one wherever the system was to pick:
every worker must bind the same), prints one ready line once every worker takes connections,
and restarts a worker that dies, trying again after `RETRY_DELAY_S` where the new one does
not start (at most `MAX_RESTARTS` tries in `RESTART_WINDOW_S`; past that it stops them all and
exits 1). SIGINT or SIGTERM stops every worker as one gateway stops
(gracefully; a second signal cuts the grace short), then the broker it started. Each worker's
``/metrics`` shows every worker's samples, labelled ``worker`` (`airlane.runtime.worker_metrics`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import pickle
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from airlane.server.config import ServerConfig
from airlane.server.run import Listening

__all__ = ["BROKER_DIR", "WorkersError", "run_workers", "worker_count"]

log = logging.getLogger("airlane.workers")

BROKER_DIR = Path(".airlane/nats")
"""Where the broker the supervisor starts keeps its streams (relative to the directory
``airlane serve`` runs in)."""
MAX_WORKERS = 256
MAX_RESTARTS = 5
RESTART_WINDOW_S = 60.0
READY_TIMEOUT_S = 60.0
RETRY_DELAY_S = 1.0
"""A worker that did not start is tried again after this pause (each try counts against
`MAX_RESTARTS`): what kept it from starting (a broker restarting, a port briefly taken) may
have passed; what never passes spends the budget and stops the supervisor."""
STOP_TIMEOUT_S = 30.0
BROKER_READY_S = 10.0


class WorkersError(Exception):
    """What keeps the workers from starting, in one line for a person."""


def worker_count(text: str) -> int:
    """``--workers``: a number from 1 to `MAX_WORKERS`, or ``auto`` (the cores this process
    may use). A `ValueError` otherwise."""
    if text == "auto":
        return max(1, len(os.sched_getaffinity(0)))
    try:
        count = int(text)
    except ValueError:
        raise ValueError(f"--workers takes a number or 'auto', not {text!r}") from None
    if not 1 <= count <= MAX_WORKERS:
        raise ValueError(f"--workers must be 1 to {MAX_WORKERS}, not {count}")
    return count


async def run_workers(
    settings: ServerConfig, count: int, on_ready: Callable[[ServerConfig, Listening], None]
) -> int:
    """Run ``count`` workers of ``settings`` until a signal stops them; the exit status.
    ``on_ready`` gets the workers' settings (with the hub they share) and where they listen.

    Raises:
        WorkersError: a port, the broker or a worker could not start.
    """
    settings = _fixed_ports(settings)
    broker: _Broker | None = None
    if settings.hub == "memory":
        broker = await _Broker.start(BROKER_DIR)
        settings = replace(settings, hub=broker.url)
    try:
        with tempfile.TemporaryDirectory(prefix="airlane-workers-") as shared:
            supervisor = _Supervisor(settings, count, shared)
            return await supervisor.run(on_ready)
    finally:
        if broker is not None:
            await broker.stop()


# -- ports -------------------------------------------------------------------------------


def _fixed_ports(settings: ServerConfig) -> ServerConfig:
    """``settings`` with every listener's port fixed (workers must all bind the same) and
    ``reuse_port`` on."""
    host = settings.host
    chosen = settings.port == 0  # the system picks: so it does for the others, once, here
    port = settings.port or _free_port(host, socket.SOCK_STREAM)

    def pick(configured: int | None, offset: int, kind: socket.SocketKind) -> int:
        if configured:
            return configured
        return _free_port(host, kind) if chosen else port + offset

    stream = socket.SOCK_STREAM
    return replace(
        settings,
        port=port,
        reuse_port=True,
        airc=replace(settings.airc, port=pick(settings.airc.port, 1, stream)),
        grpc=replace(settings.grpc, port=pick(settings.grpc.port, 2, stream)),
        rsocket=replace(settings.rsocket, port=pick(settings.rsocket.port, 3, stream)),
        http3=replace(settings.http3, port=pick(settings.http3.port, 0, socket.SOCK_DGRAM)),
    )


def _free_port(host: str, kind: socket.SocketKind) -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, kind) as sock:
        try:
            sock.bind((host, 0))
        except OSError as exc:
            raise WorkersError(f"cannot bind {host}: {exc.strerror or exc}") from exc
        return int(sock.getsockname()[1])


# -- the broker ------------------------------------------------------------------------------


@dataclass
class _Broker:
    """A ``nats-server -js`` of the supervisor's."""

    process: asyncio.subprocess.Process
    url: str

    @classmethod
    async def start(cls, directory: Path) -> _Broker:
        binary = shutil.which("nats-server")
        if binary is None:
            raise WorkersError(
                "--workers shares streams through a NATS JetStream broker: give --hub "
                "nats://host:4222, or install nats-server (Debian: apt-get install "
                "nats-server) and the workers get one of their own"
            )
        directory.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 (once, at start)
        port = _free_port("127.0.0.1", socket.SOCK_STREAM)
        process = await asyncio.create_subprocess_exec(
            binary, "-js", "-a", "127.0.0.1", "-p", str(port), "-sd", str(directory),
            "-l", str(directory / "nats-server.log"),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
            start_new_session=True,  # the supervisor stops it, after the workers
        )  # fmt: skip
        broker = cls(process, f"nats://127.0.0.1:{port}")
        deadline = time.monotonic() + BROKER_READY_S
        while time.monotonic() < deadline and process.returncode is None:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                await asyncio.sleep(0.05)
                continue
            writer.close()
            log.info("started nats-server on %s (storing in %s)", broker.url, directory)
            return broker
        await broker.stop()
        raise WorkersError(
            f"the nats-server started for the workers did not answer within {BROKER_READY_S:g} "
            f"s (its log: {directory / 'nats-server.log'})"
        )

    async def stop(self) -> None:
        if self.process.returncode is None:
            self.process.terminate()
            try:
                await asyncio.wait_for(self.process.wait(), STOP_TIMEOUT_S)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()


# -- the workers -----------------------------------------------------------------------------


@dataclass
class _Worker:
    name: str
    settings: ServerConfig
    process: asyncio.subprocess.Process | None = None
    listening: Listening | None = None
    forwarding: asyncio.Task[None] | None = None

    async def start(self) -> Listening:
        """Start the process; where it listens, once it does.

        Raises:
            WorkersError: it exited first (its reason is on standard error) or took too long.
        """
        self.process = process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "airlane.server.worker",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            start_new_session=True,  # a terminal's Ctrl-C reaches the supervisor alone
        )  # fmt: skip
        assert process.stdin is not None and process.stdout is not None
        process.stdin.write(pickle.dumps(self.settings))
        process.stdin.close()
        try:
            line = await asyncio.wait_for(process.stdout.readline(), READY_TIMEOUT_S)
        except TimeoutError:
            process.kill()
            raise WorkersError(
                f"worker {self.name} was not ready in {READY_TIMEOUT_S:g} s"
            ) from None
        if not line:
            code = await process.wait()
            raise WorkersError(f"worker {self.name} could not start (exit status {code})")
        self.listening = Listening(**json.loads(line))
        self.forwarding = asyncio.create_task(_forward(process.stdout))
        return self.listening

    def signal(self, sig: int) -> None:
        if self.process is not None and self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(sig)

    async def wait(self) -> int:
        assert self.process is not None
        code = await self.process.wait()
        if self.forwarding is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self.forwarding
        return code


async def _after(delay: float) -> str:
    """A failed start, reported as an exit ``delay`` seconds later (so it is tried again)."""
    await asyncio.sleep(delay)
    return "did not start"


async def _forward(stream: asyncio.StreamReader) -> None:
    """What a worker prints after its ready line, on the supervisor's standard output."""
    while line := await stream.readline():
        sys.stdout.buffer.write(line)
        sys.stdout.flush()


@dataclass
class _Supervisor:
    settings: ServerConfig
    count: int
    shared: str
    workers: list[_Worker] = field(default_factory=list)
    signals: list[int] = field(default_factory=list)
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    restarts: deque[float] = field(default_factory=deque)

    def worker_settings(self, index: int) -> ServerConfig:
        name = f"w{index}"
        base = self.settings.jetstream.node_id or socket.gethostname().split(".")[0] or "airlane"
        # Readers are handed to the worker producing their stream (airlane.runtime.handoff):
        # a worker holds only the others' streams it is asked for.
        jetstream = replace(self.settings.jetstream, node_id=f"{base}-{name}", mirror="read")
        # One Waku node (one peer id, one filter and relay state) in the first worker: the
        # streams it bridges are shared through the hub, so it sees every worker's.
        waku = self.settings.waku if index == 0 else replace(self.settings.waku, enabled=False)
        return replace(
            self.settings, worker=name, workers_dir=self.shared, jetstream=jetstream, waku=waku
        )

    async def run(self, on_ready: Callable[[ServerConfig, Listening], None]) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._caught, sig)
        try:
            self.workers = [_Worker(f"w{i}", self.worker_settings(i)) for i in range(self.count)]
            started: asyncio.Future[list[Listening]] = asyncio.gather(
                *(worker.start() for worker in self.workers)
            )
            stop = asyncio.ensure_future(self.stopping.wait())
            try:
                waiting: set[asyncio.Future[object]] = {started, stop}  # type: ignore[arg-type]
                done, _ = await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                if started in done:
                    listening = started.result()
                    on_ready(self.settings, listening[0])
                    await self._watch()
                else:
                    started.cancel()
                    with contextlib.suppress(asyncio.CancelledError, WorkersError):
                        await started
            finally:
                stop.cancel()
                await self._stop_all()
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
        if not self.signals:
            return 1  # stopped for too many restarts
        return 128 + self.signals[0]

    def _caught(self, sig: int) -> None:
        self.signals.append(sig)
        if self.stopping.is_set():  # a second signal: the workers cut their grace short
            for worker in self.workers:
                worker.signal(signal.SIGTERM)
        self.stopping.set()

    async def _watch(self) -> None:
        """Restart workers that exit, until a signal (or too many restarts)."""
        # A worker's exit status, or "did not start" (`_after`) where a start failed.
        exits: dict[asyncio.Future[Any], _Worker] = {
            asyncio.ensure_future(w.wait()): w for w in self.workers
        }
        stop: asyncio.Future[Any] = asyncio.ensure_future(self.stopping.wait())
        try:
            while not self.stopping.is_set():
                done, _ = await asyncio.wait({stop, *exits}, return_when=asyncio.FIRST_COMPLETED)
                for finished in done - {stop}:
                    worker = exits.pop(finished)
                    if self.stopping.is_set():
                        continue
                    log.warning("worker %s exited (status %s); starting it again",
                                worker.name, finished.result())  # fmt: skip
                    if not self._may_restart():
                        log.error("%d restarts within %g s: stopping", MAX_RESTARTS,
                                  RESTART_WINDOW_S)  # fmt: skip
                        self.stopping.set()
                        break
                    try:
                        await worker.start()
                    except WorkersError as exc:
                        log.error("%s; trying again in %g s", exc, RETRY_DELAY_S)
                        exits[asyncio.ensure_future(_after(RETRY_DELAY_S))] = worker
                        continue
                    exits[asyncio.ensure_future(worker.wait())] = worker
        finally:
            stop.cancel()
            for pending in exits:
                pending.cancel()

    def _may_restart(self) -> bool:
        now = time.monotonic()
        while self.restarts and now - self.restarts[0] > RESTART_WINDOW_S:
            self.restarts.popleft()
        self.restarts.append(now)
        return len(self.restarts) <= MAX_RESTARTS

    async def _stop_all(self) -> None:
        """Stop every worker: a signal each, then SIGKILL after `STOP_TIMEOUT_S`."""
        for worker in self.workers:
            worker.signal(signal.SIGTERM)
        running = [w for w in self.workers if w.process is not None]
        try:
            await asyncio.wait_for(
                asyncio.gather(*(w.wait() for w in running), return_exceptions=True),
                STOP_TIMEOUT_S,
            )
        except TimeoutError:
            for worker in running:
                worker.signal(signal.SIGKILL)
            await asyncio.gather(*(w.wait() for w in running), return_exceptions=True)
