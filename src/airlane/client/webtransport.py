"""`WebTransportClient`: the ``/v1/ws`` multiplex over WebTransport (HTTP/3), on aioquic.

The same ops as over a WebSocket (``subscribe``, ``generate``, ``publish``, ``cancel``,
``ping``), but each subscription's events arrive on a QUIC stream of their own, so a lost
packet delays one subscription and not the others, and small messages can go as datagrams
(unreliable, never resent; with ``fec=N`` an XOR parity datagram follows every N)::

    async with await WebTransportClient.connect("127.0.0.1", 8420, verify=False) as wt:
        reply = await wt.call({"op": "generate", "request": {...}})
        async for message in wt.events():
            print(message["stream"], message["event"])

``call`` sends an op on the control stream and returns its reply; ``call_datagram`` sends it
as a datagram and returns the reply datagram (or None when either was lost). A subscription
made with ``"redundant": true`` (in ``subscribe`` or ``generate``) gets each event twice, on its
stream and as a datagram ahead of it; `events` hands each out once and in order, whichever
copy came first, so a lost packet costs a resend's wait only when both copies were lost.
"""

from __future__ import annotations

import asyncio
import itertools
import ssl
import time
from collections.abc import AsyncIterator, Sequence
from types import TracebackType
from typing import Any

import orjson
from aioquic.asyncio.client import connect
from aioquic.h3.connection import H3_ALPN, FrameType, H3Connection, H3Stream
from aioquic.h3.events import (
    DatagramReceived,
    DataReceived,
    HeadersReceived,
    WebTransportStreamDataReceived,
)
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ConnectionTerminated, QuicEvent

from airlane.client.errors import ConnectFailed, ConnectionLost, RequestRejected
from airlane.runtime.quic_congestion import ALGORITHM
from airlane.runtime.quic_protocol import QuicProtocol
from airlane.wire.capsule import parse_close
from airlane.wire.errors import DecodeError
from airlane.wire.fec import FecDecoder, FecEncoder, plain
from airlane.wire.framing import FrameDecoder, encode_frame

__all__ = ["Arrival", "WebTransportClient"]

MAX_WAITING = 100_000
"""Messages held for `events` before the oldest are dropped (the reader is too slow)."""


class Arrival(dict[str, Any]):
    """A message from the gateway (its JSON object), with where and when it arrived."""

    quic_stream: int = -1
    """The QUIC stream it came on (-1: a datagram)."""
    at: float = 0.0
    """`time.monotonic` when it arrived."""


class _InOrder:
    """One ``redundant`` subscription's events, from its stream and from their datagram
    copies, each handed out once and in order. A copy names the seq sent before it
    (``prev``): it goes out at once when that one has, else it waits for the stream to catch
    up (the stream is reliable and in order, so it always does)."""

    MAX_HELD = 4096

    def __init__(self, upto: int | None) -> None:
        self.upto = upto
        self.held: dict[int, Arrival] = {}

    def start(self, upto: int) -> list[Arrival]:
        """The subscription's reply says where it starts."""
        if self.upto is not None:
            return []
        self.upto = upto
        return self._flush()

    def from_stream(self, message: Arrival) -> list[Arrival]:
        seq = int(message["event"]["seq"])
        if self.upto is not None and seq <= self.upto:
            return []  # its copy came first
        self.upto = seq
        return [message, *self._flush()]

    def from_copy(self, message: Arrival) -> list[Arrival]:
        seq, prev = int(message["event"]["seq"]), int(message["prev"])
        if self.upto is not None and seq <= self.upto:
            return []
        if self.upto != prev:
            self.held[prev] = message
            if len(self.held) > self.MAX_HELD:
                del self.held[min(self.held)]
            return []
        self.upto = seq
        return [message, *self._flush()]

    def _flush(self) -> list[Arrival]:
        out = []
        while self.upto is not None and self.upto in self.held:
            message = self.held.pop(self.upto)
            self.upto = int(message["event"]["seq"])
            out.append(message)
        for stale in [p for p in self.held if self.upto is not None and p < self.upto]:
            del self.held[stale]
        return out


