"""`AircClient`: Airlane streams over AIRC v1.2, on plain TCP or on a WebSocket.

The same sans-I/O `AircConnection` the gateway runs drives this client: one reader task feeds
it what arrives, a timer runs its ACK delays and retransmissions, and whatever it has to send
is written at once. Requests are signalling messages on stream 255, matched to their answers by
``request_id``; every Airlane stream arrives on its own 16-bit StreamID, one event per message,
and is read through a `WsSubscription` (an async iterator of `StreamEvent`).

Resuming: a subscription's ``last_id`` is a resume token; after a lost connection, a new
client continues with ``subscribe(stream_id, resume=last_id)`` and gets exactly the events
after it. A subscription whose buffer overflows re-opens its stream from its last event.

Over TCP, a gateway that requires API keys is given the key with ``AUTH``; over a WebSocket it
travels in the handshake, as for ``/v1/ws``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import orjson
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed as WsConnectionClosed
from websockets.exceptions import WebSocketException

from airlane.client.errors import (
    ClientClosed,
    ClientError,
    ConnectFailed,
    ConnectionLost,
    ProtocolViolation,
    RequestRejected,
    rejected,
)
from airlane.client.events import StreamEvent
from airlane.client.subscription import DEFAULT_MAX_QUEUE, WsSubscription
from airlane.core import Lane
from airlane.runtime.socket_lanes import LanesConfig, MarkableSocket, mark_socket
from airlane.runtime.timers import DeadlineTimer
from airlane.wire.airc import (
    AIRC_SUBPROTOCOL,
    ANY_STREAM,
    AircConfig,
    AircConnection,
    AircEvent,
    Auth,
    Authenticated,
    Cancel,
    Cancelled,
    CancelStream,
    ClockUpdated,
    Close,
    Error,
    GenAck,
    GenRequest,
    LaneSet,
    MessageReceived,
    Open,
    Opened,
    RtcAnswer,
    RtcCandidates,
    RtcClose,
    RtcOffer,
    SetLane,
    SignalMessage,
    SignalReceived,
)

__all__ = ["AircClient", "AircStream"]

log = logging.getLogger("airlane.client.airc")


DEFAULT_REQUEST_TIMEOUT_S = 30.0
"""How long a request waits for its answer."""

_READ_SIZE = 256 * 1024

AircStream = WsSubscription
"""One Airlane stream read over AIRC: an async iterator of `StreamEvent` with a resume token
(``last_id``); the same class `airlane.client.WsClient` returns."""


class _Pipe(Protocol):
    """What the client needs from TCP or a WebSocket."""

    async def read(self) -> bytes:
        """The next bytes; ``b""`` at the end."""
        ...

    def write(self, data: bytes) -> None:
        """Send ``data`` (buffered)."""
        ...

    async def aclose(self) -> None:
        """Close the link."""
        ...

    @property
    def socket(self) -> MarkableSocket | None:
        """The TCP socket under the link, if there is one."""
        ...


class _TcpPipe:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader, self._writer = reader, writer

    async def read(self) -> bytes:
        return await self._reader.read(_READ_SIZE)

    def write(self, data: bytes) -> None:
        if not self._writer.is_closing():
            self._writer.write(data)

    async def aclose(self) -> None:
        self._writer.close()
        with contextlib.suppress(OSError):
            await self._writer.wait_closed()

    @property
    def socket(self) -> MarkableSocket | None:
        sock: MarkableSocket | None = self._writer.get_extra_info("socket")
        return sock


class _WebSocketPipe:
    def __init__(self, conn: ClientConnection) -> None:
        self._conn = conn
        self._pending: list[bytes] = []
        self._ready = asyncio.Event()
        self._writer = asyncio.create_task(self._write_loop(), name="airc-ws-client-writer")
        self.close_code: int | None = None
        self.close_reason = ""

    async def read(self) -> bytes:
        try:
            data = await self._conn.recv(decode=False)
        except WsConnectionClosed as exc:
            if exc.rcvd is not None:
                self.close_code, self.close_reason = exc.rcvd.code, exc.rcvd.reason
            return b""
        if isinstance(data, str):
            raise ProtocolViolation("AIRC over WebSocket uses binary messages")
        return data

    def write(self, data: bytes) -> None:
        self._pending.append(data)
        self._ready.set()

    async def _write_loop(self) -> None:
        with contextlib.suppress(WsConnectionClosed):
            while True:
                await self._ready.wait()
                self._ready.clear()
                data = b"".join(self._pending)
                self._pending.clear()
                await self._conn.send(data)

    async def aclose(self) -> None:
        self._writer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._writer
        await self._conn.close()

    @property
    def socket(self) -> MarkableSocket | None:
        sock: MarkableSocket | None = self._conn.transport.get_extra_info("socket")
        return sock


@dataclass(slots=True)
class _Waiting:
    """A request awaiting its answer; for GEN_REQ and OPEN, where its events will go."""

    future: asyncio.Future[SignalMessage]
    resume: str | None = None
    existing: WsSubscription | None = None
    subscription: WsSubscription | None = None


@dataclass(slots=True)
class _Carried:
    """An Airlane stream arriving on one StreamID."""

    subscription: WsSubscription
    epoch: str


class AircClient:
    """An AIRC client for one gateway; open it with `tcp` or `websocket`, use it as
    ``async with``."""

    def __init__(
        self,
        pipe: _Pipe,
        *,
        config: AircConfig | None = None,
        max_queue: int = DEFAULT_MAX_QUEUE,
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
    ) -> None:
        self._pipe = pipe
        self._loop = asyncio.get_running_loop()
        self.connection = AircConnection(config, now=time.monotonic())
        """The protocol state machine (its ``stats`` and ``clock`` are useful to read)."""
        self.last_gen_ack: GenAck | None = None
        """The latest ``GEN_ACK`` (StreamID, jitter-buffer threshold, clock fields)."""
        self.catch_ups = 0
        """How many times a lagging stream was re-opened from its last event."""
        self.marks = ""
        """What `set_lane` marked this end's socket with."""
        self._max_queue = max_queue
        self._request_timeout_s = request_timeout_s
        self._ids = itertools.count(1)
        self._pending: dict[int, _Waiting] = {}
        self._streams: dict[int, _Carried] = {}
        self._clock_waiters: list[asyncio.Future[float]] = []
        self._timer = DeadlineTimer(self._on_timer)
        self._failure: ClientError | None = None
        self._reader = asyncio.create_task(self._read_loop(), name="airc-client-reader")

    # -- opening ----------------------------------------------------------------------------

    @classmethod
    async def tcp(
        cls,
        host: str,
        port: int,
        api_key: str | None = None,
        *,
        tls: ssl.SSLContext | None = None,
        **options: Any,
    ) -> AircClient:
        """Connect to an AIRC/TCP listener (``airlane serve`` prints it as ``tcp://...``, or
        ``tcp+tls://...``: then pass ``tls``, a client context with the CA to trust and, for
        mutual TLS, this client's certificate).

        Raises:
            ConnectFailed: the listener could not be reached, refused the TLS handshake, or
                refused the API key.
        """
        try:
            reader, writer = await asyncio.open_connection(host, port, limit=_READ_SIZE, ssl=tls)
        except (OSError, ssl.SSLError) as exc:
            raise ConnectFailed(f"cannot connect to AIRC at {host}:{port}: {exc}") from exc
        client = cls(_TcpPipe(reader, writer), **options)
        if api_key is not None:
            try:
                await client.authenticate(api_key)
            except ClientError as exc:
                await client.aclose()
                raise ConnectFailed(f"AIRC authentication failed: {exc}") from exc
        return client

    @classmethod
    async def websocket(
        cls, base_url: str, api_key: str | None = None, **options: Any
    ) -> AircClient:
        """Connect to ``/v1/ws`` of a gateway (``http://host:port``) with the ``airc.v1.2``
        subprotocol.

        Raises:
            ConnectFailed: the gateway could not be reached or refused the handshake.
        """
        url = base_url.rstrip("/").replace("http://", "ws://", 1).replace("https://", "wss://", 1)
        if not url.endswith("/v1/ws"):
            url += "/v1/ws"
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        try:
            conn = await connect(
                url,
                subprotocols=[AIRC_SUBPROTOCOL],  # type: ignore[list-item]
                additional_headers=headers,
                compression=None,
                proxy=None,
                max_size=1 << 20,
            )
        except (OSError, TimeoutError, WebSocketException) as exc:
            raise ConnectFailed(f"cannot open {url}: {exc}") from exc
        if conn.subprotocol != AIRC_SUBPROTOCOL:
            await conn.close()
            raise ConnectFailed(f"{url} did not accept the {AIRC_SUBPROTOCOL} subprotocol")
        return cls(_WebSocketPipe(conn), **options)

    async def __aenter__(self) -> AircClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Say ``GOAWAY``, close the link and end every stream."""
        self.connection.close()
        self._flush()
        self._fail(ClientClosed("the AircClient is closed"))
        if self._reader is not asyncio.current_task():
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        self._timer.close()
        await self._pipe.aclose()

    # -- operations -------------------------------------------------------------------------

    async def authenticate(self, api_key: str) -> str:
        """Present an API key; return the principal name the gateway acts as."""
        request_id = self._next_id()
        reply = await self._request(request_id, Auth(request_id, api_key))
        assert isinstance(reply, Authenticated)
        return reply.principal

    async def generate(
        self,
        request: Mapping[str, Any],
        *,
        requested_stream: int = ANY_STREAM,
        sample_rate: int = 0,
        encoder: str = "",
    ) -> WsSubscription:
        """Start a generation (an OpenAI-style chat request) and read it."""
        request_id = self._next_id()
        body = orjson.dumps(dict(request))
        message = GenRequest(request_id, requested_stream, sample_rate, encoder, body)
        waiting = _Waiting(self._loop.create_future())
        reply = await self._request(request_id, message, waiting)
        assert isinstance(reply, GenAck) and waiting.subscription is not None
        self.last_gen_ack = reply
        return waiting.subscription

    async def subscribe(self, stream_id: str, resume: str | None = None) -> WsSubscription:
        """Read ``stream_id`` from after ``resume`` (a resume token ``epoch:seq``; None: from
        the start)."""
        if any(c.subscription.stream_id == stream_id for c in self._streams.values()):
            raise ValueError(f"already subscribed to {stream_id!r} on this client")
        return await self._open(stream_id, resume, None)

    async def cancel(self, stream: WsSubscription) -> bool:
        """Stop the generation behind ``stream``; True if it was still running."""
        number = self._number_of(stream)
        request_id = self._next_id()
        reply = await self._request(request_id, Cancel(request_id, number))
        assert isinstance(reply, Cancelled)
        return reply.cancelled

    async def cancel_stream(self, stream_id: str) -> bool:
        """Stop the generation of Airlane stream ``stream_id``, wherever it was started (on
        this connection, another, or another node): what a control connection sends
        (``CANCEL_STREAM``, docs/lanes.md). True if it was still running."""
        request_id = self._next_id()
        reply = await self._request(request_id, CancelStream(request_id, stream_id))
        assert isinstance(reply, Cancelled)
        return reply.cancelled

    async def set_lane(self, lane: Lane | str, lanes: LanesConfig | None = None) -> str:
        """Declare what this connection carries (``control``, ``interactive``, ``bulk``):
        this end's socket is marked for it (``lanes``: how; the defaults otherwise) and the
        gateway marks its own (``SET_LANE``, docs/lanes.md). Returns what the gateway set,
        such as ``"dscp=40 priority=6"`` (empty where it could mark nothing)."""
        if isinstance(lane, str):
            lane = LanesConfig.lane(lane)
        sock = self._pipe.socket
        if sock is not None:
            self.marks = mark_socket(sock, lane, lanes or LanesConfig())
        request_id = self._next_id()
        reply = await self._request(request_id, SetLane(request_id, int(lane)))
        assert isinstance(reply, LaneSet)
        return reply.marks

    async def unsubscribe(self, stream_id: str) -> str | None:
        """Stop reading ``stream_id`` (the stream goes on); return its resume token."""
        for number, carried in list(self._streams.items()):
            if carried.subscription.stream_id == stream_id:
                del self._streams[number]
                carried.subscription.close()
                self._send(Close(number, 0))
                return carried.subscription.last_id
        return None

    async def catch_up(self, subscription: WsSubscription) -> None:
        """Re-open a lagging stream from the last event it buffered."""
        self.catch_ups += 1
        for number, carried in list(self._streams.items()):
            if carried.subscription is subscription:
                del self._streams[number]
                self._send(Close(number, 0))
        subscription.lagging = False
        try:
            await self._open(subscription.stream_id, subscription.last_id, subscription)
        except RequestRejected as exc:
            subscription.fail(exc)

    async def sync_clock(self) -> float:
        """Run an NTP-style exchange; return the gateway's clock minus ours, in microseconds
        (the best estimate over recent exchanges)."""
        if self._failure is not None:
            raise self._failure
        future: asyncio.Future[float] = self._loop.create_future()
        self._clock_waiters.append(future)
        self.connection.request_clock_sync()
        self._flush()
        async with asyncio.timeout(self._request_timeout_s):
            return await future

    async def webrtc_offer(self, sdp: str) -> tuple[str, str]:
        """Offer a WebRTC peer connection to the gateway (``RTC_OFFER``, docs/webrtc.md): its
        session id and the SDP answer."""
        request_id = self._next_id()
        reply = await self._request(request_id, RtcOffer(request_id, sdp))
        assert isinstance(reply, RtcAnswer)
        return reply.session, reply.sdp

    async def webrtc_candidates(self, session: str, fragment: str) -> str:
        """Trickle candidates (``a=candidate:`` lines) to WebRTC session ``session``; a
        fragment with new ``a=ice-ufrag`` / ``a=ice-pwd`` restarts ICE, and the gateway's new
        credentials and candidates come back (otherwise ``""``)."""
        request_id = self._next_id()
        reply = await self._request(request_id, RtcCandidates(request_id, session, fragment))
        assert isinstance(reply, RtcAnswer)
        return reply.sdp

    async def webrtc_close(self, session: str) -> None:
        """Close WebRTC session ``session``."""
        request_id = self._next_id()
        await self._request(request_id, RtcClose(request_id, session))

    @property
    def streams(self) -> int:
        """Airlane streams open on this client."""
        return len(self._streams)

    # -- requests ---------------------------------------------------------------------------

    def _next_id(self) -> int:
        # request_id is a u16; 0 means "no request" in an ERROR, so it is skipped.
        return (next(self._ids) - 1) % 0xFFFF + 1

    async def _request(
        self, request_id: int, message: SignalMessage, waiting: _Waiting | None = None
    ) -> SignalMessage:
        if self._failure is not None:
            raise self._failure
        waiting = waiting or _Waiting(self._loop.create_future())
        self._pending[request_id] = waiting
        try:
            self._send(message)
            async with asyncio.timeout(self._request_timeout_s):
                return await waiting.future
        finally:
            self._pending.pop(request_id, None)

    async def _open(
        self, stream_id: str, resume: str | None, existing: WsSubscription | None
    ) -> WsSubscription:
        epoch, after = "", 0
        if resume:
            epoch, _, seq = resume.rpartition(":")
            if not epoch or not seq.isdigit():
                raise ValueError(f"not a resume token: {resume!r}")
            after = int(seq)
        request_id = self._next_id()
        waiting = _Waiting(self._loop.create_future(), resume, existing)
        message = Open(request_id, ANY_STREAM, stream_id, epoch, after)
        await self._request(request_id, message, waiting)
        assert waiting.subscription is not None
        return waiting.subscription

    def _number_of(self, stream: WsSubscription) -> int:
        for number, carried in self._streams.items():
            if carried.subscription is stream:
                return number
        raise ClientClosed(f"stream {stream.stream_id!r} is not open on this client")

    def _send(self, message: SignalMessage) -> None:
        if self._failure is not None:
            raise self._failure
        self.connection.send_signal(message)
        self._flush()

    # -- the reader -------------------------------------------------------------------------

    async def _read_loop(self) -> None:
        error: ClientError = ConnectionLost("the gateway closed the AIRC connection")
        try:
            while True:
                data = await self._pipe.read()
                if not data:
                    break
                self._handle(self.connection.receive_data(data, time.monotonic()))
                self._flush()
                ended = self.connection.closed
                if ended is not None:
                    reason = ended.reason or ended.code.name
                    error = ConnectionLost(f"the AIRC connection closed: {reason}")
                    break
        except ClientError as exc:
            error = exc
        except OSError as exc:
            error = ConnectionLost(f"the AIRC connection failed: {exc}")
        self._fail(error)

    def _handle(self, events: list[AircEvent]) -> None:
        for event in events:
            if isinstance(event, MessageReceived):
                self._on_event(event)
            elif isinstance(event, SignalReceived):
                self._on_signal(event.message)
            elif isinstance(event, ClockUpdated):
                waiters, self._clock_waiters = self._clock_waiters, []
                for future in waiters:
                    if not future.done():
                        future.set_result(event.offset_us)

    def _on_event(self, message: MessageReceived) -> None:
        carried = self._streams.get(message.stream_id)
        if carried is None:
            return  # a stream we detached from: its last events may still be in flight
        event = StreamEvent.from_json(message.data)
        token = f"{carried.epoch}:{event.seq}"
        carried.subscription.push(StreamEvent(event.seq, event.kind, event.data, token))
        if carried.subscription.finished:
            self._streams.pop(message.stream_id, None)

    def _on_signal(self, message: SignalMessage) -> None:
        if isinstance(message, Close):
            # The gateway let go of a stream we still read, before its end (a stream we
            # unsubscribed from is no longer here): the caller may resume it from last_id.
            carried = self._streams.pop(message.stream, None)
            if carried is not None and not carried.subscription.finished:
                carried.subscription.fail(
                    ConnectionLost(
                        f"the gateway stopped sending {carried.subscription.stream_id!r} "
                        f"before its end; resume from {carried.subscription.last_id}"
                    )
                )
            return
        request_id = getattr(message, "request_id", None)
        waiting = self._pending.get(request_id) if isinstance(request_id, int) else None
        if waiting is None or waiting.future.done():
            log.debug("unsolicited AIRC signal: %r", message)
            return
        if isinstance(message, Error):
            waiting.future.set_exception(rejected(message.message, code=message.code))
            return
        if isinstance(message, GenAck | Opened):
            # Attach now, in the reader: the stream's first events may follow in this read.
            subscription = waiting.existing or WsSubscription(
                message.airlane_stream, self, resume=waiting.resume, max_queue=self._max_queue
            )
            waiting.subscription = subscription
            if isinstance(message, Opened) and message.ended:
                subscription.close()
            else:
                self._streams[message.stream] = _Carried(subscription, message.epoch)
        waiting.future.set_result(message)

    # -- plumbing ---------------------------------------------------------------------------

    def _flush(self) -> None:
        data = self.connection.data_to_send(time.monotonic())
        if data:
            self._pipe.write(data)
        self._timer.arm(self.connection.get_timer())

    def _on_timer(self) -> None:
        self._handle(self.connection.handle_timer(time.monotonic()))
        self._flush()
        ended = self.connection.closed
        if ended is not None:  # the gateway stopped acknowledging
            self._fail(ConnectionLost(f"the AIRC connection failed: {ended.reason}"))

    def _fail(self, error: ClientError) -> None:
        if self._failure is None:
            self._failure = error
        pending, self._pending = self._pending, {}
        for waiting in pending.values():
            if not waiting.future.done():
                waiting.future.set_exception(error)
                waiting.future.exception()  # mark retrieved: its requester may be gone
        for future in self._clock_waiters:
            if not future.done():
                future.set_exception(error)
                future.exception()
        self._clock_waiters.clear()
        streams, self._streams = self._streams, {}
        for carried in streams.values():
            carried.subscription.fail(error)
