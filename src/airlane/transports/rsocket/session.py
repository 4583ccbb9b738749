"""`RSocketSession`: one RSocket connection bound to the gateway, whatever carries its frames.

The transport (TCP or WebSocket) feeds it bytes or frames and gives it a `Link` to write to;
the session drives an `RSocketServerConnection` (`airlane.wire.rsocket`) and serves each
request in a task of its own, by its route (`airlane.transports.rsocket.routes`):

- **SETUP** picks the data encoding (JSON or MessagePack: `airlane.transports.rsocket.codec`)
  and the metadata form (composite metadata, or routing metadata alone); its authentication
  metadata, if any, is the connection's principal (a refusal is ``REJECTED_SETUP``). A
  connection that sends no SETUP within ``setup_timeout_s`` is closed.
- **Resumption**: a session set up with a resume token is detached, not closed, when its
  connection drops (`detach`, kept by `airlane.transports.rsocket.resumption`); a RESUME with
  that token on a new connection of this node re-attaches it (`attach`): the client gets what it
  had not received and every request goes on. A RESUME this node cannot honour is refused with
  ``REJECTED_RESUME``: the client sets up again and subscribes from its last position.
- A request's own authentication metadata, if any, stands for that request alone.
- **Credit**: a request-stream is sent at most as many payloads as the client asked for; its
  task takes from the stream's cursor only that many events, and waits for ``REQUEST_N``
  otherwise, so a slow client costs the server its cursor and nothing more: the hub's log is
  the buffer. Writes also wait while the link's buffer is full.
- ``CANCEL`` (or an ERROR from the client) stops the request's task; its cursor is released and
  the stream's orphan policy applies.
- A refused request ends its stream with an ERROR (`airlane.transports.rsocket.errors`); the
  connection stays open. A protocol violation closes it with an ERROR on stream 0.
- **Lease**: when SETUP asks for leases, the session grants ``lease_requests`` requests for
  ``lease_ttl_ms`` at once and renews the lease at half its lifetime.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Coroutine
from typing import Any, Protocol

from airlane.core import TERMINAL_KINDS, Event, Kind
from airlane.core.errors import AirlaneError, ErrorCode
from airlane.gateway import Gateway, PeerIdentity, Principal, RequestFacts, Subscription
from airlane.runtime.admission import Admission
from airlane.runtime.drains import drain_queue
from airlane.runtime.eager import start_eagerly
from airlane.runtime.timers import DeadlineTimer
from airlane.transports.rsocket.channel import AgentChannel
from airlane.transports.rsocket.codec import JSON, DataCodec, codec_for
from airlane.transports.rsocket.config import RSocketServerConfig
from airlane.transports.rsocket.errors import error_message
from airlane.transports.rsocket.resumption import DetachedSessions
from airlane.transports.rsocket.routes import (
    CHANNEL_ROUTES,
    FIRE_AND_FORGET_ROUTES,
    RESPONSE_ROUTES,
    STREAM_ROUTES,
    Handler,
    field,
    resume_position,
)
from airlane.wire.rsocket import (
    Credentials,
    RSocketProtocolError,
    decode_authentication,
    decode_composite,
    decode_routing,
)
from airlane.wire.rsocket import ErrorCode as RSocketCode
from airlane.wire.rsocket.connection import (
    Cancelled,
    ConnectionClosed,
    Interaction,
    PayloadReceived,
    RequestN,
    RequestReceived,
    ResumeRequested,
    RSocketEvent,
    RSocketServerConnection,
    SetupReceived,
    StreamError,
)
from airlane.wire.rsocket.metadata import AUTHENTICATION, COMPOSITE, ROUTING

__all__ = ["Link", "RSocketSession"]

log = logging.getLogger("airlane.rsocket")

_RSOCKET = RequestFacts("rsocket")


def _rsocket_facts() -> RequestFacts:
    """What a policy rule can match of an RSocket request: the wire."""
    return _RSOCKET


class Link(Protocol):
    """Where a session's frames go: a TCP transport or a WebSocket."""

    def write(self, data: bytes) -> None:
        """Send ``data`` (bytes of the stream, or one frame; buffered, never blocks)."""
        ...

    def close(self) -> None:
        """Close after what was written."""
        ...

    def adopt(self, session: RSocketSession) -> None:
        """From now on, hand what arrives to ``session`` (a resumed one) instead."""
        ...


