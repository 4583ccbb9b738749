"""What clients do during a fault schedule, and the record of what the cluster acknowledged.

Clients act as a careful user's would: they talk to any node that answers, time out, and never
retry an append blindly (an append whose answer was lost is recorded as *maybe* stored). The
`Ledger` is the ground truth the checks compare the cluster against.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import random
import time
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import httpx

from tests.cluster.faultlab.clients import path, sse
from tests.cluster.faultlab.cluster import Cluster, Incarnation
from tests.cluster.faultlab.rooms import RoomWriters
from tests.cluster.faultlab.yjs import YjsWriters

__all__ = ["Ledger", "Workload", "path", "read_stream"]

NAMED = [f"lab/s{i}" for i in range(3)]
LOG = "lab"
GROUP = "workers"
ACK_WAIT_S = 1.0
REQUEST_TIMEOUT_S = 6.0
CHAT = {"model": "synthetic", "messages": [{"role": "user", "content": "go"}]}


@dataclass
class Generation:
    """A chat generation started on a node."""

    stream_id: str
    producer: Incarnation
    started: float


class Handout(NamedTuple):
    """One record handed out by a group fetch."""

    seq: int
    sent: float
    """When the fetch that got it was sent (monotonic)."""
    count: int
    """The broker's delivery count: 1 the first time."""
    node: str
    received: float
    """When the fetch's answer came (a broker killed and back meanwhile may have handed out
    records whose acks it had not flushed, as it counts them: for the first time)."""


class Ack(NamedTuple):
    """One confirmed ack of a group delivery."""

    fetched: float
    """When the fetch that delivered the record was sent."""
    sent: float
    confirmed: float
    node: str


@dataclass
class Ledger:
    """What the cluster acknowledged and what clients saw."""

    published: dict[str, dict[int, str]] = field(default_factory=dict)
    """Named stream -> seq -> the unique payload acknowledged at it."""
    maybe: set[str] = field(default_factory=set)
    """Payloads whose append got no answer: stored at most once, if at all."""
    generations: list[Generation] = field(default_factory=list)
    reads: list[tuple[str, list[dict[str, Any]]]] = field(default_factory=list)
    """Stream -> the events one resuming reader saw, in order, across its reconnections."""
    log_appended: dict[int, str] = field(default_factory=dict)
    """Event log seq -> payload, acknowledged."""
    deliveries: list[Handout] = field(default_factory=list)
    """Every record handed out: one fetched by a request sent before an ack was confirmed
    may have been in flight."""
    acked: dict[int, Ack] = field(default_factory=dict)
    """Log seq -> its ack, for acks confirmed within
    the ack wait of the fetch that delivered it (a later ack may race the broker's
    redelivery: not checked). A broker killed after the ack was sent may have confirmed it
    and not stored it yet, even where the confirmation reaches the lab after the kill."""
    settled: set[int] = field(default_factory=set)
    """Log seqs whose ack was confirmed, in time or not."""
    unacked: set[int] = field(default_factory=set)
    """Seqs delivered and deliberately left unacknowledged (owed a redelivery)."""
    ack_in_doubt: set[int] = field(default_factory=set)
    """Seqs whose ack got no answer or a failure (the node or the broker went away with it):
    the broker may have stored it (the record never comes again) or not (it comes again)."""
    errors: list[str] = field(default_factory=list)
    """Answers no client should ever get (a 500, a malformed body)."""


