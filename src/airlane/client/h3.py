"""`H3Client`: requests to an Airlane gateway over HTTP/3 (QUIC), on aioquic.

One QUIC connection carries many requests at once, each on its own stream: a lost packet
delays only the stream it belonged to. `request` answers with the response's head at once and
its body as it arrives (`H3Response.chunks`), so an SSE stream reads event by event::

    async with await H3Client.connect("127.0.0.1", 8420, verify=False) as client:
        response = await client.request("GET", "/healthz")
        print(response.status, await response.read())

``verify=False`` trusts any certificate (the gateway's self-signed one, made at start when it
has none configured); ``cafile`` names the CA of a configured one.

A connection outlives a change of the client's address (`H3Client.rebind` moves it to a new
local port, as a phone moving from Wi-Fi to mobile data does): QUIC names connections by id,
not by address. A client that kept the `H3Client.session_ticket` of an earlier connection
passes it to the next `connect` and sends its first safe requests (GET, HEAD) with the
handshake (0-RTT); other methods wait until the handshake completes, since early data can be
replayed by anyone who captured it.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
from collections.abc import AsyncIterator, Sequence
from types import TracebackType
from typing import Any

from aioquic.asyncio.client import connect
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ConnectionTerminated, HandshakeCompleted, QuicEvent, StreamReset
from aioquic.tls import SessionTicket

from airlane.client.errors import (
    ConnectFailed,
    ConnectionLost,
    ProtocolViolation,
    RequestRejected,
    StreamNotFound,
)
from airlane.client.events import StreamEvent
from airlane.client.sse import stream_path
from airlane.core import Lane
from airlane.runtime.quic_congestion import ALGORITHM
from airlane.runtime.quic_mtu import FLOOR, forbid_fragments
from airlane.runtime.quic_protocol import QuicProtocol, now
from airlane.runtime.socket_lanes import LanesConfig, mark_socket
from airlane.runtime.udp_batch import read_in_batches
from airlane.wire.errors import SSEError
from airlane.wire.sse import SSEDecoder

__all__ = ["H3Client", "H3Response"]

_END = b""  # queued after a stream's last body bytes
_REPLAY_SAFE = frozenset({"GET", "HEAD", "OPTIONS"})
"""Methods sent as 0-RTT early data; the gateway answers others 425 if they arrive early."""
TOO_EARLY = 425
H3_REQUEST_CANCELLED = 0x10C
MOVE_PROBE_S = 10.0
"""How long after `H3Client.rebind` the client makes sure the gateway follows it."""
PROBE_GAP_S = 0.25
"""Silence, while a response is awaited, after which a moved client sends a PING."""
MAX_BUFFERED_BYTES = 64 << 20
"""Body bytes a response may hold unread. QUIC lets the gateway send as fast as data arrives
(aioquic widens the stream's window as it receives, not as the reader reads), so a reader that
falls this far behind has its response stopped instead of the client's memory growing."""


class H3Response:
    """A response's status and headers, and its body as it arrives."""

    def __init__(self, stream_id: int, status: int, headers: list[tuple[str, str]]) -> None:
        self.stream_id = stream_id
        self.status = status
        self.headers = headers
        """Field names lower-case, in the order received (``:status`` left out)."""
        self._body: asyncio.Queue[bytes | BaseException] = asyncio.Queue()
        self._over = False
        self.buffered = 0
        """Body bytes received and not read yet."""

    def header(self, name: str) -> str | None:
        """The first value of field ``name`` (lower-case), or None."""
        return next((value for key, value in self.headers if key == name), None)

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body, piece by piece as the stream delivers it; `ConnectionLost` if the stream
        or connection ends before the body does."""
        while True:
            item = await self._body.get()
            if isinstance(item, BaseException):
                raise item
            if item is _END:
                return
            self.buffered -= len(item)
            yield item

    @property
    def over(self) -> bool:
        """Whether `receive` has returned the end of the body (or its failure)."""
        return self._over

    async def receive(self) -> bytes:
        """All body bytes that arrived since the last call (waiting until some have), b""
        once the body is over; `ConnectionLost` if the stream or connection ends first. One
        call per arrival burst, where `chunks` yields each piece the stream delivered."""
        if self._over:
            return b""
        pieces: list[bytes] = []
        item = await self._body.get()
        while True:
            if isinstance(item, BaseException):
                self._over = True
                raise item
            if item is _END:
                self._over = True
                break
            self.buffered -= len(item)
            pieces.append(item)
            if self._body.empty():
                break
            item = self._body.get_nowait()
        return b"".join(pieces)

    async def read(self) -> bytes:
        """The whole body."""
        return b"".join([chunk async for chunk in self.chunks()])


class _Stream:
    """One request's side of the connection, until its response head arrives."""

    def __init__(self, stream_id: int, loop: asyncio.AbstractEventLoop) -> None:
        self.stream_id = stream_id
        self.head: asyncio.Future[H3Response] = loop.create_future()
        self.response: H3Response | None = None

    def fail(self, exc: BaseException) -> None:
        if not self.head.done():
            self.head.set_exception(exc)
        elif self.response is not None:
            self.response._body.put_nowait(exc)


class _Protocol(QuicProtocol):
    def __init__(self, *args: Any, datagram_ceiling: int | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic)
        self.streams: dict[int, _Stream] = {}
        self.lost: str | None = None
        self.connected = asyncio.Event()
        """Set once the handshake completed (or the connection ended before it did)."""
        self.handshake: HandshakeCompleted | None = None
        self.received_at = self._loop.time()
        self._probing: asyncio.TimerHandle | None = None
        self._probe_until = 0.0
        self.max_buffered = MAX_BUFFERED_BYTES
        self.datagram_ceiling = datagram_ceiling
        """Set: size datagrams by the path, up to this, once the handshake is done."""

    def socket(self) -> Any:
        """The connection's UDP socket (or the loop's stand-in for it)."""
        transport = self._transport
        return None if transport is None else transport.get_extra_info("socket")

    def datagram_received(self, data: bytes | str, addr: Any) -> None:
        # One send per loop turn, not per datagram: under uvloop a turn delivers every datagram
        # waiting (`airlane.runtime.udp_batch`).
        self.received_at = self._loop.time()
        self._quic.receive_datagram(data, addr, now=now())  # type: ignore[arg-type]
        self._process_events()
        self._transmit_soon()

    def datagrams_received(self, batch: list[tuple[bytes, Any]]) -> None:
        """Every datagram one loop turn found waiting (`read_in_batches`): processed, then
        one send for them all (the acknowledgement of the lot)."""
        self.received_at = self._loop.time()
        at = now()
        for data, addr in batch:
            self._quic.receive_datagram(data, addr, now=at)
        self._process_events()
        self.transmit()

    def read_in_batches(self) -> None:
        """Read the current socket in batches from now on."""
        assert self._transport is not None
        read_in_batches(self._transport, self.datagrams_received)

    def probe_after_move(self) -> None:
        """After a move, for `MOVE_PROBE_S`: a PING whenever nothing has arrived for
        `PROBE_GAP_S` while a response is awaited. The gateway answers a new address only
        once it has validated it; when its challenge or the answer is lost, it goes back to
        the old address, where no one listens, and waits for the client to speak from the
        new one again: a client with nothing to say would wait until the idle timeout."""
        self._probe_until = self._loop.time() + MOVE_PROBE_S
        self._send_probe()

    def _send_probe(self) -> None:
        self._probing = None
        now = self._loop.time()
        if self.lost is not None or now >= self._probe_until:
            return
        if self.streams and now - self.received_at >= PROBE_GAP_S:
            self._quic.send_ping(0)
            self.transmit()
        self._probing = self._loop.call_later(PROBE_GAP_S, self._send_probe)

    def quic_event_received(self, event: QuicEvent) -> None:
        if isinstance(event, HandshakeCompleted):
            self.handshake = event
            self.connected.set()
            if self.datagram_ceiling is not None:
                self.discover_datagram_size(self.datagram_ceiling)
        elif isinstance(event, StreamReset):
            stream = self.streams.pop(event.stream_id, None)
            if stream is not None:
                stream.fail(ConnectionLost(f"the gateway reset stream {event.stream_id}"))
        elif isinstance(event, ConnectionTerminated):
            self.lost = f"the connection closed ({event.reason_phrase or event.error_code})"
            for stream in self.streams.values():
                stream.fail(ConnectionLost(self.lost))
            self.streams.clear()
            self.connected.set()
            if self._probing is not None:
                self._probing.cancel()
                self._probing = None
        for h3_event in self.h3.handle_event(event):
            stream = self.streams.get(getattr(h3_event, "stream_id", -1))
            if stream is None:
                continue
            if isinstance(h3_event, HeadersReceived) and stream.response is None:
                fields = [(k.decode(), v.decode("latin-1")) for k, v in h3_event.headers]
                status = int(next((v for k, v in fields if k == ":status"), "0"))
                stream.response = H3Response(
                    stream.stream_id, status, [(k, v) for k, v in fields if k[0] != ":"]
                )
                stream.head.set_result(stream.response)
                if h3_event.stream_ended:
                    self._ended(stream)
            elif isinstance(h3_event, DataReceived) and stream.response is not None:
                response = stream.response
                if h3_event.data:
                    response.buffered += len(h3_event.data)
                    if response.buffered > self.max_buffered:
                        self._overflow(stream, response)
                        continue
                    response._body.put_nowait(h3_event.data)
                if h3_event.stream_ended:
                    self._ended(stream)

    def _overflow(self, stream: _Stream, response: H3Response) -> None:
        """The reader fell `max_buffered` bytes behind: stop the response (STOP_SENDING)."""
        self.streams.pop(stream.stream_id, None)
        self._quic.stop_stream(stream.stream_id, H3_REQUEST_CANCELLED)
        response._body.put_nowait(
            ConnectionLost(
                f"the response was stopped: its reader fell more than {self.max_buffered} "
                "bytes behind (H3Client.connect's max_buffered_bytes)"
            )
        )

    def _ended(self, stream: _Stream) -> None:
        assert stream.response is not None
        stream.response._body.put_nowait(_END)
        self.streams.pop(stream.stream_id, None)


class H3Client:
    """One HTTP/3 connection to a gateway (see the module docstring)."""

    def __init__(
        self, protocol: _Protocol, host: str, closing: Any, tickets: list[SessionTicket]
    ) -> None:
        self._protocol = protocol
        self._host = host
        self._closing = closing
        self._tickets = tickets
        self._lane: tuple[Lane, LanesConfig] | None = None
        self.marks = ""
        """What `set_lane` marked this end's socket with."""
        self.last_id: str | None = None
        """The id of the last event `events` handed out: where a reconnection resumes."""

    @property
    def session_ticket(self) -> SessionTicket | None:
        """The newest TLS session ticket the gateway issued on this connection: passed to the
        next `connect`, it resumes the session with 0-RTT (each ticket works once)."""
        return self._tickets[-1] if self._tickets else None

    @property
    def lost(self) -> bool:
        """Whether the connection has ended (requests would raise `ConnectionLost`)."""
        return self._protocol.lost is not None

    @property
    def resumed(self) -> bool:
        """Whether the handshake resumed an earlier session (from a session ticket)."""
        handshake = self._protocol.handshake
        return handshake is not None and handshake.session_resumed

    @property
    def early_data_accepted(self) -> bool:
        """Whether the gateway took this connection's 0-RTT data."""
        handshake = self._protocol.handshake
        return handshake is not None and handshake.early_data_accepted

    @property
    def local_address(self) -> tuple[str, int]:
        """The client's UDP address (host, port) now."""
        transport = self._protocol._transport
        assert transport is not None
        host, port = transport.get_extra_info("sockname")[:2]
        return str(host), int(port)

    async def rebind(self) -> tuple[str, int]:
        """Move the connection to a new local UDP port, as a client whose network changed:
        its streams go on (the gateway validates the new path); the new address."""
        protocol = self._protocol
        old = protocol._transport
        sock = _udp_socket()
        try:
            await asyncio.get_running_loop().create_datagram_endpoint(lambda: protocol, sock=sock)
        except BaseException:
            sock.close()
            raise
        if old is not None:
            old.close()
        protocol.read_in_batches()
        if self._lane is not None:
            self._mark(*self._lane)
        protocol._quic.send_ping(0)  # a packet from the new address starts the migration
        protocol.transmit()
        protocol.probe_after_move()
        return self.local_address

    def set_lane(self, lane: Lane | str, lanes: LanesConfig | None = None) -> str:
        """Declare what this connection carries (``control``, ``interactive``, ``bulk``):
        this end's socket is marked for it now (``lanes``: how; the defaults otherwise), and
        every request from now on carries an ``airlane-lane`` header, from which the gateway
        marks its datagrams of the connection (docs/lanes.md). What was marked here."""
        if isinstance(lane, str):
            lane = LanesConfig.lane(lane)
        self._lane = (lane, lanes or LanesConfig())
        return self._mark(*self._lane)

    def _mark(self, lane: Lane, lanes: LanesConfig) -> str:
        transport = self._protocol._transport
        sock = None if transport is None else transport.get_extra_info("socket")
        self.marks = "" if sock is None else mark_socket(sock, lane, lanes)
        return self.marks

    @classmethod
    async def connect(
        cls,
        host: str,
        port: int,
        *,
        verify: bool = True,
        cafile: str | None = None,
        server_name: str | None = None,
        timeout_s: float = 10.0,
        congestion_control: str = ALGORITHM,
        max_datagram_size: int = 1452,
        path_mtu_discovery: bool = True,
        session_ticket: SessionTicket | None = None,
        max_buffered_bytes: int = MAX_BUFFERED_BYTES,
    ) -> H3Client:
        """Connect to ``host``:``port`` (UDP); `ConnectFailed` if no handshake completes in
        ``timeout_s``. ``congestion_control`` is the controller of what this client sends
        (``airlane-bbr``, or aioquic's ``reno``/``cubic``). With ``session_ticket`` (an earlier
        connection's `session_ticket`) it returns at once: the first safe requests travel as
        0-RTT data with the handshake. A response whose reader falls ``max_buffered_bytes``
        behind is stopped (`ConnectionLost` when read). With ``path_mtu_discovery`` the client
        sends 1200-byte datagrams until the handshake is done, then as large as the route
        allows up to ``max_datagram_size``, back to 1200 where the path drops larger ones
        (`airlane.runtime.quic_mtu`); without, every datagram is ``max_datagram_size``."""
        configuration = QuicConfiguration(
            is_client=True,
            alpn_protocols=list(H3_ALPN),
            server_name=server_name or host,
            congestion_control_algorithm=congestion_control,
            max_datagram_size=FLOOR if path_mtu_discovery else max_datagram_size,
        )
        if not verify:
            configuration.verify_mode = ssl.CERT_NONE
        elif cafile is not None:
            configuration.load_verify_locations(cafile)
        early = session_ticket is not None and session_ticket.is_valid
        if early:
            configuration.session_ticket = session_ticket
        tickets: list[SessionTicket] = []
        made: list[_Protocol] = []  # (to say why, when the gateway closes the handshake)

        def create_protocol(*args: Any, **kwargs: Any) -> _Protocol:
            ceiling = max_datagram_size if path_mtu_discovery else None
            made.append(_Protocol(*args, datagram_ceiling=ceiling, **kwargs))
            return made[-1]

        manager = connect(
            host,
            port,
            configuration=configuration,
            # Given at creation: the handshake may complete before `connect` returns.
            create_protocol=create_protocol,
            session_ticket_handler=lambda ticket: _keep_latest(tickets, ticket),
            wait_connected=not early,
        )
        try:
            async with asyncio.timeout(timeout_s):
                protocol = await manager.__aenter__()
        except (OSError, TimeoutError, ConnectionError) as exc:
            # A closed handshake says why in its close; a timeout closes it here (code 0).
            closed = made[0].lost if made and isinstance(exc, ConnectionError) else None
            why = closed or str(exc) or type(exc).__name__
            raise ConnectFailed(f"no HTTP/3 connection to {host}:{port}: {why}") from exc
        assert isinstance(protocol, _Protocol)
        protocol.max_buffered = max_buffered_bytes
        if path_mtu_discovery:
            sock = protocol.socket()
            if sock is not None:
                forbid_fragments(sock)
        protocol.read_in_batches()
        if early:
            protocol.transmit()  # the ClientHello; requests follow it as 0-RTT data
        return cls(protocol, host, manager, tickets)

    async def request(
        self,
        method: str,
        path: str,
        *,
        headers: Sequence[tuple[str, str]] = (),
        body: bytes = b"",
        authority: str | None = None,
    ) -> H3Response:
        """Send a request; its response once the head has arrived. Before the handshake has
        completed, only a replay-safe method is sent at once (as 0-RTT data); others wait for
        it, and one the gateway answers 425 Too Early is sent again once connected."""
        protocol = self._protocol
        if method not in _REPLAY_SAFE:
            await protocol.connected.wait()
        response = await self._send(method, path, headers, body, authority)
        if response.status == TOO_EARLY:
            await response.read()
            await protocol.connected.wait()
            response = await self._send(method, path, headers, body, authority)
        return response

    async def _send(
        self,
        method: str,
        path: str,
        headers: Sequence[tuple[str, str]],
        body: bytes,
        authority: str | None,
    ) -> H3Response:
        protocol = self._protocol
        if protocol.lost is not None:
            raise ConnectionLost(protocol.lost)
        stream_id = protocol._quic.get_next_available_stream_id()
        stream = protocol.streams[stream_id] = _Stream(stream_id, asyncio.get_running_loop())
        head = [
            (b":method", method.encode()),
            (b":scheme", b"https"),
            (b":authority", (authority or self._host).encode()),
            (b":path", path.encode()),
            *((name.lower().encode(), value.encode()) for name, value in headers),
        ]
        if self._lane is not None:
            head.append((b"airlane-lane", self._lane[0].name.lower().encode()))
        protocol.h3.send_headers(stream_id, head, end_stream=not body)
        if body:
            protocol.h3.send_data(stream_id, body, end_stream=True)
        protocol.transmit()
        return await stream.head

    def stop(self, response: H3Response) -> None:
        """Stop reading ``response``: the gateway is asked to stop sending it (QUIC's
        STOP_SENDING), and what else arrives for it is dropped."""
        protocol = self._protocol
        stream = protocol.streams.pop(response.stream_id, None)
        if stream is not None and protocol.lost is None:
            protocol._quic.stop_stream(response.stream_id, H3_REQUEST_CANCELLED)
            protocol.transmit()
        response._body.put_nowait(ConnectionLost("the response was stopped"))

    async def start_stream(
        self, request: dict[str, Any], *, headers: Sequence[tuple[str, str]] = ()
    ) -> str:
        """Start a generation of ``request`` (an OpenAI chat body) through the streams API;
        its stream id (`events` reads it). `RequestRejected` for the gateway's refusal."""
        fields = [("content-type", "application/json"), *headers]
        response = await self.request(
            "POST", "/v1/streams", headers=fields, body=json.dumps(request).encode()
        )
        body = await response.read()
        if response.status != 201:
            raise _refusal(response.status, body)
        return str(json.loads(body)["id"])

    async def events(
        self, stream_id: str, *, resume: str | None = None, headers: Sequence[tuple[str, str]] = ()
    ) -> AsyncIterator[StreamEvent]:
        """A stream's events from after ``resume`` (``<epoch>:<seq>``; None: from its start)
        to its end, read once: `last_id` says where a reconnection resumes. `StreamNotFound`
        and `RequestRejected` for the gateway's refusals; `ConnectionLost` when the connection
        goes first."""
        fields = [*headers, *((("last-event-id", resume),) if resume else ())]
        response = await self.request("GET", stream_path(stream_id, "events"), headers=fields)
        if response.status == 204:  # resumed at the very end of a finished stream
            return
        if response.status != 200:
            raise _refusal(response.status, await response.read())
        decoder = SSEDecoder()
        async for chunk in response.chunks():
            try:
                messages = decoder.feed(chunk)
            except SSEError as exc:
                raise ProtocolViolation(str(exc)) from None
            for message in messages:
                event = StreamEvent.from_json(message.data, message.id)
                if message.id:
                    self.last_id = message.id
                yield event

    async def aclose(self) -> None:
        """Close the connection."""
        await self._closing.__aexit__(None, None, None)

    async def __aenter__(self) -> H3Client:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


def _keep_latest(tickets: list[SessionTicket], ticket: SessionTicket) -> None:
    tickets[:] = [ticket]


def _udp_socket() -> socket.socket:
    """A dual-stack UDP socket on a free port, like the one aioquic's `connect` makes."""
    sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    try:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(("::", 0, 0, 0))
    except BaseException:
        sock.close()
        raise
    return sock


def _refusal(status: int, body: bytes) -> RequestRejected:
    """The gateway's error answer as the client's error (its code and message)."""
    try:
        error = json.loads(body)["error"]
        code, message = str(error.get("code")), str(error.get("message"))
    except (ValueError, KeyError, TypeError):
        code, message = "http_error", body[:200].decode("utf-8", "replace")
    if code == "stream_not_found":
        return StreamNotFound(message, status=status, code=code)
    return RequestRejected(f"HTTP {status}: {message}", status=status, code=code)
