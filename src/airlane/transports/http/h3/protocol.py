"""`H3Protocol`: one QUIC connection serving HTTP/3 requests to the ASGI application.

aioquic parses QUIC and HTTP/3; this turns its events into requests (`H3Request`, one task
each, owned here and cancelled when the connection goes) and writes their responses. It
adds what aioquic leaves to its user: a keep-alive PING when the connection has sent nothing
for ``keep_alive_s`` (NAT bindings and the peer's idle timer outlive a long silence), the
write side's backpressure (a stream's unacknowledged bytes, checked after every transmit), a
clear answer to a request it cannot serve (400 for a malformed head, 503 past the request
limit), the connection's lane (declared with an ``airlane-lane`` request header, or the
WebSocket multiplex's ``lane`` op in a WebTransport session: every datagram of the connection
is then marked, `airlane.runtime.datagram_lanes`), and the replay rule of 0-RTT: a request
that arrives as early data (before the handshake completed) is served only if its method is
safe to repeat; any other gets 425 Too Early (RFC 8470) and the client sends it again once
connected.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable
from functools import partial
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import unquote_to_bytes

from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import (
    DatagramReceived,
    DataReceived,
    H3Event,
    Headers,
    HeadersReceived,
    WebTransportStreamDataReceived,
)
from aioquic.h3.exceptions import H3Error
from aioquic.quic.events import (
    ConnectionTerminated,
    HandshakeCompleted,
    ProtocolNegotiated,
    QuicEvent,
    StopSendingReceived,
    StreamReset,
)

from airlane.core import AirlaneError, ErrorCode, Lane
from airlane.runtime.datagram_lanes import DatagramLane
from airlane.runtime.quic_protocol import QuicProtocol, now
from airlane.runtime.socket_lanes import LanesConfig
from airlane.transports.http.asgi import FLUSHED_EXTENSION, LANE_EXTENSION
from airlane.transports.http.errors import error_json
from airlane.transports.http.h3.request import H3Request
from airlane.transports.http.h3.webtransport import WEBTRANSPORT, WebTransportSession

if TYPE_CHECKING:
    from airlane.transports.http.h3.server import Http3Server

__all__ = ["H3Protocol"]

log = logging.getLogger("airlane.http3")

_INVALID, _TOO_MANY, _UNSUPPORTED = (
    ErrorCode.INVALID_REQUEST,
    ErrorCode.TOO_MANY_REQUESTS,
    ErrorCode.UNSUPPORTED,
)

_ASGI = {"version": "3.0", "spec_version": "2.3"}
H3_REQUEST_CANCELLED = 0x10C
"""HTTP/3's H3_REQUEST_CANCELLED: what a stream whose response failed midway is reset with."""
H3_NO_ERROR = 0x100
QUIC_CONNECTION_REFUSED = 0x2
"""QUIC's transport error CONNECTION_REFUSED. Sent as a transport close (a frame type given):
an application close during the handshake reaches the client as a bare APPLICATION_ERROR,
without its code or reason (RFC 9000, section 10.2.3)."""
_NO_FRAME = 0x0  # the frame type a transport close names when no frame caused it (PADDING)
MAX_BUFFER_BYTES = 32 << 20
"""However large the congestion window grows, a stream buffers at most this much."""
REPLAY_SAFE = frozenset({"GET", "HEAD", "OPTIONS"})
"""Methods served from 0-RTT data: a replay of them changes nothing on the server."""


