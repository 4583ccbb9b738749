"""`AircSession`: one AIRC connection bound to the gateway, whatever carries its bytes.

The transport (TCP or WebSocket) feeds it bytes and gives it a `Link` to write to; the session
drives an `AircConnection`, answers the signalling requests on stream 255 and runs one pump
task per Airlane stream it carries:

- ``GEN_REQ`` starts a generation (its body is an OpenAI chat request) and answers ``GEN_ACK``
  with the StreamID its events arrive on, the jitter-buffer threshold and the clock fields;
- ``OPEN`` subscribes to a stream, from its start or after a resume position, and answers
  ``OPENED``; ``CLOSE`` detaches (the stream's orphan policy applies), ``CANCEL`` stops the
  generation. When a stream ends for this reader the server sends ``CLOSE`` with the last seq;
- ``AUTH`` presents a bearer token where the transport itself carried none (plain TCP);
- ``RTC_OFFER`` / ``RTC_CANDIDATES`` / ``RTC_CLOSE`` are WebRTC signalling (a data-channel
  peer connection to the gateway, ``docs/webrtc.md``), answered through the `RtcSignalling`
  the transport was given (AIRC over WebSocket has one; without it they are refused with
  ``unsupported``). Each is answered ``RTC_ANSWER`` (for an offer, with the SDP answer).

A ``GEN_REQ`` whose ``encoder`` is ``airlane-loadtest`` asks for the seed's benchmark stream
instead (body: ``{"chunks": 200, "mode": "burst" | "paced", "interval_ms": 20}``), the same
source as ``/v1/loadtest/sse`` and ``/v1/loadtest/ws``: each chunk's JSON is one message, and
the stream is deleted once read (``airlane bench`` uses it for its AIRC rows).

Each event is one AIRC message: its native JSON (`airlane.wire.event_json`), encoded once per
event and shared by every AIRC subscriber. Control-lane events go out with PRIORITY.

Backpressure: a pump takes from its cursor only what the stream's send window has room for,
and waits for the peer's ACK (or the link's drain) otherwise; the hub's log is the buffer.
A request that cannot be honoured gets an ``ERROR`` and the connection stays open; only a
protocol violation closes it (with ``GOAWAY``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from airlane.core import Event, Kind, Lane, Position
from airlane.core.errors import AirlaneError, BadRequest, ErrorCode
from airlane.gateway import (
    Gateway,
    LoadTestSpec,
    PeerIdentity,
    Principal,
    RequestFacts,
    Subscription,
)
from airlane.runtime.admission import Admission
from airlane.runtime.drains import drain_queue
from airlane.runtime.eager import start_eagerly
from airlane.runtime.socket_lanes import LaneMarker
from airlane.runtime.timers import DeadlineTimer
from airlane.transports.airc.config import AircServerConfig
from airlane.transports.airc.errors import error_frame
from airlane.wire.airc import (
    ANY_STREAM,
    LOADTEST_ENCODER,
    SIGNALLING_STREAM,
    Acknowledged,
    AircConnection,
    AircEvent,
    Auth,
    Authenticated,
    Cancel,
    Cancelled,
    CancelStream,
    Close,
    ConnectionClosed,
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
    SendQueueFull,
    SetLane,
    SignalMessage,
    SignalReceived,
)
from airlane.wire.airc import ErrorCode as GoAwayCode
from airlane.wire.event_json import event_to_json

__all__ = ["FIRST_AIRLANE_STREAM", "MAX_AUTH_FAILURES", "AircSession", "Link", "RtcSignalling"]

log = logging.getLogger("airlane.airc")

FIRST_AIRLANE_STREAM = 20
"""StreamIDs below this are audio (0-9) and video (10-19); 255 is signalling."""
MAX_AUTH_FAILURES = 5
"""Refused ``AUTH`` messages after which a connection is ended (``GOAWAY AUTH_FAILED``)."""
_CACHE_KEY = "airc.json"
# Read per event sent: a global is a third of the cost of `Kind.MESSAGE` on Python 3.11.
_MESSAGE, _CONTROL = Kind.MESSAGE, Lane.CONTROL
_SIGNAL_RESERVE = 256 << 10
"""Bytes of the connection's send queue kept for signalling (an eighth of it at most)."""
_I32 = (-(1 << 31), (1 << 31) - 1)


