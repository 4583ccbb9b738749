"""`WakuNode`: the Waku service node, listening beside the gateway.

It owns its listeners (a WebSocket one for js-waku, optionally TCP), its connections (each a
`PeerConnection` task, at most `WakuConfig.max_peers`), the bridge to Airlane's streams and the
filter service. Its identity (Ed25519) is kept in a key file, so its peer id, and with it the
multiaddr clients are configured with, survives restarts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from websockets.asyncio.server import Server, ServerConnection, serve

from airlane.transports.waku.bridge import WakuBridge
from airlane.transports.waku.config import WakuConfig
from airlane.transports.waku.connection import PeerConnection
from airlane.transports.waku.filter import FilterService
from airlane.transports.waku.pipe import MAX_FRAME, Pipe, TcpPipe, WebSocketPipe, open_pipe
from airlane.transports.waku.relay import RelayService
from airlane.transports.waku.service import handlers
from airlane.wire.errors import DecodeError, WireError
from airlane.wire.libp2p import Identity, Multiaddr, PeerId
from airlane.wire.waku import PEER_EXCHANGE, PeerExchangeQuery, PeerExchangeResponse
from airlane.wire.waku.enr import Enr

if TYPE_CHECKING:
    from airlane.core import StreamInfo
    from airlane.gateway import Gateway

__all__ = ["NodeStats", "WakuNode", "load_identity"]

log = logging.getLogger("airlane.waku")

MAX_RECORDS = 64
"""Peer records kept (and asked for) at most."""
REDIAL_MIN_S = 0.5
REDIAL_MAX_S = 10.0
"""Backoff between dials of a configured peer that is away."""


@dataclass(slots=True)
class NodeStats:
    """Counters for /metrics and tests."""

    connections: int = 0
    refused_connections: int = 0
    pushed_in: int = 0


def load_identity(path: Path, key_type: str = "secp256k1") -> Identity:
    """The identity kept at ``path`` (libp2p's ``PrivateKey`` message, or a bare Ed25519
    seed), made with ``key_type`` and written, owner-only, if missing.

    Raises:
        ValueError: the file exists but holds no key.
    """
    try:
        stored = path.read_bytes()
    except FileNotFoundError:
        identity = Identity.generate(key_type)
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "wb") as out:
            out.write(identity.to_bytes())
        return identity
    try:
        return Identity.from_bytes(stored)
    except DecodeError:
        raise ValueError(f"{path} does not hold a Waku node key") from None


class WakuNode:
    """The service node; `start`, later `aclose`."""

    def __init__(
        self,
        gateway: Gateway,
        config: WakuConfig,
        *,
        host: str = "127.0.0.1",
        identity: Identity | None = None,
        agent: str = "airlane",
    ) -> None:
        self.config = config
        self.gateway = gateway
        self.host = config.host or host
        key_file = Path(config.key_file or Path(".airlane") / "waku" / "node.key")
        self.identity = identity or load_identity(key_file, config.key_type)
        self.agent = agent
        """What identify says the node runs (the composition root adds the version)."""
        self.bridge = WakuBridge(gateway, config)
        self.filter = FilterService(self.bridge, config, self.connection_to)
        self.relay: RelayService | None = RelayService(self) if config.relay else None
        self.handlers = handlers(self)
        self.stats = NodeStats()
        self.listen_addrs: list[Multiaddr] = []
        """Where the node listens (without its peer id)."""
        self._connections: dict[PeerId, list[PeerConnection]] = {}
        self._pending = 0  # connections still upgrading
        self._ws: Server | None = None
        self._tcp: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._closed = False
        self._record: Enr | None = None
        self._peer_records: dict[PeerId, bytes] = {}

    @property
    def peer_id(self) -> PeerId:
        """This node's peer id."""
        return self.identity.peer_id

    @property
    def multiaddrs(self) -> list[Multiaddr]:
        """The addresses a client dials, with ``/p2p/<peer id>``."""
        return [address.with_peer(self.peer_id) for address in self.listen_addrs]

    async def start(self) -> None:
        """Listen, start the filter service and relay, and dial the configured peers.

        Raises:
            OSError: a port cannot be bound.
        """
        await self.filter.start()
        self._ws = await serve(
            self._on_websocket,
            self.host,
            self.config.port,
            max_size=MAX_FRAME,
            compression=None,
            max_queue=16,
        )
        port = _bound_port(self._ws.sockets)
        self.listen_addrs.append(Multiaddr.of(self.host, port, ws=True))
        if self.config.tcp_port is not None:
            self._tcp = await asyncio.start_server(self._on_tcp, self.host, self.config.tcp_port)
            tcp_port = _bound_port(self._tcp.sockets)
            self.listen_addrs.append(Multiaddr.of(self.host, tcp_port, ws=False))
        for address in self.multiaddrs:
            log.info("waku: listening on %s", address)
        self._make_record()
        if self.relay is not None:
            await self.relay.start()
        for peer in self.config.peers:
            task = asyncio.create_task(self._keep_peer(Multiaddr.parse(peer)))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def aclose(self) -> None:
        """Stop listening, close every connection, stop the filter service (idempotent)."""
        if self._closed:
            return
        self._closed = True
        if self._ws is not None:
            self._ws.close()
        if self._tcp is not None:
            self._tcp.close()
        for connections in list(self._connections.values()):
            for connection in connections:
                await connection.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._ws is not None:
            with contextlib.suppress(Exception):
                await self._ws.wait_closed()
        if self._tcp is not None:
            with contextlib.suppress(Exception):
                await self._tcp.wait_closed()
        await self.filter.aclose()
        if self.relay is not None:
            await self.relay.aclose()

    # -- connections ------------------------------------------------------------------------

    @property
    def open_connections(self) -> int:
        """Connections held now (upgraded)."""
        return sum(len(connections) for connections in self._connections.values())

    def connection_to(self, peer: PeerId) -> PeerConnection | None:
        """The newest open connection to ``peer``."""
        for connection in reversed(self._connections.get(peer, [])):
            if connection.ready.is_set() and not connection.closed.is_set():
                return connection
        return None

    def relay_peer_count(self) -> int:
        """Relay peers connected (what a light push answer reports)."""
        return 0 if self.relay is None else self.relay.peer_count

    async def content_topics(self) -> list[str]:
        """The content topics this node keeps (a store query that names none, relay): those
        routed to event logs, and those with streams, at most 1,000."""
        return [topic for topic, _ in await self.content_topic_streams()]

    async def content_topic_streams(self) -> list[tuple[str, StreamInfo | None]]:
        """`content_topics`, each with its stream's info (None for a topic routed to an event
        log): how far each stream is, for relay."""
        bridge = self.bridge
        infos = await self.gateway.list_streams(
            bridge.principal, prefix=self.config.stream_prefix + "/", limit=1000
        )
        routed: list[tuple[str, StreamInfo | None]] = [(t, None) for t in bridge.logs.routes]
        streams: list[tuple[str, StreamInfo | None]] = [
            (topic, info)
            for info in infos
            if (topic := bridge.content_topic_of(info.stream_id)) is not None
        ]
        return routed + streams[: 1000 - len(routed)]

    def record(self) -> Enr | None:
        """This node's own record (made once it listens), if its key is secp256k1."""
        return self._record

    def exchange_records(self, count: int) -> tuple[bytes, ...]:
        """Records for peer exchange, at most ``count``: this node's own, then those its
        relay peers gave it for themselves."""
        records = [self._record.encode()] if self._record is not None else []
        records += list(self._peer_records.values())
        return tuple(records[: max(0, count)])

    def learn_record(self, peer: PeerId, raw: bytes) -> bool:
        """Keep ``raw`` if it is a valid record of ``peer`` itself (its key is the peer's)."""
        try:
            record = Enr.decode(raw)
        except DecodeError:
            return False
        if record.peer_id() != peer:
            return False
        self._peer_records.pop(peer, None)
        self._peer_records[peer] = raw
        while len(self._peer_records) > MAX_RECORDS:
            self._peer_records.pop(next(iter(self._peer_records)))
        return True

    def _make_record(self) -> None:
        key = self.identity.secp256k1
        if key is None:
            return
        config = self.config
        tcp = next((a for a in self.listen_addrs if a.value("ws") is None), None)
        ip = tcp.value("ip4") if tcp is not None else None
        self._record = Enr.make(
            key,
            seq=int(time.time()),
            multiaddrs=tuple(a for a in self.listen_addrs if a.value("ws") is not None),
            ip=ip,
            tcp=int(tcp.value("tcp") or 0) if ip is not None and tcp is not None else None,
            cluster=config.cluster_id,
            shards=config.shards,
        )

    async def _on_websocket(self, ws: ServerConnection) -> None:
        await self._serve(WebSocketPipe(ws))

    async def _on_tcp(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await self._serve(TcpPipe(reader, writer))

    async def _serve(self, pipe: Pipe) -> None:
        held = sum(len(c) for c in self._connections.values()) + self._pending
        if held >= self.config.max_peers:
            self.stats.refused_connections += 1
            await pipe.close()
            return
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await self._run(self._connection(pipe, initiator=False))
        finally:
            if task is not None:
                self._tasks.discard(task)

    def _connection(
        self, pipe: Pipe, *, initiator: bool, remote: PeerId | None = None
    ) -> PeerConnection:
        config = self.config
        return PeerConnection(
            pipe,
            self.identity,
            self.handlers,
            initiator=initiator,
            remote=remote,
            max_streams=config.max_streams,
            stream_buffer=config.stream_buffer,
            handshake_timeout_s=config.handshake_timeout_s,
        )

    async def _run(self, connection: PeerConnection, dialled: asyncio.Event | None = None) -> None:
        """Drive ``connection`` to its end, held in the peer table while it is up."""
        self._pending += 1
        upgrading = True
        registered: PeerId | None = None
        runner = asyncio.ensure_future(connection.run())
        ready = asyncio.ensure_future(connection.ready.wait())
        try:
            await asyncio.wait({ready, runner}, return_when=asyncio.FIRST_COMPLETED)
            self._pending -= 1
            upgrading = False
            if connection.ready.is_set() and connection.peer is not None:
                registered = connection.peer
                self._connections.setdefault(registered, []).append(connection)
                self.stats.connections += 1
            if dialled is not None:
                dialled.set()
            await runner
        finally:
            if upgrading:
                self._pending -= 1
            ready.cancel()
            if not runner.done():
                runner.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await runner
            if registered is not None:
                same_peer = self._connections.get(registered, [])
                if connection in same_peer:
                    same_peer.remove(connection)
                if not same_peer:
                    self._connections.pop(registered, None)

    # -- dialling ---------------------------------------------------------------------------

    async def dial(self, address: Multiaddr) -> PeerConnection:
        """Connect to the node at ``address`` (``/ws`` for WebSocket, else TCP; with its
        ``/p2p/`` id) and relay with it; the connection runs as the node's task.

        Raises:
            ConnectionError: it cannot be reached, or the handshake failed.
            TimeoutError: the handshake took longer than the configured timeout.
        """
        async with asyncio.timeout(self.config.handshake_timeout_s):
            pipe = await open_pipe(address)
        connection = self._connection(pipe, initiator=True, remote=address.peer_id())
        dialled = asyncio.Event()
        task = asyncio.create_task(self._run(connection, dialled), name=f"waku-dial {address}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        await dialled.wait()
        if not connection.ready.is_set():
            raise ConnectionError(f"the libp2p handshake with {address} failed")
        if self.relay is not None:
            await self.relay.attach(connection)
        connection.spawn(self._ask_record(connection))
        return connection

    async def _ask_record(self, connection: PeerConnection) -> None:
        """Ask a node this one dialled for its peers, and keep its own record (what peer
        exchange then gives light nodes)."""
        peer = connection.peer
        try:
            stream = await connection.open_stream(PEER_EXCHANGE)
            await stream.write_message(PeerExchangeQuery(MAX_RECORDS).encode())
            await stream.close()
            async with asyncio.timeout(self.config.request_timeout_s):
                raw = await stream.read_message(64 * 1024)
            connection.release(stream)
        except (ConnectionError, OSError, TimeoutError, WireError) as exc:
            log.debug("waku: no peer records from %s: %s", peer, exc)
            return
        if raw is None or peer is None:
            return
        try:
            records = PeerExchangeResponse.decode(raw).enrs
        except WireError:
            return
        for record in records:
            self.learn_record(peer, record)

    async def _keep_peer(self, address: Multiaddr) -> None:
        """Stay connected to a configured peer: dial again, backing off, whenever it is lost."""
        delay = REDIAL_MIN_S
        while True:
            started = time.monotonic()
            try:
                connection = await self.dial(address)
            except (ConnectionError, OSError, TimeoutError) as exc:
                log.info("waku: cannot reach %s: %s", address, exc)
            else:
                await connection.closed.wait()
                log.info("waku: lost %s", address)
            if time.monotonic() - started > REDIAL_MAX_S:
                delay = REDIAL_MIN_S
            await asyncio.sleep(delay)
            delay = min(delay * 2, REDIAL_MAX_S)


def _bound_port(sockets: Any) -> int:
    for sock in sockets:
        return int(sock.getsockname()[1])
    raise OSError("the listener has no socket")
