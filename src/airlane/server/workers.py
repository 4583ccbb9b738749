"""`run_workers`: ``airlane serve --workers N``, N gateway processes on one set of ports.

One Python process serves from one core. To use a machine's cores, the supervisor (this
process, which serves nothing itself) starts N workers (`airlane.server.worker`), each a whole
gateway whose listeners are bound with ``SO_REUSEPORT``: the kernel spreads new connections
over them. Streams live in the hub they share, so a stream one worker produces is read,
resumed and cancelled through any other, as across the nodes of a cluster (each worker is a
node, ``<node id>-w<i>``). Where no hub is configured, the supervisor starts a real broker
for them (`airlane.server.broker`: ``nats-server -js`` storing under ``.airlane/nats``).

The supervisor fixes the listeners' ports first (a free one wherever the system was to pick:
every worker must bind the same) and holds each of them bound itself, so that nothing else
takes one before the workers bind it (a connection's ephemeral port, another server). It
prints one ready line once every worker takes connections, and restarts a worker that dies,
trying again after `RETRY_DELAY_S` where the new one does not start (at most `MAX_RESTARTS`
tries in `RESTART_WINDOW_S`; past that it stops them all and exits 1). SIGINT or SIGTERM
stops every worker as one gateway stops (gracefully; a second signal cuts the grace short),
then the broker it started (which it restarts too, should it die); a supervisor killed
outright takes them with it (`airlane.server.tether`). Each worker's ``/metrics`` shows
every worker's samples, labelled ``worker`` (`airlane.runtime.worker_metrics`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import pickle
import signal
import socket
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from airlane.runtime.worker_metrics import published_at
from airlane.server.broker import BROKER_DIR, BrokerError, LocalBroker
from airlane.server.config import ServerConfig
from airlane.server.run import ListenerError, Listening
from airlane.server.scratch import scratch_dir
from airlane.server.tether import tethered

__all__ = ["BROKER_DIR", "WorkersError", "run_workers", "worker_count"]

log = logging.getLogger("airlane.workers")

MAX_WORKERS = 256
MAX_RESTARTS = 5
RESTART_WINDOW_S = 60.0
READY_TIMEOUT_S = 60.0
RETRY_DELAY_S = 1.0
"""A worker that did not start is tried again after this pause (each try counts against
`MAX_RESTARTS`): what kept it from starting (a broker restarting, a port briefly taken) may
have passed; what never passes spends the budget and stops the supervisor."""
STOP_TIMEOUT_S = 30.0


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
        ListenerError: a listener's port cannot be bound.
        WorkersError: the broker or a worker could not start.
    """
    with _Reservations() as reserved, scratch_dir() as shared:
        settings = _fixed_ports(settings, reserved)
        broker: LocalBroker | None = None
        if settings.hub == "memory":
            try:
                broker = await LocalBroker.start(BROKER_DIR, ports_dir=shared / "nats")
            except BrokerError as exc:
                raise WorkersError(str(exc)) from None
            settings = replace(settings, hub=broker.url)
        try:
            supervisor = _Supervisor(settings, count, str(shared), reserved, broker)
            return await supervisor.run(on_ready)
        finally:
            if broker is not None:
                await broker.stop()


# -- ports -------------------------------------------------------------------------------


def _fixed_ports(settings: ServerConfig, reserved: _Reservations) -> ServerConfig:
    """``settings`` with every listener's port fixed (workers must all bind the same) and
    ``reuse_port`` on; each port an enabled listener will bind is held in ``reserved``."""
    host = settings.host
    chosen = settings.port == 0  # the system picks: so it does for the others, once, here
    port = reserved.hold("HTTP", host, settings.port)

    def pick(listener: str, enabled: bool, configured: int | None, offset: int) -> int:
        if configured:
            wanted = configured
        else:
            wanted = 0 if chosen else port + offset
        return reserved.hold(listener, host, wanted) if enabled else wanted

    airc, grpc, rsocket, http3 = settings.airc, settings.grpc, settings.rsocket, settings.http3
    # As each worker decides (`airlane.server.run`): no HTTP/3 under mutual TLS.
    mutual = settings.tls.enabled and settings.tls.client_ca_file is not None
    return replace(
        settings,
        port=port,
        reuse_port=True,
        airc=replace(airc, port=pick("AIRC", airc.enabled, airc.port, 1)),
        grpc=replace(grpc, port=pick("gRPC", grpc.enabled, grpc.port, 2)),
        rsocket=replace(rsocket, port=pick("RSocket", rsocket.enabled, rsocket.port, 3)),
        http3=replace(http3, port=pick("HTTP/3", http3.enabled and not mutual, http3.port, 0)),
    )