class H3Protocol(QuicProtocol):
    """One connection (see the module docstring); made by aioquic's server per connection."""

    def __init__(self, *args: Any, server: Http3Server, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.server = server
        self._h3: H3Connection | None = None
        self._requests: dict[int, H3Request] = {}
        self._sessions: dict[int, WebTransportSession] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._waiting: dict[int, asyncio.Future[None]] = {}
        self._flushing: dict[int, asyncio.Future[None]] = {}  # `flushed`'s waiters
        self._sent_at = self._loop.time()
        self._keep_alive: asyncio.TimerHandle | None = None
        self._closed_here = False
        self._handshake_done = False
        self.lane: DatagramLane | None = None
        """Marks the connection's datagrams with its lane (once connected)."""
        self.early_requests = 0
        """Requests served from 0-RTT data (safe methods only)."""
        server.handshaking.add(self)
        self._handshake_timer: asyncio.TimerHandle | None = self._loop.call_later(
            server.config.handshake_timeout_s, self._abandon_handshake
        )

    # -- aioquic's call-backs ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # aioquic's protocol only ever calls its transport's ``sendto``: the lane stands in
        # for the server's shared socket, marking this connection's datagrams.
        lane = self.lane = DatagramLane(
            cast(asyncio.DatagramTransport, transport), self.server.lanes, self.server.sender
        )
        super().connection_made(cast(asyncio.DatagramTransport, lane))

    def quic_event_received(self, event: QuicEvent) -> None:
        if isinstance(event, ProtocolNegotiated):
            # Counted once its ClientHello was read: garbage Initials take no one's place.
            if not self.server.opened(self):  # the server holds as many as it may
                self._quic.close(
                    error_code=QUIC_CONNECTION_REFUSED,
                    frame_type=_NO_FRAME,
                    reason_phrase="server full",
                )
                return
            if event.alpn_protocol in H3_ALPN:
                self._h3 = H3Connection(self._quic, enable_webtransport=True)
                self._arm_keep_alive()
        elif isinstance(event, HandshakeCompleted):
            self._handshake_done = True
            self._handshake_over()
            config = self.server.config
            if config.path_mtu_discovery:
                self.discover_datagram_size(config.max_datagram_size)
                if self.sizes is not None and self.lane is not None:
                    self.lane.on_too_big = self.too_big  # the kernel's "too big" comes there
        elif isinstance(event, (StreamReset, StopSendingReceived)):
            # A reset request, or one whose response the client no longer wants (aioquic has
            # reset the sending side): its handler sees the client gone, and its slot of
            # `max_streams` is free now, not at the handler's next write.
            request = self._requests.pop(event.stream_id, None)
            if request is not None:
                request.gone()
            session = self._sessions.pop(event.stream_id, None)
            if session is not None:
                session.ended()
            for session in self._sessions.values():
                session.stream_stopped(event.stream_id)
            self._wake_writers()  # a writer waiting on a reset stream waits no more
        elif isinstance(event, ConnectionTerminated):
            self._terminated()
        if self._h3 is None:
            return
        try:
            for h3_event in self._h3.handle_event(event):
                self._h3_event(h3_event)
        except H3Error as exc:  # the peer broke HTTP/3 (aioquic closes the connection)
            log.debug("HTTP/3 connection error: %s", exc)

    def datagram_received(self, data: bytes | str, addr: Any) -> None:
        # One send per loop turn, not per datagram: a turn delivers every datagram waiting
        # (uvloop's reader, or `airlane.runtime.udp_batch` on asyncio's), and what they ask
        # for (acknowledgements, more data) goes out together.
        self._quic.receive_datagram(data, addr, now=now())  # type: ignore[arg-type]
        self._process_events()
        self._transmit_soon()

    def sending(self) -> contextlib.AbstractContextManager[object]:
        # Full-size packets leave in segmented runs (`DatagramLane.batch`).
        lane = self.lane
        return lane.batch() if lane is not None else contextlib.nullcontext()

    def transmit(self) -> None:
        super().transmit()
        self._sent_at = self._loop.time()
        if self._waiting or self._flushing:
            self._wake_writers()

    # -- requests ---------------------------------------------------------------------------

    def _h3_event(self, event: H3Event) -> None:
        if isinstance(event, WebTransportStreamDataReceived):
            session = self._sessions.get(event.session_id)
            if session is not None:
                session.stream_data(event.stream_id, event.data, event.stream_ended)
        elif isinstance(event, DatagramReceived):
            session = self._sessions.get(event.stream_id)
            if session is not None:
                session.datagram(event.data)
        elif isinstance(event, HeadersReceived):
            if event.stream_id in self._requests or event.stream_id in self._sessions:
                return  # trailers: nothing in Airlane's API reads them
            self._start(event.stream_id, event.headers, event.stream_ended)
        elif isinstance(event, DataReceived):
            request = self._requests.get(event.stream_id)
            if request is not None:
                request.data(event.data, event.stream_ended)
            session = self._sessions.get(event.stream_id)
            if session is not None:
                session.capsules(event.data, event.stream_ended)

    def _start(self, stream_id: int, headers: Headers, ended: bool) -> None:
        config = self.server.config
        if len(self._requests) >= config.max_streams:
            self._refuse(stream_id, 503, _TOO_MANY, "too many requests on this connection")
            return
        scope = self._scope(headers)
        if scope is None:
            self._refuse(stream_id, 400, _INVALID, "a request needs :method, :scheme and :path")
            return
        if not self._declare_lane(scope):
            self._refuse(
                stream_id, 400, _INVALID, "airlane-lane must be control, interactive or bulk"
            )
            return
        if scope["method"] == "CONNECT":
            self._start_session(stream_id, scope, headers)
            return
        if not self._handshake_done:  # 0-RTT: early data that anyone could have replayed
            if scope["method"] not in REPLAY_SAFE:
                self._refuse(stream_id, 425, _INVALID, "too early: send it again once connected")
                return
            self.early_requests += 1
        scope["extensions"][FLUSHED_EXTENSION] = partial(self.flushed, stream_id)
        request = H3Request(self, stream_id, scope, self.server.max_body_bytes)
        self._requests[stream_id] = request
        if ended:
            request.data(b"", True)
        task = self._loop.create_task(request.run(self.server.app), name=f"h3 {stream_id}")
        self._tasks.add(task)
        task.add_done_callback(lambda done: self._ended(request, done))

    def _declare_lane(self, scope: dict[str, Any]) -> bool:
        """A request's ``airlane-lane`` header declares the connection's lane: every datagram
        it sends from now on is marked (docs/lanes.md). False for a lane that is none."""
        name = next((v for k, v in scope["headers"] if k == b"airlane-lane"), None)
        if name is None or self.lane is None:
            return True
        try:
            lane: Lane = LanesConfig.lane(name.decode("latin-1").strip().lower())
        except ValueError:
            return False
        if lane is not self.lane.lane:
            self.lane(lane)
        return True

    def _start_session(self, stream_id: int, scope: dict[str, Any], headers: Headers) -> None:
        """An extended CONNECT: a WebTransport session, served by the application as a
        WebSocket on the same path (`WebTransportSession`)."""
        protocol = next((v for k, v in headers if k == b":protocol"), None)
        if protocol != b"webtransport":
            self._refuse(stream_id, 501, _UNSUPPORTED, "CONNECT is for WebTransport sessions only")
            return
        if not self._handshake_done:  # a session changes state: never from 0-RTT data
            self._refuse(stream_id, 425, _INVALID, "too early: send it again once connected")
            return
        fec = _fec_group(scope["query_string"])
        session = WebTransportSession(self, stream_id, fec_group=fec)
        self._sessions[stream_id] = session
        scope.update(
            type="websocket",
            scheme="wss",
            subprotocols=[],
            extensions={
                **scope["extensions"],
                WEBTRANSPORT: session.channel,
                "websocket.http.response": {},
            },
        )
        del scope["method"]
        task = self._loop.create_task(
            session.run(self.server.app, scope), name=f"webtransport {stream_id}"
        )
        self._tasks.add(task)
        task.add_done_callback(lambda done: self._session_ended(session, done))

    def _session_ended(self, session: WebTransportSession, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._sessions.pop(session.session_id, None)
        if not session.closed:
            session.close(1000, "")
        if not task.cancelled() and task.exception() is not None:
            log.error("WebTransport session failed", exc_info=task.exception())

    def _scope(self, headers: Headers) -> dict[str, Any] | None:
        """The ASGI scope of a request's head; None when it lacks a pseudo-header."""
        pseudo: dict[bytes, bytes] = {}
        fields: list[tuple[bytes, bytes]] = []
        for name, value in headers:
            if name.startswith(b":"):
                pseudo[name] = value
            else:
                fields.append((name, value))
        method, path = pseudo.get(b":method"), pseudo.get(b":path")
        if not method or not path or b":scheme" not in pseudo:
            return None
        authority = pseudo.get(b":authority")
        if authority is not None and not any(name == b"host" for name, _ in fields):
            fields.insert(0, (b"host", authority))
        raw_path, _, query = path.partition(b"?")
        peer = self._quic.get_peer_address()
        return {
            "type": "http",
            "asgi": _ASGI,
            "http_version": "3",
            "method": method.decode("ascii", "replace"),
            "scheme": "https",
            "root_path": "",
            "path": unquote_to_bytes(raw_path).decode("utf-8", "replace"),
            "raw_path": raw_path,
            "query_string": query,
            "headers": fields,
            "client": (str(peer[0]), int(peer[1])) if peer else None,
            "server": self.server.address,
            "state": self.server.app_state.copy(),
            "extensions": {} if self.lane is None else {LANE_EXTENSION: self.lane},
        }

    def _refuse(self, stream_id: int, status: int, code: ErrorCode, reason: str) -> None:
        """Answer a request the application never sees with ``status`` and the JSON error
        body every other refusal has."""
        if self._h3 is None or not _writable(self, stream_id):
            return  # (HEADERS on a stream already answered or reset: trailers, say)
        body = error_json(AirlaneError(reason, code=code), status=status)
        head = [(b":status", b"%d" % status), (b"content-type", b"application/json")]
        self._h3.send_headers(stream_id, head)
        self._h3.send_data(stream_id, body, end_stream=True)
        self.transmit()

    def _ended(self, request: H3Request, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._requests.pop(request.stream_id, None)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            log.error("HTTP/3 request failed", exc_info=exc)
            if not request.finished and not self._closed_here:
                self._quic.reset_stream(request.stream_id, H3_REQUEST_CANCELLED)
                self.transmit()

    # -- writing (H3Writer) ----------------------------------------------------------------

    def send_head(self, stream_id: int, headers: list[tuple[bytes, bytes]], end: bool) -> None:
        """Send a response's head (``:status`` first) on ``stream_id`` (nothing if it takes no
        more bytes: see `writable`)."""
        if self._h3 is not None and self.writable(stream_id):
            self._h3.send_headers(stream_id, headers, end_stream=end)
            self.transmit()

    def send_body(self, stream_id: int, data: bytes, end: bool, *, raw: bool = False) -> None:
        """Send response body bytes on ``stream_id`` (``raw``: as they are, on a WebTransport
        stream, not in HTTP/3 DATA frames); nothing if it takes no more bytes (`writable`):
        aioquic raises on a write to a stream the client stopped."""
        if self._h3 is not None and self.writable(stream_id):
            if raw:
                self._quic.send_stream_data(stream_id, data, end_stream=end)
            else:
                self._h3.send_data(stream_id, data, end_stream=end)
            self.transmit()

    def writable(self, stream_id: int) -> bool:
        """Whether ``stream_id`` takes more bytes: the connection is open, and the stream was
        neither ended here nor stopped (STOP_SENDING) or reset by the client."""
        return self._h3 is not None and not self._closed_here and _writable(self, stream_id)

    def send_datagram(self, session_id: int, data: bytes) -> None:
        """Send a datagram of WebTransport session ``session_id``."""
        if self._h3 is not None and not self._closed_here:
            self._h3.send_datagram(session_id, data)
            self.transmit()

    def open_webtransport_stream(self, session_id: int) -> int:
        """A new unidirectional stream of WebTransport session ``session_id``: its id."""
        assert self._h3 is not None
        return self._h3.create_webtransport_stream(session_id, is_unidirectional=True)

    def drained(self, stream_id: int) -> Awaitable[None] | None:
        """None while ``stream_id`` holds at most `buffer_limit` unacknowledged; else a future
        that the connection completes once it holds half as much (or is gone)."""
        limit = self.buffer_limit()
        if self._closed_here or _unacknowledged(self, stream_id) <= limit:
            return None
        waiter = self._waiting.get(stream_id)
        if waiter is None:
            waiter = self._waiting[stream_id] = self._loop.create_future()
        return waiter

    async def flushed(self, stream_id: int) -> None:
        """Return once the peer has acknowledged every byte sent on ``stream_id`` so far (or
        the connection is gone): a response that changed the connection's lane for its
        bytes (`airlane.runtime.datagram_lanes.DatagramLane.bulk_while`) keeps it until
        they have all left, not only until they were handed to the connection."""
        if self._closed_here or _unacknowledged(self, stream_id) == 0:
            return
        waiter = self._flushing.get(stream_id)
        if waiter is None:
            waiter = self._flushing[stream_id] = self._loop.create_future()
        await asyncio.shield(waiter)

    def buffer_limit(self) -> int:
        """Unacknowledged bytes a stream may hold before its writer waits: ``max_buffered_bytes``,
        or four congestion windows where that is more. A stream holds everything after its
        oldest unacknowledged byte, so one lost packet keeps a round trip and a resend of
        sending in the buffer: a fixed limit below that left the sender idle on every loss
        (at 10 % loss, half the time); a window is bounded by the path's measured capacity."""
        window = self._quic._loss.congestion_window
        return max(self.server.config.max_buffered_bytes, min(4 * window, MAX_BUFFER_BYTES))

    def stop_reading(self, stream_id: int) -> None:
        """Ask the peer to stop sending on ``stream_id``."""
        if not self._closed_here:
            self._quic.stop_stream(stream_id, H3_NO_ERROR)
            self.transmit()

    def _wake_writers(self) -> None:
        low = self.buffer_limit() // 2
        for stream_id, waiter in list(self._waiting.items()):
            if self._closed_here or _unacknowledged(self, stream_id) <= low:
                del self._waiting[stream_id]
                if not waiter.done():
                    waiter.set_result(None)
        for stream_id, waiter in list(self._flushing.items()):
            if self._closed_here or _unacknowledged(self, stream_id) == 0:
                del self._flushing[stream_id]
                if not waiter.done():
                    waiter.set_result(None)

    # -- life -------------------------------------------------------------------------------

    def _arm_keep_alive(self) -> None:
        interval = self.server.config.keep_alive_s
        if interval and not self._closed_here:
            due = self._sent_at + interval
            self._keep_alive = self._loop.call_at(due, self._maybe_ping)

    def _maybe_ping(self) -> None:
        self._keep_alive = None
        if self._closed_here:
            return
        if self._loop.time() - self._sent_at >= self.server.config.keep_alive_s * 0.99:
            self._quic.send_ping(0)
            self.transmit()
        self._arm_keep_alive()

    def _handshake_over(self) -> None:
        self.server.handshaking.discard(self)
        if self._handshake_timer is not None:
            self._handshake_timer.cancel()
            self._handshake_timer = None

    def _abandon_handshake(self) -> None:
        """The handshake took too long (a spoofed or garbage Initial, or a client gone): the
        connection's state is dropped now, not at the idle timeout."""
        self._handshake_timer = None
        if self._handshake_done or self._closed_here:
            return
        self._quic.close(
            error_code=QUIC_CONNECTION_REFUSED,
            frame_type=_NO_FRAME,
            reason_phrase="handshake timeout",
        )
        self.transmit()
        self._terminated()
        self._connection_terminated_handler()  # aioquic's server forgets its connection ids

    def _terminated(self) -> None:
        """The connection is closed (by either side, or its idle timer): every request's
        client has gone."""
        if self._closed_here:
            return
        self._closed_here = True
        self._handshake_over()
        if self._keep_alive is not None:
            self._keep_alive.cancel()
        for request in self._requests.values():
            request.gone()
        for session in self._sessions.values():
            session.ended()
        self._wake_writers()
        self.server.closed(self)

    def shut(self) -> None:
        """Close the connection now (the server is stopping): requests end as disconnected."""
        if not self._closed_here:
            self._quic.close(error_code=H3_NO_ERROR, reason_phrase="the server is stopping")
            self.transmit()
            self._terminated()
        for task in self._tasks:
            task.cancel()


def _fec_group(query: bytes) -> int | None:
    """The ``fec=N`` of a session's query (2 to 32), else None."""
    for pair in query.split(b"&"):
        name, _, value = pair.partition(b"=")
        if name == b"fec" and value.isdigit():
            group = int(value)
            return group if 2 <= group <= 32 else None
    return None


def _unacknowledged(protocol: H3Protocol, stream_id: int) -> int:
    """Bytes written to ``stream_id`` that the peer has not acknowledged yet. aioquic keeps
    them in the stream's send buffer and offers no public count, so this reads it there. A
    reset stream holds none: nothing of it will be sent or acknowledged any more."""
    stream = protocol._quic._streams.get(stream_id)
    if stream is None or stream.sender._reset_error_code is not None:
        return 0
    return len(stream.sender._buffer)


def _writable(protocol: H3Protocol, stream_id: int) -> bool:
    """Whether ``stream_id`` can take more of a response: neither ended nor reset (aioquic
    raises on a write to either, and to a stream whose state it has discarded since)."""
    quic = protocol._quic
    stream = quic._streams.get(stream_id)
    if stream is None:
        # Either not opened yet on this side (aioquic makes it on the first write), or over
        # on both sides and forgotten (a stream the client stopped, once its reset was
        # acknowledged; an aioquic without the check keeps every stream until closed).
        discarded = getattr(quic, "_stream_is_discarded", None)
        return discarded is None or not discarded(stream_id)
    sender = stream.sender
    return sender._buffer_fin is None and sender._reset_error_code is None