class _Protocol(QuicProtocol):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic, enable_webtransport=True)
        self.session_id: int | None = None
        self.head: asyncio.Future[int] = self._loop.create_future()
        self.decoders: dict[int, FrameDecoder] = {}
        self.fec = FecDecoder()
        self.replies: dict[Any, asyncio.Future[Arrival]] = {}
        self.inbox: asyncio.Queue[Arrival | None] = asyncio.Queue()
        self.closed: str | None = None
        self.redundant_refs: set[Any] = set()
        """Refs of ops that asked for ``redundant`` delivery, until their reply."""
        self.in_order: dict[str, _InOrder] = {}

    def quic_event_received(self, event: QuicEvent) -> None:
        if isinstance(event, ConnectionTerminated):
            self._end(f"the connection closed ({event.reason_phrase or event.error_code})")
        for h3_event in self.h3.handle_event(event):
            if isinstance(h3_event, HeadersReceived) and h3_event.stream_id == self.session_id:
                status = dict(h3_event.headers).get(b":status", b"0")
                if not self.head.done():
                    self.head.set_result(int(status))
            elif isinstance(h3_event, WebTransportStreamDataReceived):
                decoder = self.decoders.setdefault(h3_event.stream_id, FrameDecoder())
                for message in decoder.feed(h3_event.data):
                    self._arrived(message, h3_event.stream_id)
            elif isinstance(h3_event, DatagramReceived):
                try:
                    messages = self.fec.feed(h3_event.data)
                except DecodeError:
                    continue
                for message in messages:
                    self._arrived(message, -1)
            elif isinstance(h3_event, DataReceived) and h3_event.stream_id == self.session_id:
                close = parse_close(h3_event.data)
                if close is not None:
                    self._end(f"the gateway closed the session ({close[0]}: {close[1]})")
                elif h3_event.stream_ended:
                    self._end("the gateway ended the session")

    def _arrived(self, data: bytes, stream: int) -> None:
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            return
        if not isinstance(obj, dict):
            return
        message = Arrival(obj)
        message.quic_stream, message.at = stream, time.monotonic()
        op = obj.get("op")
        if op == "event":
            order = self.in_order.get(obj.get("stream"))  # type: ignore[arg-type]
            if "prev" in obj and stream == -1:  # a datagram copy of a stream's event
                if order is None:
                    order = self.in_order[obj["stream"]] = _InOrder(None)
                self._queue(order.from_copy(message))
            else:
                self._queue([message] if order is None else order.from_stream(message))
            return
        if op in ("subscribed", "generated") and isinstance(obj.get("stream"), str):
            # A new subscription starts a new order (a resume replays earlier seqs).
            if obj.get("ref") in self.redundant_refs:
                self.redundant_refs.discard(obj.get("ref"))
                order = self.in_order.setdefault(obj["stream"], _InOrder(None))
                self._queue(order.start(int(obj.get("from", 0))))
            else:
                self.in_order.pop(obj["stream"], None)
        waiter = self.replies.pop(obj.get("ref"), None) if "ref" in obj else None
        if waiter is not None and not waiter.done():
            waiter.set_result(message)
            return
        self._queue([message])

    def _queue(self, messages: list[Arrival]) -> None:
        for message in messages:
            if self.inbox.qsize() >= MAX_WAITING:
                self.inbox.get_nowait()
            self.inbox.put_nowait(message)

    def _end(self, reason: str) -> None:
        if self.closed is not None:
            return
        self.closed = reason
        if not self.head.done():
            self.head.set_exception(ConnectionLost(reason))
        for waiter in self.replies.values():
            if not waiter.done():
                waiter.set_exception(ConnectionLost(reason))
        self.replies.clear()
        self.inbox.put_nowait(None)