class _Reservations:
    """The listeners' ports, held bound by the supervisor (``SO_REUSEPORT``, as the workers
    bind them) between the moment it fixes them and the moment the workers bind them.

    A port found free and let go can be taken before a worker binds it: by another server,
    or as the ephemeral source port of any outgoing connection (the workers' own, to the
    broker). A bound socket keeps both away. A TCP socket that is bound but not listening
    takes no connections, so those are held until the supervisor ends (a restarted worker
    finds its port still free); a bound UDP socket would take its share of the datagrams, so
    those are let go once every worker listens (`release_datagrams`)."""

    def __init__(self) -> None:
        self._sockets: list[socket.socket] = []

    def hold(self, listener: str, host: str, port: int) -> int:
        """Bind ``listener``'s ``host``:``port`` (0: a port the system picks; UDP for
        ``HTTP/3``, TCP for the others) and keep it; the port.

        Raises:
            ListenerError: it cannot be bound (taken by another program, or no such address).
        """
        kind = socket.SOCK_DGRAM if listener == "HTTP/3" else socket.SOCK_STREAM
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, kind)
        try:
            if port and kind == socket.SOCK_STREAM:
                # A port given: held as a worker binds it (its last run's connections in
                # TIME_WAIT are no bar). A port the system picks has none, and without
                # SO_REUSEADDR not even a program that sets it can bind it beside this one.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((host, port))
        except OSError as exc:
            sock.close()
            raise ListenerError.of(listener, host, port, exc) from exc
        self._sockets.append(sock)
        return int(sock.getsockname()[1])

    def release_datagrams(self) -> None:
        """Let the UDP ports go (the workers listen on them now)."""
        for sock in [s for s in self._sockets if s.type == socket.SOCK_DGRAM]:
            self._sockets.remove(sock)
            sock.close()

    def __enter__(self) -> _Reservations:
        return self

    def __exit__(self, *_: object) -> None:
        for sock in self._sockets:
            sock.close()
        self._sockets.clear()


# -- the workers -----------------------------------------------------------------------------


@dataclass
class _Worker:
    name: str
    settings: ServerConfig
    process: asyncio.subprocess.Process | None = None
    listening: Listening | None = None
    forwarding: asyncio.Task[None] | None = None
    alive_at: float = 0.0
    """When it said it listens, or its metrics file last changed: the last sign that
    its loop runs (`time.monotonic`: the supervisor's own time, which a suspended machine or
    a clock set back or forth does not count as the worker's)."""
    published: float | None = None
    """Its metrics file's time when last looked at."""

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
            preexec_fn=tethered(),  # and a SIGKILL of it ends the workers too
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
        self.alive_at = time.monotonic()
        self.forwarding = asyncio.create_task(_forward(process.stdout))
        return self.listening

    def stalled_for(self, directory: Path) -> float:
        """How long its event loop has not run, as far as its metrics file tells (0 before
        it is ready); call it every second or so."""
        if self.process is None or self.process.returncode is not None or not self.alive_at:
            return 0.0
        now = time.monotonic()
        published = published_at(directory, self.name)
        if published != self.published:
            self.published = published
            self.alive_at = now
        return now - self.alive_at

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
    reserved: _Reservations = field(default_factory=_Reservations)
    """The listeners' ports, held until the workers bind them (`_Reservations`)."""
    broker: LocalBroker | None = None
    """The broker it started (watched and restarted as the workers are), if it did."""
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
                    self.reserved.release_datagrams()
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
        """Restart workers, and the broker it started, that exit, until a signal (or too
        many restarts)."""
        # An exit status, or "did not start" (`_after`) where a start failed.
        exits: dict[asyncio.Future[Any], _Worker | LocalBroker] = {
            asyncio.ensure_future(w.wait()): w for w in self.workers
        }
        if self.broker is not None:
            exits[asyncio.ensure_future(self.broker.wait())] = self.broker
        stop: asyncio.Future[Any] = asyncio.ensure_future(self.stopping.wait())
        stalls = asyncio.ensure_future(self._kill_stalled())
        try:
            while not self.stopping.is_set():
                done, _ = await asyncio.wait({stop, *exits}, return_when=asyncio.FIRST_COMPLETED)
                for finished in done - {stop}:
                    child = exits.pop(finished)
                    if self.stopping.is_set():
                        continue
                    name = f"worker {child.name}" if isinstance(child, _Worker) else "the broker"
                    log.warning("%s exited (status %s); starting it again",
                                name, finished.result())  # fmt: skip
                    if not self._may_restart():
                        log.error("%d restarts within %g s: stopping", MAX_RESTARTS,
                                  RESTART_WINDOW_S)  # fmt: skip
                        self.stopping.set()
                        break
                    try:
                        if isinstance(child, LocalBroker):
                            await child.restart()  # same port and store: clients reconnect
                        else:
                            await child.start()
                    except (WorkersError, BrokerError) as exc:
                        log.error("%s; trying again in %g s", exc, RETRY_DELAY_S)
                        exits[asyncio.ensure_future(_after(RETRY_DELAY_S))] = child
                        continue
                    exits[asyncio.ensure_future(child.wait())] = child
        finally:
            stop.cancel()
            stalls.cancel()
            for pending in exits:
                pending.cancel()

    async def _kill_stalled(self) -> None:
        """SIGKILL every worker whose loop has not run for ``worker_stall_s`` (stopped, or
        stuck): the kernel would go on giving it a share of the new connections, which would
        wait for ever. Its exit is then a death like any other (`_watch` starts it again)."""
        limit = self.settings.worker_stall_s
        if not limit:
            return
        directory = Path(self.shared)
        while True:
            await asyncio.sleep(min(1.0, limit / 4))
            for worker in self.workers:
                stalled = worker.stalled_for(directory)
                if stalled > limit:
                    log.error("worker %s has not run for %.0f s: killing it", worker.name,
                              stalled)  # fmt: skip
                    worker.alive_at = 0.0  # once
                    worker.signal(signal.SIGKILL)

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
