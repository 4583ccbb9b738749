"""The lab's processes: one ``nats-server -js`` and three ``airlane serve`` nodes.

Every node reaches the broker through its own `Partition` relay, so the lab can cut one node
off while the others carry on. A node is a *slot* (``n0``, ``n1``, ``n2``) holding at most one
process at a time; each process is an *incarnation* with its node id, which a restart keeps
(``same id``) or replaces (``new id``). The lab remembers every incarnation and what happened
to it, which the checks need: a stream produced by an incarnation that was killed must end with
``producer_lost``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.cluster.faultlab.proxy import Partition
from tests.natsserver import NatsServer
from tests.servers import ServerProcess, ready_server

__all__ = ["NODE_CONFIG", "Cluster", "Incarnation"]

HEARTBEAT_S = 0.2
NODE_TIMEOUT_S = 1.0
NODE_CONFIG = f"""
[synthetic]
ttft_ms = 5.0
itl_ms = 20.0
itl_jitter_ms = 0.0

[jetstream]
heartbeat_s = {HEARTBEAT_S}
node_timeout_s = {NODE_TIMEOUT_S}
unavailable_after_s = 4.0
trim_every_s = 0.5
rewrite_after_mb = 0.005
"""
"""Heartbeats fast enough that a short schedule sees deaths declared; appends give up on an
unreachable broker after 4 s (a client sees 503 rather than a hang); home logs trimmed at
every sweep and live streams rewritten once they hold 5 KB of log back (whatever the faults,
nothing a node still needs may go)."""


@dataclass
class Incarnation:
    """One process of one slot."""

    slot: str
    node_id: str
    server: ServerProcess
    started: float
    killed: float | None = None
    """When it was SIGKILLed (monotonic), if it was."""
    troubled: list[tuple[float, float]] = field(default_factory=list)
    """Intervals it was paused or cut off from the broker (its producers may be declared lost
    by the other nodes meanwhile)."""

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def alive(self) -> bool:
        return self.killed is None and self.server.process.poll() is None


class Cluster:
    """The broker and the nodes; see the module docstring."""

    def __init__(self, workdir: Path, slots: int = 3) -> None:
        self.workdir = workdir
        (workdir / "nats").mkdir(parents=True, exist_ok=True)
        self.broker = NatsServer(workdir / "nats")
        self.broker_kills: list[float] = []
        self.slots = [f"n{i}" for i in range(slots)]
        self.relays = {slot: Partition(self.broker.port) for slot in self.slots}
        self.current: dict[str, Incarnation] = {}
        self.history: list[Incarnation] = []
        self.paused: set[str] = set()
        self._ids = itertools.count()
        (workdir / "airlane.toml").write_text(NODE_CONFIG)

    # -- whole lab ------------------------------------------------------------------------

    async def start(self) -> None:
        """The broker, the relays, and one process per slot."""
        await asyncio.to_thread(self.broker.start)
        for relay in self.relays.values():
            relay.start()
        await asyncio.gather(*(self.start_node(slot, f"{slot}-0") for slot in self.slots))

    async def stop(self) -> None:
        """Everything down (SIGCONT first: a stopped process cannot act on SIGINT)."""
        for slot in list(self.paused):
            self.resume(slot)
        for incarnation in self.current.values():
            process = incarnation.server.process
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
        for incarnation in self.current.values():
            process = incarnation.server.process
            try:
                await asyncio.to_thread(process.wait, 10)
            except subprocess.TimeoutExpired:
                process.kill()
        for relay in self.relays.values():
            relay.close()
        await asyncio.to_thread(self.broker.stop)

    def live(self) -> list[Incarnation]:
        """Processes that answer now (not killed, paused or cut off)."""
        return [
            inc
            for slot, inc in self.current.items()
            if inc.alive and slot not in self.paused and not self.relays[slot].is_cut
        ]

    # -- nodes ----------------------------------------------------------------------------

    async def start_node(self, slot: str, node_id: str) -> Incarnation:
        """Start a process in ``slot`` under ``node_id``."""
        log = open(self.workdir / f"{slot}.log", "a")  # noqa: SIM115 (kept by Popen)
        log.write(f"--- {node_id} at {time.monotonic():.3f}\n")
        log.flush()
        command = [
            sys.executable, "-m", "airlane", "serve", "--port", "0",
            "--config", str(self.workdir / "airlane.toml"),
            "--hub", f"nats://127.0.0.1:{self.relays[slot].port}",
            "--node-id", node_id, "--airc-port", "-1", "--grpc-port", "-1",
            "--log-level", "warning",
        ]  # fmt: skip
        process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        log.close()
        server = await asyncio.to_thread(ready_server, process, 30.0)
        incarnation = Incarnation(slot, node_id, server, time.monotonic())
        self.current[slot] = incarnation
        self.history.append(incarnation)
        return incarnation

    async def kill_node(self, slot: str) -> Incarnation:
        """SIGKILL the slot's process."""
        incarnation = self.current[slot]
        self.paused.discard(slot)
        incarnation.server.process.kill()
        await asyncio.to_thread(incarnation.server.process.wait, 10)
        incarnation.killed = time.monotonic()
        return incarnation

    async def restart_node(self, slot: str, *, same_id: bool) -> Incarnation:
        """Start the slot again, under its last node id or a new one."""
        node_id = self.current[slot].node_id if same_id else f"{slot}-{next(self._ids) + 1}"
        return await self.start_node(slot, node_id)

    def pause(self, slot: str) -> None:
        """SIGSTOP the slot's process."""
        self.current[slot].server.process.send_signal(signal.SIGSTOP)
        self.paused.add(slot)

    def resume(self, slot: str) -> None:
        """SIGCONT it."""
        with contextlib.suppress(ProcessLookupError):
            self.current[slot].server.process.send_signal(signal.SIGCONT)
        self.paused.discard(slot)

    # -- the broker -----------------------------------------------------------------------

    async def kill_broker(self) -> None:
        """SIGKILL the broker."""
        self.broker_kills.append(time.monotonic())
        await asyncio.to_thread(self.broker.kill)

    async def start_broker(self) -> None:
        """Start it again on the same port and store."""
        await asyncio.to_thread(self.broker.start)