class Workload:
    """Producers, generations, readers and a consumer group, running until `stop`."""

    def __init__(self, cluster: Cluster, rng: random.Random) -> None:
        self.cluster = cluster
        self.rng = rng
        self.ledger = Ledger()
        self.client = httpx.AsyncClient(timeout=REQUEST_TIMEOUT_S)
        self._stop = asyncio.Event()
        self._payloads = itertools.count()
        self._tasks: list[asyncio.Task[None]] = []
        self.rooms = RoomWriters(cluster, self.client, rng)
        self.yjs = YjsWriters(cluster, rng)

    async def setup(self) -> None:
        """The named streams, the event log and the group (made once, before any fault)."""
        node = self.cluster.live()[0]
        for name in NAMED:
            response = await self.client.post(f"{node.url}/v1/streams", json={"name": name})
            assert response.status_code in (200, 201), response.text
            self.ledger.published[name] = {}
        response = await self.client.put(f"{node.url}/v1/logs/{LOG}", json={})
        assert response.status_code == 201, response.text
        response = await self.client.post(f"{node.url}/v1/logs/{LOG}/events", json={
            "type": "lab", "data": {"p": "first"}})  # fmt: skip
        assert response.status_code == 201, response.text
        self.ledger.log_appended[response.json()["records"][0]["seq"]] = "first"
        await self._fetch(node, settings={"ack_wait_s": ACK_WAIT_S, "start_seq": 1})

    def start(self) -> None:
        """Start the clients."""
        for job in (self._publisher, self._publisher, self._generations, self._readers,
                    self._log_appender, self._consumer):  # fmt: skip
            self._tasks.append(asyncio.create_task(job()))
        for writer in ("w1", "w2"):
            self._tasks.append(asyncio.create_task(self.rooms.run(self._stop, writer)))
        for editor in ("y1", "y2"):
            self._tasks.append(asyncio.create_task(self.yjs.run(self._stop, editor)))

    async def stop(self) -> None:
        """Stop the clients (each finishes the request it is in)."""
        self._stop.set()
        await asyncio.gather(*self._tasks)

    async def aclose(self) -> None:
        await self.client.aclose()

    # -- helpers --------------------------------------------------------------------------

    def _node(self) -> Incarnation | None:
        live = self.cluster.live()
        return self.rng.choice(live) if live else None

    async def _pause(self, low: float, high: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), self.rng.uniform(low, high))

    def _unexpected(self, what: str, response: httpx.Response) -> None:
        if response.status_code >= 500 and response.status_code not in (502, 503, 504):
            self.ledger.errors.append(f"{what}: {response.status_code} {response.text[:300]}")

    # -- clients --------------------------------------------------------------------------

    async def _publisher(self) -> None:
        while not self._stop.is_set():
            node, name = self._node(), self.rng.choice(NAMED)
            payload = f"p{next(self._payloads)}"
            if node is not None:
                try:
                    response = await self.client.post(
                        f"{node.url}/v1/streams/{path(name)}/events",
                        json={"kind": "message", "payload": payload},
                    )
                except httpx.HTTPError:
                    self.ledger.maybe.add(payload)
                else:
                    if response.status_code == 200:
                        (seq,) = response.json()["seq"]
                        self.ledger.published[name][seq] = payload
                    else:
                        self._unexpected("publish", response)
                        self.ledger.maybe.add(payload)
            await self._pause(0.02, 0.08)

    async def _generations(self) -> None:
        while not self._stop.is_set():
            node = self._node()
            if node is not None:
                body = {**CHAT, "max_tokens": self.rng.randint(20, 120)}
                with contextlib.suppress(httpx.HTTPError):
                    response = await self.client.post(f"{node.url}/v1/streams", json=body)
                    if response.status_code in (200, 201):
                        self.ledger.generations.append(
                            Generation(response.json()["id"], node, time.monotonic())
                        )
                    else:
                        self._unexpected("generate", response)
            await self._pause(0.3, 0.8)

    async def _readers(self) -> None:
        readers: set[asyncio.Task[None]] = set()
        while not self._stop.is_set():
            if self.ledger.generations and len(readers) < 4:
                generation = self.rng.choice(self.ledger.generations[-5:])
                task = asyncio.create_task(self._resuming_reader(generation.stream_id))
                readers.add(task)
                task.add_done_callback(readers.discard)
            await self._pause(0.2, 0.5)
        await asyncio.gather(*readers)

    async def _resuming_reader(self, stream_id: str) -> None:
        """Read a stream a few events at a time, each time from a node chosen at random,
        resuming from the last event seen, until it ends (or the lab stops)."""
        seen: list[dict[str, Any]] = []
        last_id: str | None = None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not self._stop.is_set():
            node = self._node()
            if node is None:
                await self._pause(0.1, 0.2)
                continue
            few = self.rng.randint(3, 30)
            url = f"{node.url}/v1/streams/{path(stream_id)}/events?max_events={few}"
            ended = False
            with contextlib.suppress(httpx.HTTPError, asyncio.TimeoutError):
                async with asyncio.timeout(5):
                    async for event_id, event in sse(self.client, url, last_id):
                        seen.append(event)
                        last_id = event_id
                        ended = event["kind"] in ("done", "error")
            if ended:
                break
        self.ledger.reads.append((stream_id, seen))

    async def _log_appender(self) -> None:
        while not self._stop.is_set():
            node = self._node()
            payload = f"l{next(self._payloads)}"
            if node is not None:
                with contextlib.suppress(httpx.HTTPError):
                    response = await self.client.post(
                        f"{node.url}/v1/logs/{LOG}/events",
                        json={"type": "lab", "data": {"p": payload}},
                    )
                    if response.status_code == 201:
                        seq = response.json()["records"][0]["seq"]
                        self.ledger.log_appended[seq] = payload
                    else:
                        self._unexpected("log append", response)
            await self._pause(0.05, 0.15)

    async def _consumer(self) -> None:
        while not self._stop.is_set():
            node = self._node()
            if node is not None:
                with contextlib.suppress(httpx.HTTPError):
                    await self.consume_once(node, leave_some=True)
            await self._pause(0.05, 0.2)

    async def consume_once(self, node: Incarnation, *, leave_some: bool) -> int:
        """Fetch a batch from the group and ack it (all of it, or about two thirds); return
        how many records came."""
        sent = time.monotonic()  # the broker delivered nothing of this fetch before
        deliveries = await self._fetch(node)
        if not deliveries:
            return 0
        tokens = []
        for item in deliveries:
            seq = item["record"]["seq"]
            if leave_some and self.rng.random() < 0.3:
                self.ledger.unacked.add(seq)
            else:
                tokens.append((seq, item["token"]))
        if tokens:
            acker = self._node() or node
            ack_sent = time.monotonic()
            try:
                response = await self.client.post(
                    f"{acker.url}/v1/logs/{LOG}/groups/{GROUP}/ack",
                    json={"tokens": [token for _, token in tokens]},
                )
            except httpx.HTTPError:
                self.ledger.ack_in_doubt.update(seq for seq, _ in tokens)
                raise
            if response.status_code == 200 and response.json()["settled"] == len(tokens):
                now = time.monotonic()
                for seq, _ in tokens:
                    self.ledger.settled.add(seq)
                    if now - sent < ACK_WAIT_S:
                        ack = Ack(sent, ack_sent, now, acker.node_id)
                        self.ledger.acked.setdefault(seq, ack)
            else:
                # The node settles a batch token by token: some may be stored, some not.
                self.ledger.ack_in_doubt.update(seq for seq, _ in tokens)
                self._unexpected("ack", response)
        return len(deliveries)

    async def _fetch(self, node: Incarnation, settings: dict[str, Any] | None = None) -> list[Any]:
        body = {"max_events": 20, "timeout_s": 0.3, **(settings or {})}
        sent = time.monotonic()
        response = await self.client.post(
            f"{node.url}/v1/logs/{LOG}/groups/{GROUP}/fetch", json=body
        )
        if response.status_code != 200:
            self._unexpected("fetch", response)
            return []
        received = time.monotonic()
        deliveries: list[Any] = response.json()["deliveries"]
        for item in deliveries:
            seq, count = item["record"]["seq"], item["deliveries"]
            self.ledger.deliveries.append(Handout(seq, sent, count, node.node_id, received))
        return deliveries


async def read_stream(
    client: httpx.AsyncClient, node: Incarnation, stream_id: str, timeout: float
) -> list[dict[str, Any]]:
    """Every event of a stream as ``node`` serves it, until its end (TimeoutError if it does
    not end within ``timeout``)."""
    events: list[dict[str, Any]] = []
    async with asyncio.timeout(timeout):
        info = await client.get(f"{node.url}/v1/streams/{path(stream_id)}")
        if info.status_code != 200:
            raise LookupError(f"{info.status_code} {info.text[:200]}")
        start = f"{info.json()['epoch']}:0"  # the whole history, not a snapshot and the rest
        url = f"{node.url}/v1/streams/{path(stream_id)}/events?from={start}"
        async for _, event in sse(client, url):
            events.append(event)
    return events