class WebTransportClient:
    """One WebTransport session to ``/v1/ws`` (see the module docstring)."""

    def __init__(self, protocol: _Protocol, closing: Any, fec: int | None) -> None:
        self._protocol = protocol
        self._closing = closing
        self._refs = itertools.count(1)
        self._fec = FecEncoder(fec) if fec else None
        assert protocol.session_id is not None
        self.session_id = protocol.session_id
        self.control = protocol.h3.create_webtransport_stream(self.session_id)
        """The control stream: ops go out on it and their replies come back on it."""
        # aioquic marks a bidirectional WebTransport stream as such only when the peer opens
        # it; on one it opened itself it would parse the replies as HTTP/3 frames.
        stream = H3Stream(self.control)
        stream.frame_type = FrameType.WEBTRANSPORT_STREAM
        stream.session_id = self.session_id
        protocol.h3._stream[self.control] = stream

    @classmethod
    async def connect(
        cls,
        host: str,
        port: int,
        *,
        path: str = "/v1/ws",
        verify: bool = True,
        cafile: str | None = None,
        fec: int | None = None,
        headers: Sequence[tuple[str, str]] = (),
        timeout_s: float = 10.0,
    ) -> WebTransportClient:
        """Open a session; `ConnectFailed` if none opens in ``timeout_s``, `RequestRejected`
        if the gateway refuses it (its status). ``headers`` go with the CONNECT (an
        ``authorization`` one, say; browsers cannot send one and use ``?ticket=`` in the path).
        With ``fec`` (2 to 32), the gateway adds a parity datagram after every ``fec`` it
        sends, and so does this client."""
        configuration = QuicConfiguration(
            is_client=True,
            alpn_protocols=list(H3_ALPN),
            server_name=host,
            congestion_control_algorithm=ALGORITHM,
            max_datagram_frame_size=65536,
        )
        if not verify:
            configuration.verify_mode = ssl.CERT_NONE
        elif cafile is not None:
            configuration.load_verify_locations(cafile)
        if fec:
            path += ("&" if "?" in path else "?") + f"fec={fec}"
        manager = connect(host, port, configuration=configuration, create_protocol=_Protocol)
        try:
            async with asyncio.timeout(timeout_s):
                protocol = await manager.__aenter__()
                assert isinstance(protocol, _Protocol)
                session_id = protocol._quic.get_next_available_stream_id()
                protocol.session_id = session_id
                protocol.h3.send_headers(
                    session_id,
                    [
                        (b":method", b"CONNECT"),
                        (b":protocol", b"webtransport"),
                        (b":scheme", b"https"),
                        (b":authority", f"{host}:{port}".encode()),
                        (b":path", path.encode()),
                        (b"sec-webtransport-http3-draft02", b"1"),
                        *((k.lower().encode(), v.encode()) for k, v in headers),
                    ],
                )
                protocol.transmit()
                status = await protocol.head
        except (OSError, TimeoutError, ConnectionError, ConnectionLost) as exc:
            raise ConnectFailed(f"no WebTransport session at {host}:{port}: {exc}") from exc
        if status != 200:
            await manager.__aexit__(None, None, None)
            raise RequestRejected(f"the gateway refused the session: HTTP {status}", status=status)
        return cls(protocol, manager, fec)

    async def call(self, op: dict[str, Any], *, timeout_s: float = 30.0) -> Arrival:
        """Send ``op`` on the control stream; its reply."""
        waiter = self._expect(op)
        self._protocol._quic.send_stream_data(self.control, encode_frame(orjson.dumps(op)))
        self._protocol.transmit()
        async with asyncio.timeout(timeout_s):
            return await waiter

    async def call_datagram(self, op: dict[str, Any], *, timeout_s: float = 1.0) -> Arrival | None:
        """Send ``op`` as a datagram; its reply datagram, or None if none came in
        ``timeout_s`` (either was lost: datagrams are never resent)."""
        waiter = self._expect(op)
        self.send_datagram(op)
        try:
            async with asyncio.timeout(timeout_s):
                return await waiter
        except TimeoutError:
            self._protocol.replies.pop(op["ref"], None)
            return None

    def send_datagram(self, op: dict[str, Any]) -> None:
        """Send ``op`` as a datagram, not waiting for anything."""
        message = orjson.dumps(op)
        encoder = self._fec
        datagrams = [plain(message)] if encoder is None else encoder.encode(message)
        if encoder is not None and encoder.pending:
            datagrams += encoder.flush_parity()  # nothing else may follow soon
        for datagram in datagrams:
            self._protocol.h3.send_datagram(self.session_id, datagram)
        self._protocol.transmit()

    def _expect(self, op: dict[str, Any]) -> asyncio.Future[Arrival]:
        protocol = self._protocol
        if protocol.closed is not None:
            raise ConnectionLost(protocol.closed)
        op.setdefault("ref", next(self._refs))
        if op.get("redundant") is True:
            protocol.redundant_refs.add(op["ref"])
        waiter: asyncio.Future[Arrival] = asyncio.get_running_loop().create_future()
        protocol.replies[op["ref"]] = waiter
        return waiter

    async def events(self) -> AsyncIterator[Arrival]:
        """Every message that is not a reply to a call (events, errors), as it arrives,
        until the session ends."""
        while (message := await self._protocol.inbox.get()) is not None:
            yield message
        self._protocol.inbox.put_nowait(None)  # the next reader sees the end too

    @property
    def closed(self) -> str | None:
        """Why the session ended (None while it is open)."""
        return self._protocol.closed

    @property
    def recovered(self) -> int:
        """Datagrams rebuilt from parity so far."""
        return self._protocol.fec.recovered

    async def aclose(self) -> None:
        """Close the session and its connection."""
        await self._closing.__aexit__(None, None, None)

    async def __aenter__(self) -> WebTransportClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