class _Pump:
    """One request-stream's cursor, drained by the session."""

    __slots__ = ("done", "due", "raw", "stream_id", "subscription")

    def __init__(self, stream_id: int, subscription: Subscription, raw: bool) -> None:
        self.stream_id = stream_id
        self.subscription = subscription
        self.raw = raw
        self.due = False
        """Queued for the drain at the end of this loop turn."""
        self.done = asyncio.Event()
        """Set once the stream is over (the task serving it then returns)."""


class RSocketSession:
    """One RSocket connection serving the gateway. See the module docstring."""

    def __init__(
        self,
        gateway: Gateway,
        config: RSocketServerConfig,
        link: Link,
        *,
        framed: bool,
        principal: Principal | None = None,
        peer: PeerIdentity | None = None,
        origin: str | None = None,
        detached: DetachedSessions | None = None,
    ) -> None:
        self.gateway = gateway
        self.config = config
        self._link: Link | None = link
        self._detached = detached
        self._framed = framed
        self._principal = principal
        self._peer = peer
        self._origin = origin
        self.connection = RSocketServerConnection(
            framed=framed,
            max_frame=config.max_frame,
            max_message=config.max_message,
            max_streams=config.max_streams,
            max_retained=config.resume_buffer_bytes,
        )
        """The protocol state machine."""
        self.codec: DataCodec = JSON
        """The data encoding SETUP chose."""
        self._composite = True
        loop = asyncio.get_running_loop()
        self._work: dict[int, asyncio.Task[None]] = {}  # request tasks by stream id
        self._wakes: dict[int, asyncio.Event] = {}  # request-streams waiting for credit
        self._pumps: dict[int, _Pump] = {}  # request-streams the hub calls back for
        self._due: list[_Pump] = []  # pumps to drain at the end of this loop turn
        self._drains = drain_queue(loop)
        self._channels: dict[int, AgentChannel] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._timer = DeadlineTimer(self._on_timer)
        self._setup_timer: asyncio.TimerHandle | None = loop.call_later(
            config.setup_timeout_s, self._setup_timed_out
        )
        self._lease_timer: asyncio.TimerHandle | None = None
        self._writable = asyncio.Event()
        self._writable.set()
        self._closed = False

    @property
    def closed(self) -> bool:
        """True once the connection ended (the link was told to close)."""
        return self._closed

    @property
    def connected(self) -> bool:
        """True while a connection carries this session (False once it dropped and the
        session waits for a RESUME)."""
        return self._link is not None

    @property
    def requests(self) -> int:
        """Requests being served now."""
        return len(self._work)

    # -- what the transport calls -----------------------------------------------------------

    def data_received(self, data: bytes) -> None:
        """Bytes of a byte stream (TCP)."""
        self._handle(self.connection.receive_data(data, time.monotonic()))
        self.flush()

    def frame_received(self, data: bytes) -> None:
        """One whole frame (a WebSocket message)."""
        self._handle(self.connection.receive_frame(data, time.monotonic()))
        self.flush()

    def pause_writing(self) -> None:
        """The link's buffer is full: senders wait."""
        self._writable.clear()

    def resume_writing(self) -> None:
        """The link drained: senders go on."""
        self._writable.set()
        for pump in self._pumps.values():
            self._ready(pump)

    def close(self, code: RSocketCode = RSocketCode.CONNECTION_CLOSE, message: str = "") -> None:
        """End the connection with an ERROR on stream 0."""
        self.connection.close(code, message)
        self.flush()

    async def aclose(self) -> None:
        """Stop every request (after the link is gone); their cursors are released."""
        self._closed = True
        token = self.connection.resume_token
        if token is not None and self._detached is not None:
            self._detached.forget(self, token)
        self._timer.close()
        for handle in (self._setup_timer, self._lease_timer):
            if handle is not None:
                handle.cancel()
        tasks = [*self._work.values(), *self._tasks]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._work.clear()

    def flush(self) -> None:
        """Write what the connection has ready; close the link once it has ended."""
        connection = self.connection
        out = connection.data_to_send()
        if self._link is None:  # detached: what resumption needs is kept by the connection
            return
        if out:
            if self._framed:
                self._link.write(b"".join(out))
            else:
                for frame in out:
                    self._link.write(frame)
        if connection.closed is not None:
            if not self._closed:
                self._closed = True
                ended = connection.closed
                if not ended.by_peer and ended.code != RSocketCode.CONNECTION_CLOSE:
                    log.info("RSocket connection closed: %s", ended.message)
                self._link.close()
                self._wake_all()
            return
        self._timer.arm(connection.get_timer())

    def _on_timer(self) -> None:
        self._handle(self.connection.handle_timer(time.monotonic()))
        self.flush()

    def _setup_timed_out(self) -> None:
        self._setup_timer = None
        self.close(RSocketCode.INVALID_SETUP, "no SETUP in time")

    def _wake_all(self) -> None:
        for wake in self._wakes.values():
            wake.set()
        for pump in self._pumps.values():
            pump.done.set()
        for channel in self._channels.values():
            channel.wake()

    # -- events -----------------------------------------------------------------------------

    def _handle(self, events: list[RSocketEvent]) -> None:
        for event in events:
            if self.connection.closed is not None:
                # Closed by an event of this batch (a refused SETUP): what the same read
                # carried after it is not served, whoever it would run as.
                self._wake_all()
                return
            if isinstance(event, RequestN):
                self._credit_arrived(event.stream_id)
            elif isinstance(event, RequestReceived):
                self._request(event)
            elif isinstance(event, PayloadReceived):
                channel = self._channels.get(event.stream_id)
                if channel is not None:
                    channel.receive(event.data if event.next else None, complete=event.complete)
            elif isinstance(event, Cancelled | StreamError):
                self._stop(event.stream_id)
            elif isinstance(event, SetupReceived):
                self._setup(event)
            elif isinstance(event, ResumeRequested):
                self._resume(event)
                return
            elif isinstance(event, ConnectionClosed):
                self._wake_all()

    # -- resumption -------------------------------------------------------------------------

    def attached_to(self, link: Link) -> bool:
        """Whether ``link`` carries this session (a RESUME may have moved it to another)."""
        return self._link is link

    def detach(self) -> bool:
        """The connection dropped: keep this session for a RESUME if it is resumable (True),
        else leave it to be closed (False). Its requests pause where they are."""
        token, connection = self.connection.resume_token, self.connection
        if (
            token is None
            or self._detached is None
            or connection.closed is not None
            or connection.resume_lost
            or self._closed
            or not self._detached.keep(self, token)
        ):
            return False
        self._link = None
        self._writable.clear()
        self._timer.cancel()
        return True

    def attach(self, link: Link, request: ResumeRequested, *, framed: bool) -> bool:
        """Continue on a new connection whose first frame was ``request``: False if the
        positions do not allow it."""
        if not self.connection.resume(request, time.monotonic(), framed=framed):
            return False
        old, self._link, self._framed = self._link, link, framed
        if old is not None:  # taken over before its drop was seen: end it
            old.close()
        self.flush()  # RESUME_OK and what the client had not received
        self.resume_writing()
        for wake in self._wakes.values():
            wake.set()
        for channel in self._channels.values():
            channel.wake()
        return True

    def _resume(self, request: ResumeRequested) -> None:
        """This connection's first frame was RESUME: hand it to the session it names."""
        if self._setup_timer is not None:
            self._setup_timer.cancel()
            self._setup_timer = None
        store, link = self._detached, self._link
        kept = None if store is None else store.take(request.token)
        if kept is not None and store is not None and link is not None:
            if kept.attach(link, request, framed=self._framed):
                self._closed = True  # this session never set up: the link is the other's now
                self._link = None
                link.adopt(kept)
                return
            if not kept.connected:
                store.discard(kept)  # dropped, and it cannot resume: nothing will
            # (A session still on its own connection goes on there: a RESUME that could not
            # take it over is refused, and changes nothing for it.)
        self.connection.close(
            RSocketCode.REJECTED_RESUME,
            "no session to resume here (another node's, expired, or past what it kept): set "
            "up a new connection and subscribe again from the last event you received",
        )

    def _credit_arrived(self, stream_id: int) -> None:
        pump = self._pumps.get(stream_id)
        if pump is not None:
            self._ready(pump)
        wake = self._wakes.get(stream_id)
        if wake is not None:
            wake.set()
        channel = self._channels.get(stream_id)
        if channel is not None:
            channel.wake()

    def _stop(self, stream_id: int) -> None:
        task = self._work.pop(stream_id, None)
        if task is not None:
            task.cancel()

    def _setup(self, event: SetupReceived) -> None:
        if self._setup_timer is not None:
            self._setup_timer.cancel()
            self._setup_timer = None
        codec = codec_for(event.data_mime)
        if codec is None:
            self.connection.close(
                RSocketCode.UNSUPPORTED_SETUP,
                f"data MIME type {event.data_mime[:80]!r} is not supported: use "
                "application/json or application/x-msgpack",
            )
            return
        metadata_mime = event.metadata_mime.split(";", 1)[0].strip().lower()
        if metadata_mime not in (COMPOSITE, ROUTING):
            self.connection.close(
                RSocketCode.UNSUPPORTED_SETUP,
                f"metadata MIME type {event.metadata_mime[:80]!r} is not supported: use "
                f"{COMPOSITE} (or {ROUTING})",
            )
            return
        self.codec, self._composite = codec, metadata_mime == COMPOSITE
        token = event.resume_token
        if token is not None and self._detached is not None:
            if self._detached.holds(token):
                self.connection.close(
                    RSocketCode.REJECTED_SETUP, "that resume token names a session kept here"
                )
                return
            self._detached.register(self, token)
        try:
            credentials = self._metadata(event.metadata)[1]
            if credentials is not None:
                self._principal = self._authenticate(credentials)
        except RSocketProtocolError as exc:
            self.connection.close(RSocketCode.INVALID_SETUP, str(exc))
            return
        except AirlaneError as exc:
            self.connection.close(RSocketCode.REJECTED_SETUP, error_message(exc)[1])
            return
        if event.lease:
            self._grant_lease()

    def _grant_lease(self) -> None:
        if self.connection.closed is not None:
            return
        config = self.config
        self.connection.grant_lease(config.lease_ttl_ms, config.lease_requests, time.monotonic())
        self.flush()
        self._lease_timer = asyncio.get_running_loop().call_later(
            config.lease_ttl_ms / 2000, self._grant_lease
        )

    # -- who is asking ----------------------------------------------------------------------

    def _metadata(self, metadata: bytes | None) -> tuple[str | None, Credentials | None]:
        """The route and credentials a request's (or SETUP's) metadata carries."""
        if not metadata:
            return None, None
        entries = decode_composite(metadata) if self._composite else [(ROUTING, metadata)]
        route = credentials = None
        for mime, value in entries:
            if mime == ROUTING:
                tags = decode_routing(value)
                route = tags[0] if tags else None
            elif mime == AUTHENTICATION:
                credentials = decode_authentication(value)
        return route, credentials

    def _authenticate(self, credentials: Credentials) -> Principal:
        """The principal behind bearer or simple credentials (simple: the password is the API
        key; the username only names it for the caller)."""
        if credentials.kind == "bearer":
            token = credentials.token
        elif credentials.kind == "simple":
            token = credentials.password
        else:
            raise AirlaneError(
                f"authentication type {credentials.kind[:40]!r} is not supported: use bearer "
                "or simple",
                code=ErrorCode.UNAUTHENTICATED,
            )
        return self.gateway.authenticate(
            token or None, self._peer, origin=self._origin, request=_rsocket_facts
        )

    def _who(self, credentials: Credentials | None) -> Principal:
        if credentials is not None:
            return self._authenticate(credentials)
        if self._principal is None:
            self._principal = self.gateway.authenticate(
                None, self._peer, origin=self._origin, request=_rsocket_facts
            )
        return self._principal

    # -- requests ---------------------------------------------------------------------------

    def _request(self, event: RequestReceived) -> None:
        stream_id, interaction = event.stream_id, event.interaction
        forget = interaction is Interaction.FIRE_AND_FORGET
        try:
            route, credentials = self._metadata(event.metadata)
        except RSocketProtocolError as exc:
            self._refuse_or_log(stream_id, forget, RSocketCode.INVALID, str(exc))
            return
        if route is None:
            self._refuse_or_log(
                stream_id, forget, RSocketCode.INVALID,
                f"name the route in routing metadata ({ROUTING})",
            )  # fmt: skip
            return
        work: Coroutine[Any, Any, None] | None = None
        if interaction is Interaction.RESPONSE and route in RESPONSE_ROUTES:
            handler = RESPONSE_ROUTES[route]
            work = self._respond(stream_id, route, handler, credentials, event.data)
        elif forget and route in FIRE_AND_FORGET_ROUTES:
            if len(self._tasks) >= self.config.max_streams:
                log.warning("RSocket fire-and-forget %s dropped: too many in progress", route)
                return
            work = self._forget(route, FIRE_AND_FORGET_ROUTES[route], credentials, event.data)
        elif interaction is Interaction.STREAM and route in STREAM_ROUTES:
            work = self._stream(stream_id, route, credentials, event.data)
        elif interaction is Interaction.CHANNEL and route in CHANNEL_ROUTES:
            work = self._channel(stream_id, credentials, event)
        if work is None:
            self._refuse_or_log(
                stream_id, forget, RSocketCode.INVALID,
                f"unknown_op: there is no {interaction.value} route {route[:80]!r}",
            )  # fmt: skip
            return
        task = start_eagerly(self._guarded(stream_id, work), name=f"rsocket {route}")
        if task is None:
            return
        if forget:
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        else:
            self._work[stream_id] = task
            task.add_done_callback(lambda _: self._forget_work(stream_id, task))

    def _forget_work(self, stream_id: int, task: asyncio.Task[None]) -> None:
        if self._work.get(stream_id) is task:
            del self._work[stream_id]

    async def _guarded(self, stream_id: int, work: Coroutine[Any, Any, None]) -> None:
        """Run a request; its refusal (or a bug) ends its stream with an ERROR."""
        try:
            await work
        except AirlaneError as exc:
            code, message = error_message(exc)
            self._refuse(stream_id, code, message)
        except Exception:
            log.exception("RSocket request on stream %d failed", stream_id)
            self._refuse(stream_id, RSocketCode.APPLICATION_ERROR, "the request failed")
        finally:
            self._wakes.pop(stream_id, None)
            self._channels.pop(stream_id, None)

    def _refuse(self, stream_id: int, code: RSocketCode, message: str) -> None:
        connection = self.connection
        if connection.closed is None and connection.is_open(stream_id):
            connection.send_error(stream_id, code, message)
            self.flush()

    def _refuse_or_log(self, stream_id: int, forget: bool, code: RSocketCode, why: str) -> None:
        if forget:  # fire-and-forget has no stream to answer on
            log.info("RSocket fire-and-forget refused: %s", why)
        else:
            self._refuse(stream_id, code, why)

    async def _respond(
        self,
        stream_id: int,
        route: str,
        handler: Handler,
        credentials: Credentials | None,
        data: bytes,
    ) -> None:
        body = self.codec.request(route, data)
        answer = await handler(self.gateway, self._who(credentials), body)
        if self.connection.is_open(stream_id) and self.connection.closed is None:
            payload = self.codec.answer(route, answer)
            self.connection.send_payload(stream_id, payload, complete=True)
            self.flush()

    async def _forget(
        self, route: str, handler: Handler, credentials: Credentials | None, data: bytes
    ) -> None:
        try:
            await handler(self.gateway, self._who(credentials), self.codec.request(route, data))
        except AirlaneError as exc:
            log.info("RSocket fire-and-forget %s refused: %s", route, error_message(exc)[1])

    async def _stream(
        self, stream_id: int, route: str, credentials: Credentials | None, data: bytes
    ) -> None:
        principal, gateway = self._who(credentials), self.gateway
        body = self.codec.request(route, data)
        self._wakes[stream_id] = asyncio.Event()
        first = None
        if route == "loadtest.stream":
            await Admission.for_loop().admit()
            spec = Gateway.loadtest_spec(
                body.get("chunks", 200), body.get("mode", "burst"), body.get("interval_ms", 20.0)
            )
            info = await gateway.start_loadtest(principal, spec)
            try:
                async with await gateway.subscribe(principal, info.stream_id) as subscription:
                    await self._pump(stream_id, subscription, raw=True)
            finally:  # nobody else wants a benchmark stream's chunks: free them now
                with contextlib.suppress(AirlaneError):
                    await gateway.delete(principal, info.stream_id)
            return
        if route == "chat.completions":
            await Admission.for_loop().admit()  # set-up waits while paced work is due
            info = (await gateway.start_chat(principal, body)).info
            subscription = await gateway.subscribe(principal, info.stream_id)
            first = self.codec.started(info.stream_id, info.epoch)
        else:
            subscription = await gateway.subscribe(
                principal, field(body, "stream_id"), resume=resume_position(body)
            )
        async with subscription:
            if first is not None:
                if not await self._credit(stream_id):
                    return
                self.connection.send_payload(stream_id, first)
            await self._pump(stream_id, subscription)

    async def _credit(self, stream_id: int) -> int:
        """Payloads ``stream_id`` may be sent now, once above 0 and the link takes writes; 0
        when the stream or the connection is over."""
        connection, wake = self.connection, self._wakes[stream_id]
        while connection.closed is None and connection.is_open(stream_id):
            credit = connection.credit(stream_id)
            if credit and self._writable.is_set():
                return credit
            wake.clear()
            if not self._writable.is_set():
                await self._writable.wait()
            else:
                await wake.wait()
        return 0

    async def _pump(self, stream_id: int, subscription: Subscription, *, raw: bool = False) -> None:
        """Send the cursor's events as the client's credit allows; complete at the end.
        ``raw``: send only message events, each its payload's bytes as they came (the
        benchmark stream's chunks).

        Where the hub can call back (`Subscription.listen`), the events go out from the
        drain at the end of the loop turn that appended them, for every stream of the turn in
        one write, and this task only waits for the end; otherwise it waits for each batch."""
        pump = _Pump(stream_id, subscription, raw)
        if subscription.listen(lambda: self._ready(pump)):
            self._pumps[stream_id] = pump
            try:
                self._drain_one(pump)  # what is there already
                self.flush()
                await pump.done.wait()
            finally:
                subscription.listen(None)
                self._pumps.pop(stream_id, None)
            return
        connection = self.connection
        while not subscription.over and (credit := await self._credit(stream_id)):
            batch: list[Event] = await subscription.next_batch(min(credit, self.config.batch_limit))
            if not batch or not connection.is_open(stream_id):
                break
            self._send_events(pump, batch)
            self.flush()
        self._complete(stream_id)

    def _send_events(self, pump: _Pump, batch: list[Event]) -> None:
        connection, stream_id = self.connection, pump.stream_id
        if pump.raw:
            for event in batch:
                if event.kind is Kind.MESSAGE and event.raw is not None:
                    connection.send_payload(stream_id, event.raw)
        else:
            event_bytes = self.codec.event
            for event in batch:
                connection.send_payload(
                    stream_id, event_bytes(event), complete=event.kind in TERMINAL_KINDS
                )
        pump.subscription.mark_written(batch, time.monotonic_ns())

    def _complete(self, stream_id: int) -> None:
        """The stream went away without its end (deleted, or the hub closing): complete."""
        connection = self.connection
        if connection.closed is None and connection.is_open(stream_id):
            connection.send_complete(stream_id)
            self.flush()

    def _ready(self, pump: _Pump) -> None:
        """The hub's call-back (or credit, or a drained link): drain ``pump`` at the end of
        this loop turn, with every other stream due in it."""
        if not pump.due:
            pump.due = True
            self._due.append(pump)
            if len(self._due) == 1:
                self._drains.add(self._drain)

    def _drain(self) -> None:
        due, self._due = self._due, []
        try:
            for pump in due:
                pump.due = False
                self._drain_one(pump)
        except Exception:  # a call-back must not raise into the hub; end the connection
            log.exception("RSocket pump failed")
            self.connection.close(RSocketCode.CONNECTION_ERROR, "the gateway failed")
        self.flush()

    def _drain_one(self, pump: _Pump) -> None:
        """Send what ``pump``'s cursor has, as far as credit and the link allow; finish it
        once its stream is over (for this reader or on the wire)."""
        connection, stream_id, subscription = self.connection, pump.stream_id, pump.subscription
        limit = self.config.batch_limit
        while self._writable.is_set():
            if connection.closed is not None or not connection.is_open(stream_id):
                pump.done.set()
                return
            if subscription.over:
                self._complete(stream_id)
                pump.done.set()
                return
            credit = connection.credit(stream_id)
            batch = subscription.poll(min(credit, limit)) if credit else None
            if not batch:
                return
            self._send_events(pump, batch)

    async def _channel(
        self, stream_id: int, credentials: Credentials | None, event: RequestReceived
    ) -> None:
        channel = AgentChannel(
            self.gateway,
            self._who(credentials),
            self.connection,
            stream_id,
            self.codec,
            self.config,
            flush=self.flush,
            writable=self._writable,
        )
        self._channels[stream_id] = channel
        channel.receive(event.data or None, complete=event.complete)
        await channel.run()