_AIRC = RequestFacts("airc")


def _airc_facts() -> RequestFacts:
    """What a policy rule can match of an AIRC request: the wire (AIRC has no method, path or
    per-request metadata)."""
    return _AIRC


class Link(Protocol):
    """Where a session's bytes go: a TCP transport or a WebSocket."""

    def write(self, data: bytes) -> None:
        """Send ``data`` (buffered; never blocks)."""
        ...

    def close(self, code: GoAwayCode, reason: str) -> None:
        """Close after what was written, for ``code``."""
        ...


class RtcSignalling(Protocol):
    """Where WebRTC signalling goes: the HTTP transport's peer connections."""

    async def offer(self, principal: Principal, sdp: str) -> tuple[str, str]:
        """A new peer connection for ``sdp``: its session id and the answer."""
        ...

    async def add_candidates(self, principal: Principal, session: str, fragment: str) -> str:
        """The client's trickled candidates for ``session``; for an ICE restart (new
        credentials in ``fragment``) the fragment to answer with, else ``""``."""
        ...

    async def close(self, principal: Principal, session: str) -> None:
        """Close ``session``."""
        ...


@dataclass(slots=True)
class _Binding:
    """One Airlane stream carried on one StreamID."""

    stream: int
    stream_id: str
    subscription: Subscription
    wake: asyncio.Event
    task: asyncio.Task[None] | None = None
    """The pump task (tasked mode only)."""
    direct: bool = False
    """Driven by the hub's call-back (`Subscription.listen`) instead of a task."""
    loadtest: bool = False
    """Carries benchmark chunks: each chunk's raw JSON, and the stream is deleted after."""
    held: list[Event] = field(default_factory=list)
    """Events taken from the cursor that did not fit the connection's send queue yet (at
    most one batch): they go first, once it has room."""


class AircSession:
    """One AIRC connection serving the gateway. See the module docstring."""

    def __init__(
        self,
        gateway: Gateway,
        config: AircServerConfig,
        link: Link,
        *,
        principal: Principal | None,
        peer: PeerIdentity | None = None,
        origin: str | None = None,
        rtc: RtcSignalling | None = None,
        mark_lane: LaneMarker | None = None,
    ) -> None:
        self.gateway = gateway
        self.config = config
        self._link = link
        self._rtc = rtc
        self._mark_lane = mark_lane  # marks the socket under this connection, where there is one
        self._principal = principal
        self._peer = peer  # the TLS client certificate's identity, if any
        self._origin = origin  # the client's address, for the audit log
        self._auth_failures = 0
        self._loop = asyncio.get_running_loop()
        self.connection = AircConnection(config.connection, now=time.monotonic())
        """The protocol state machine."""
        self._bindings: dict[int, _Binding] = {}
        self._reserved: dict[int, str | None] = {}  # StreamIDs of requests in progress
        self._ready: dict[int, _Binding] = {}  # direct-mode bindings to drain this turn
        # Room the data streams leave in the connection's send queue for replies (GEN_ACK,
        # OPENED, CLOSE, ERROR), so that a queue full of data never refuses one.
        self._signal_reserve = min(_SIGNAL_RESERVE, config.connection.max_queued_bytes // 8)
        self._blocked: dict[int, _Binding] = {}
        """Bindings waiting for room in the connection's send queue (which any stream's ACK
        may make), by StreamID."""
        self._drain_scheduled = False
        self._drains = drain_queue(self._loop)
        self._requests: set[asyncio.Task[None]] = set()
        self._timer = DeadlineTimer(self._on_timer)
        self._writable = asyncio.Event()
        self._writable.set()
        self._closed = False
        # Learn the client's clock offset now, so GEN_ACK can report it.
        self.connection.request_clock_sync()
        self.flush()

    @property
    def closed(self) -> bool:
        """True once the connection ended (the link was told to close)."""
        return self._closed

    @property
    def streams(self) -> int:
        """Airlane streams carried now."""
        return len(self._bindings)

    # -- what the transport calls -----------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        """Bytes from the peer."""
        self._handle(self.connection.receive_data(data, time.monotonic()))
        self.flush()

    def pause_writing(self) -> None:
        """The link's buffer is full: pumps wait."""
        self._writable.clear()

    def resume_writing(self) -> None:
        """The link drained: pumps go on."""
        self._writable.set()
        for binding in self._bindings.values():
            if binding.direct:
                self._on_ready(binding)

    def close(self, code: GoAwayCode = GoAwayCode.NO_ERROR, reason: str = "") -> None:
        """End the connection with ``GOAWAY``."""
        self.connection.close(code, reason)
        self.flush()

    async def aclose(self) -> None:
        """Stop every pump and request and release every cursor (after the link is gone)."""
        self._closed = True
        self._timer.close()
        if self._mark_lane is not None:
            self._mark_lane.release()
        for binding in self._bindings.values():
            binding.subscription.listen(None)
        tasks = [b.task for b in self._bindings.values() if b.task is not None]
        tasks += self._requests
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        bindings, self._bindings = self._bindings, {}
        for binding in bindings.values():
            await binding.subscription.aclose()

    def flush(self) -> None:
        """Write what the connection has ready; close the link once it has ended."""
        connection = self.connection
        data = connection.data_to_send(time.monotonic())
        if data:
            self._link.write(data)
        if connection.closed is not None:
            if not self._closed:
                self._closed = True
                ended = connection.closed
                if not ended.by_peer and ended.code is not GoAwayCode.NO_ERROR:
                    log.info("AIRC connection closed: %s", ended.reason)
                self._link.close(ended.code, ended.reason)
                for binding in self._bindings.values():
                    binding.wake.set()
            return
        self._timer.arm(connection.get_timer())

    def _on_timer(self) -> None:
        self._handle(self.connection.handle_timer(time.monotonic()))
        self.flush()

    # -- events -----------------------------------------------------------------------------

    def _handle(self, events: list[AircEvent]) -> None:
        for event in events:
            if isinstance(event, Acknowledged):
                binding = self._bindings.get(event.stream_id)
                if binding is not None:
                    self._wake(binding)
                if self._blocked:
                    blocked, self._blocked = self._blocked, {}
                    for other in blocked.values():
                        if other is not binding and self._bindings.get(other.stream) is other:
                            self._wake(other)
            elif isinstance(event, SignalReceived):
                self._on_signal(event)
            elif isinstance(event, MessageReceived):
                unsupported = "clients do not send on data streams"
                self._refuse(0, AirlaneError(unsupported, code=ErrorCode.UNSUPPORTED))
            elif isinstance(event, ConnectionClosed):
                for binding in self._bindings.values():
                    binding.wake.set()

    def _wake(self, binding: _Binding) -> None:
        """``binding`` may send more: pump it now (direct mode; the caller flushes) or wake
        its task."""
        if binding.direct:
            self._pump_direct(binding)
        else:
            binding.wake.set()

    def _on_signal(self, event: SignalReceived) -> None:
        message = event.message
        if isinstance(message, GenRequest):
            self._start(message.request_id, self._generate(message, event))
        elif isinstance(message, Open):
            self._start(message.request_id, self._open(message))
        elif isinstance(message, Cancel):
            self._start(message.request_id, self._cancel(message))
        elif isinstance(message, CancelStream):
            self._start(message.request_id, self._cancel_stream(message))
        elif isinstance(message, SetLane):
            self._start(message.request_id, self._set_lane(message))
        elif isinstance(message, Close):
            self._start(0, self._detach(message.stream))
        elif isinstance(message, Auth):
            self._authenticate(message)
        elif isinstance(message, RtcOffer | RtcCandidates | RtcClose):
            self._start(message.request_id, self._webrtc(message))
        else:
            self.connection.close(
                GoAwayCode.BAD_SIGNALLING,
                f"{type(message).__name__} is sent by servers, not clients",
            )

    def _start(self, request_id: int, work: Coroutine[Any, Any, None]) -> None:
        if len(self._requests) >= self.config.max_requests:
            work.close()
            self._refuse(
                request_id,
                AirlaneError(
                    f"at most {self.config.max_requests} requests may be in progress at once",
                    code=ErrorCode.TOO_MANY_REQUESTS,
                ),
            )
            return
        # Run it in place until it first waits (usually to the end: the gateway's calls rarely
        # suspend), so that its answer and the stream's first events leave in this loop turn
        # instead of after every other connection's work queued meanwhile.
        task = start_eagerly(self._answer(request_id, work), name=f"airc-request {request_id}")
        if task is not None:
            self._requests.add(task)
            task.add_done_callback(self._requests.discard)

    async def _answer(self, request_id: int, work: Coroutine[Any, Any, None]) -> None:
        try:
            await work
        except AirlaneError as exc:
            self._refuse(request_id, exc)
        except Exception:
            log.exception("AIRC request %d failed", request_id)
            self._refuse(request_id, AirlaneError("the request failed unexpectedly"))

    def _refuse(self, request_id: int, exc: AirlaneError) -> None:
        self._signal(error_frame(request_id, exc))

    def _signal(self, message: SignalMessage) -> None:
        if self.connection.closed is None:
            try:
                self.connection.send_signal(message)
            except SendQueueFull:
                # Past the room data leaves for replies: a client that leaves the signalling
                # stream unacknowledged while it piles up requests. It reads nothing, so it
                # is ended.
                self.connection.close(GoAwayCode.FLOW_CONTROL, "replies are not acknowledged")
            self.flush()

    # -- requests ---------------------------------------------------------------------------

    def _authenticate(self, message: Auth) -> None:
        try:
            self._principal = self.gateway.authenticate(
                message.token or None, self._peer, origin=self._origin, request=_airc_facts
            )
        except AirlaneError as exc:
            self._refuse(message.request_id, exc)
            self._auth_failures += 1
            if self._auth_failures >= MAX_AUTH_FAILURES:  # one connection is no guessing rig
                self.connection.close(GoAwayCode.AUTH_FAILED, "too many refused AUTH messages")
            return
        self._signal(Authenticated(message.request_id, self._principal.name[:200]))

    def _who(self) -> Principal:
        if self._principal is None:
            try:
                self._principal = self.gateway.authenticate(
                    None, self._peer, origin=self._origin, request=_airc_facts
                )
            except AirlaneError:
                if self._peer is not None:
                    raise  # the certificate's refusal says why
                raise AirlaneError(
                    "send AUTH with an API key first", code=ErrorCode.UNAUTHENTICATED
                ) from None
        return self._principal

    async def _generate(self, message: GenRequest, event: SignalReceived) -> None:
        # Set-up waits while paced work is due (a burst of GEN_REQs must not hold it); only
        # this request waits: each runs in a task of its own.
        await Admission.for_loop().admit()
        principal = self._who()
        try:
            body = orjson.loads(message.body)
        except orjson.JSONDecodeError as exc:
            raise BadRequest(f"GEN_REQ body is not JSON: {exc}") from None
        gateway = self.gateway
        loadtest = message.encoder == LOADTEST_ENCODER
        with self._reserving(message.requested_stream, None) as stream:
            if loadtest:
                info = await gateway.start_loadtest(principal, _loadtest_spec(body))
            else:
                info = (await gateway.start_chat(principal, body)).info
            subscription = await gateway.subscribe(principal, info.stream_id)
        offset = self.connection.clock.offset_us  # client clock minus ours
        self._signal(
            GenAck(
                request_id=message.request_id,
                stream=stream,
                jitter_buffer_us=self.config.jitter_buffer_us,
                origin_ts=event.timestamp,
                receive_ts=event.received_at,
                clock_offset_us=0 if offset is None else _clamp_i32(-round(offset)),
                airlane_stream=info.stream_id,
                epoch=info.epoch,
            )
        )
        self._bind(stream, info.stream_id, subscription, loadtest=loadtest)

    async def _open(self, message: Open) -> None:
        principal = self._who()
        resume = None
        if message.epoch:
            resume = Position.parse(f"{message.epoch}:{message.after_seq}")
        with self._reserving(message.requested_stream, message.airlane_stream) as stream:
            subscription = await self.gateway.subscribe(
                principal, message.airlane_stream, resume=resume
            )
        position = subscription.position
        ended = subscription.exhausted
        self._signal(
            Opened(
                request_id=message.request_id,
                stream=stream,
                airlane_stream=message.airlane_stream,
                epoch=position.epoch,
                from_seq=position.seq,
                ended=ended,
            )
        )
        if ended:
            # Resumed at the very end of a finished stream: nothing will ever come.
            await subscription.aclose()
        else:
            self._bind(stream, message.airlane_stream, subscription)

    async def _cancel(self, message: Cancel) -> None:
        principal = self._who()
        binding = self._bindings.get(message.stream)
        if binding is None:
            raise AirlaneError(
                f"no Airlane stream on {message.stream}", code=ErrorCode.UNKNOWN_STREAM
            )
        cancelled = await self.gateway.cancel(principal, binding.stream_id)
        self._signal(Cancelled(message.request_id, message.stream, cancelled))

    async def _cancel_stream(self, message: CancelStream) -> None:
        # From a control connection: the generation may run on another connection (or node).
        cancelled = await self.gateway.cancel(self._who(), message.airlane_stream)
        self._signal(Cancelled(message.request_id, ANY_STREAM, cancelled))

    async def _set_lane(self, message: SetLane) -> None:
        self._who()  # an unauthenticated connection marks nothing
        try:
            lane = Lane(message.lane)
        except ValueError:
            raise BadRequest(
                f"lane must be 0 (control), 1 (interactive) or 2 (bulk), not {message.lane}",
                param="lane",
            ) from None
        marks = self._mark_lane(lane) if self._mark_lane is not None else ""
        self._signal(LaneSet(message.request_id, lane, marks))

    async def _webrtc(self, message: RtcOffer | RtcCandidates | RtcClose) -> None:
        principal = self._who()
        if self._rtc is None:
            raise AirlaneError(
                "WebRTC signalling is served on AIRC over WebSocket (/v1/ws, airc.v1.2) and "
                "at POST /v1/webrtc, not on this listener",
                code=ErrorCode.UNSUPPORTED,
            )
        if isinstance(message, RtcOffer):
            session, answer = await self._rtc.offer(principal, message.sdp)
        elif isinstance(message, RtcCandidates):
            session = message.session
            answer = await self._rtc.add_candidates(principal, session, message.fragment)
        else:
            session, answer = message.session, ""
            await self._rtc.close(principal, session)
        self._signal(RtcAnswer(message.request_id, session, answer))

    async def _detach(self, stream: int) -> None:
        binding = self._bindings.pop(stream, None)
        if binding is None:
            return
        binding.subscription.listen(None)
        if binding.task is not None:
            binding.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await binding.task
        await binding.subscription.aclose()

    @contextlib.contextmanager
    def _reserving(self, requested: int, stream_id: str | None) -> Iterator[int]:
        """A StreamID for a request in progress (the requested one if free), held until the
        request binds it or fails, so that concurrent requests never share one."""
        taken = self._bindings.keys() | self._reserved.keys()
        if len(taken) >= self.config.max_subscriptions:
            raise AirlaneError(
                f"at most {self.config.max_subscriptions} streams per connection",
                code=ErrorCode.TOO_MANY_SUBSCRIPTIONS,
            )
        # A binding whose stream is over is only waiting to say CLOSE: it does not count.
        if stream_id is not None and stream_id in {
            *(b.stream_id for b in self._bindings.values() if not b.subscription.over),
            *self._reserved.values(),
        }:
            raise AirlaneError(
                f"already subscribed to {stream_id!r}", code=ErrorCode.ALREADY_SUBSCRIBED
            )
        stream = requested
        if stream in (ANY_STREAM, SIGNALLING_STREAM) or stream in taken:
            stream = FIRST_AIRLANE_STREAM
            while stream in taken or stream == SIGNALLING_STREAM:
                stream += 1
        self._reserved[stream] = stream_id
        try:
            yield stream
        finally:
            del self._reserved[stream]

    def _bind(
        self, stream: int, stream_id: str, subscription: Subscription, *, loadtest: bool = False
    ) -> None:
        binding = _Binding(stream, stream_id, subscription, asyncio.Event(), loadtest=loadtest)
        self._bindings[stream] = binding
        if subscription.listen(lambda: self._on_ready(binding)):
            # Direct mode: the hub calls back as events are appended, and a drain at the end
            # of that loop turn sends them: no task, and no task switch per batch.
            binding.direct = True
            self._pump_direct(binding)  # what is already there
            self.flush()
        else:
            # The pump's first batch goes out now if the producer already made one.
            binding.task = start_eagerly(self._pump(binding), name=f"airc-pump {stream_id}")

    # -- writing ----------------------------------------------------------------------------

    def _on_ready(self, binding: _Binding) -> None:
        """The hub's call-back: ``binding`` may have events. Drained at the end of this loop
        turn (or sooner when many pumps are due: `airlane.runtime.drains`), so that what the
        producers of this turn append leaves in one write."""
        self._ready[binding.stream] = binding
        if not self._drain_scheduled:
            self._drain_scheduled = True
            self._drains.add(self._drain)

    def _drain(self) -> None:
        self._drain_scheduled = False
        ready, self._ready = self._ready, {}
        try:
            for binding in ready.values():
                self._pump_direct(binding)
        except Exception:  # a call-back must not raise into the hub; end the connection
            log.exception("AIRC pump failed")
            self.connection.close(GoAwayCode.INTERNAL_ERROR, "the gateway failed")
        self.flush()

    def _pump_direct(self, binding: _Binding) -> None:
        """Send what ``binding``'s cursor has, as far as the window, the connection's send
        queue and the link allow (an ``ACK`` or the link's drain calls again); release it
        once the stream is over."""
        connection = self.connection
        if self._bindings.get(binding.stream) is not binding or connection.closed is not None:
            return
        subscription, stream = binding.subscription, binding.stream
        window, limit = self.config.connection.send_window, self.config.batch_limit
        while self._writable.is_set():
            if binding.held and not self._send_held(binding):
                return
            if subscription.over:  # the terminal event went out (or the stream is gone)
                # CLOSE travels with priority, so it waits until the peer has acknowledged
                # every frame of the stream (the last ACK calls here again).
                if not connection.pending(stream):
                    self._finish(binding)
                return
            room = window - connection.unacknowledged(stream)
            if room <= 0 or not connection.can_send(stream):
                self._wait_for_room(binding)
                return
            batch = subscription.poll(min(room, limit))
            if not batch:
                return
            if not self._send_events(binding, batch):
                return

    def _wait_for_room(self, binding: _Binding) -> None:
        """``binding`` cannot send now. Its own ``ACK`` wakes it when its window or queue
        was the reason; when the connection's send queue is full, any stream's may."""
        if self.connection.queued_bytes >= self.config.connection.max_queued_bytes:
            self._blocked[binding.stream] = binding

    def _finish(self, binding: _Binding) -> None:
        """The stream is over for this reader: say so, with where it ended, and let go."""
        del self._bindings[binding.stream]
        self._blocked.pop(binding.stream, None)
        binding.subscription.listen(None)
        self._signal(Close(binding.stream, binding.subscription.position.seq))
        task = asyncio.create_task(self._release(binding), name="airc-release")
        self._requests.add(task)
        task.add_done_callback(self._requests.discard)

    async def _release(self, binding: _Binding) -> None:
        await binding.subscription.aclose()
        if binding.loadtest:  # nobody else wants a benchmark stream's chunks: free them now
            with contextlib.suppress(AirlaneError):
                await self.gateway.delete(self._who(), binding.stream_id)

    def _send_events(self, binding: _Binding, batch: list[Event]) -> bool:
        """Queue ``batch`` on the connection, in order, as far as its send queue has room;
        keep the rest in ``binding.held`` (they left the cursor). True if all were queued."""
        connection, stream = self.connection, binding.stream
        sent = len(batch)
        for i, event in enumerate(batch):
            if binding.loadtest:
                if event.kind is not _MESSAGE or event.raw is None:
                    continue
                payload = event.raw
            else:
                payload = _payload(event)
            if not connection.fits(len(payload) + self._signal_reserve):
                sent = i
                break
            priority = not binding.loadtest and event.lane is _CONTROL
            connection.send_message(stream, payload, priority=priority)
        if sent < len(batch):
            binding.held = batch[sent:]
            self._blocked[stream] = binding
        if sent:
            binding.subscription.mark_written(batch[:sent], time.monotonic_ns())
        return sent == len(batch)

    def _send_held(self, binding: _Binding) -> bool:
        """Queue what ``binding`` holds back; True once nothing is held."""
        held, binding.held = binding.held, []
        return self._send_events(binding, held)

    async def _pump(self, binding: _Binding) -> None:
        """Tasked mode, for hubs that cannot call back: wait for each batch."""
        connection = self.connection
        subscription = binding.subscription
        stream = binding.stream
        window = self.config.connection.send_window
        limit = self.config.batch_limit
        while connection.closed is None:
            if not self._writable.is_set():
                await self._writable.wait()
                continue
            room = window - connection.unacknowledged(stream)
            if binding.held:
                sent = self._send_held(binding)
                self.flush()
                if sent:
                    continue
            elif room > 0 and connection.can_send(stream):
                batch = await subscription.next_batch(min(room, limit))
                if not batch or connection.closed is not None:
                    break
                self._send_events(binding, batch)
                self.flush()
                continue
            else:
                self._wait_for_room(binding)
            binding.wake.clear()
            await binding.wake.wait()
        else:
            return
        while connection.pending(stream) and connection.closed is None:
            binding.wake.clear()  # CLOSE only once the peer has every frame (see _pump_direct)
            await binding.wake.wait()
        if self._bindings.get(stream) is binding:
            del self._bindings[stream]
            self._signal(Close(stream, subscription.position.seq))
            await self._release(binding)


def _payload(event: Event) -> bytes:
    """The event's native JSON, encoded once for every AIRC subscriber."""
    payload = event.cached(_CACHE_KEY)
    if payload is None:
        payload = event.cache(_CACHE_KEY, event_to_json(event))
    return payload


def _loadtest_spec(body: Any) -> LoadTestSpec:
    """The benchmark workload a load-test ``GEN_REQ`` asks for (the limits of
    ``/v1/loadtest``)."""
    if not isinstance(body, dict):
        raise BadRequest("a load-test GEN_REQ body must be an object")
    return Gateway.loadtest_spec(
        body.get("chunks", 200), body.get("mode", "burst"), body.get("interval_ms", 20.0)
    )


def _clamp_i32(value: int) -> int:
    return max(_I32[0], min(_I32[1], value))
