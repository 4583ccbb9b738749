"""`RSocketServerConnection`: the server side of an RSocket 1.0 connection, sans-I/O.

Bytes in (`receive_data`: a TCP byte stream; `receive_frame`: one WebSocket message), events
out; responses in (`send_payload`, `send_complete`, `send_error`), bytes out
(`data_to_send`); time only as the ``now`` its caller passes (`get_timer`, `handle_timer`).

What it enforces, so the layer above only serves requests:

- the first frame is SETUP (or RESUME, reported for the layer above to accept or refuse), with
  version 1.x and a keep-alive interval and lifetime above zero; anything else before it is
  INVALID_SETUP and the connection closes;
- request streams are the client's (odd ids), new ones only above the last (a reused id is a
  protocol error);
- **credit**: a request-stream or request-channel stream may be sent only as many payloads as
  the client asked for (its initial request n plus every REQUEST_N, saturating at 2^31 - 1,
  which the spec treats as unbounded); `send_payload` refuses past it (`NoCredit`), so the layer
  above waits for `RequestN` instead of queueing;
- **fragments** (the F flag) are reassembled, bounded by ``max_message`` bytes a message;
  payloads larger than ``max_frame`` go out fragmented;
- **keep-alive**: a KEEPALIVE with the respond flag is answered at once, and a client silent for
  longer than its SETUP's max lifetime is gone (`ConnectionClosed`, CONNECTION_ERROR out);
- **lease**: when SETUP asked for it, requests are honoured only within the lease the server
  granted (`grant_lease`); others get ERROR REJECTED.

- **resumption**: after a SETUP with a resume token, the frames resumption counts (requests,
  REQUEST_N, CANCEL, PAYLOAD, a stream's ERROR) are numbered by byte position both ways, and
  those sent are kept, up to ``max_retained`` bytes, until a KEEPALIVE says the client has
  them; `resume` continues the session on a new connection from the client's position
  (RESUME_OK, then what it had not received). Past the bound the session cannot resume.

Malformed input closes the connection with ERROR on stream 0 and the code it calls for; it
never raises out of `receive_data`. A client that never sends SETUP is the transport's to time
out (there is no clock here before the first frame).
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass

from airlane.wire.rsocket.frames import (
    FLAG_COMPLETE,
    FLAG_FOLLOWS,
    FLAG_LEASE,
    FLAG_NEXT,
    FLAG_RESPOND,
    MAX_FRAME,
    ErrorCode,
    Frame,
    FrameReader,
    FrameType,
    RSocketProtocolError,
    decode_frame,
    encode_frame,
    payload_frame,
    resumable,
    with_length,
)

__all__ = [
    "Cancelled",
    "ConnectionClosed",
    "KeepAliveReceived",
    "MetadataPushed",
    "NoCredit",
    "PayloadReceived",
    "RSocketEvent",
    "RSocketServerConnection",
    "RequestN",
    "RequestReceived",
    "ResumeRequested",
    "SetupReceived",
    "StreamError",
]

UNBOUNDED = (1 << 31) - 1
"""A request n this large means "as many as you have" (RSocket 1.0)."""


class Interaction(enum.Enum):
    """The interaction model a request opened."""

    RESPONSE = "request-response"
    FIRE_AND_FORGET = "fire-and-forget"
    STREAM = "request-stream"
    CHANNEL = "request-channel"


_MODELS = {
    FrameType.REQUEST_RESPONSE: Interaction.RESPONSE,
    FrameType.REQUEST_FNF: Interaction.FIRE_AND_FORGET,
    FrameType.REQUEST_STREAM: Interaction.STREAM,
    FrameType.REQUEST_CHANNEL: Interaction.CHANNEL,
}


# -- events ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SetupReceived:
    """The client's SETUP: the connection is open."""

    keepalive_ms: int
    lifetime_ms: int
    metadata_mime: str
    data_mime: str
    metadata: bytes | None
    data: bytes
    resume_token: bytes | None
    lease: bool


@dataclass(frozen=True, slots=True)
class ResumeRequested:
    """The client asks to resume a session (instead of SETUP): the layer above answers with
    `RSocketServerConnection.resume` or `RSocketServerConnection.close`."""

    token: bytes
    last_received_server_position: int
    first_available_client_position: int


@dataclass(frozen=True, slots=True)
class RequestReceived:
    """A whole request (fragments joined) opened stream ``stream_id``."""

    stream_id: int
    interaction: Interaction
    metadata: bytes | None
    data: bytes
    initial_n: int
    """Request-stream and request-channel: payloads the client takes at first."""
    complete: bool
    """Request-channel: the client's side is complete already."""


@dataclass(frozen=True, slots=True)
class PayloadReceived:
    """A payload from the client on a request-channel stream."""

    stream_id: int
    metadata: bytes | None
    data: bytes
    next: bool
    complete: bool


@dataclass(frozen=True, slots=True)
class RequestN:
    """The client takes ``n`` more payloads on ``stream_id`` (its credit is now ``credit``)."""

    stream_id: int
    n: int
    credit: int


@dataclass(frozen=True, slots=True)
class Cancelled:
    """The client cancelled ``stream_id``."""

    stream_id: int


@dataclass(frozen=True, slots=True)
class StreamError:
    """The client ended ``stream_id`` with an ERROR."""

    stream_id: int
    code: int
    message: str


@dataclass(frozen=True, slots=True)
class MetadataPushed:
    """METADATA_PUSH."""

    metadata: bytes


@dataclass(frozen=True, slots=True)
class KeepAliveReceived:
    """A KEEPALIVE (answered already when it asked to be)."""

    position: int


@dataclass(frozen=True, slots=True)
class ConnectionClosed:
    """The connection is over: the client's ERROR on stream 0, a violation, or its lifetime
    passed without a frame. ``by_peer``: the client ended it."""

    code: int
    message: str
    by_peer: bool


RSocketEvent = (
    SetupReceived
    | ResumeRequested
    | RequestReceived
    | PayloadReceived
    | RequestN
    | Cancelled
    | StreamError
    | MetadataPushed
    | KeepAliveReceived
    | ConnectionClosed
)


class NoCredit(Exception):
    """`send_payload` past what the client asked for: wait for its `RequestN`."""


class _State(enum.Enum):
    AWAITING_SETUP = "awaiting setup"
    OPEN = "open"
    CLOSED = "closed"


@dataclass(slots=True)
class _Stream:
    interaction: Interaction
    credit: int = 0
    inbound_open: bool = False
    """Request-channel: the client may still send payloads."""
    inbound_credit: int = 0
    """Request-channel: payloads the client may still send (what `request_n` granted)."""


@dataclass(slots=True)
class _Partial:
    """A message arriving in fragments."""

    first: Frame
    metadata: bytearray
    data: bytearray


class RSocketServerConnection:
    """See the module docstring. ``framed``: the byte stream carries 24-bit length prefixes
    (TCP); without, each `receive_frame` call is one frame (WebSocket)."""

    def __init__(
        self,
        *,
        framed: bool = True,
        max_frame: int = MAX_FRAME,
        max_message: int = 16 << 20,
        max_streams: int = 10_000,
        max_retained: int = 4 << 20,
    ) -> None:
        self.framed = framed
        self.max_frame = max_frame
        self.max_message = max_message
        self.max_streams = max_streams
        self._reader = FrameReader(max_frame)
        self._state = _State.AWAITING_SETUP
        self._out: list[bytes] = []
        self._streams: dict[int, _Stream] = {}
        self._partials: dict[int, _Partial] = {}
        self._last_stream_id = 0
        self._lifetime_s = 0.0
        self._deadline: float | None = None
        self._lease = False
        self._lease_left = 0
        self._lease_until = 0.0
        self.closed: ConnectionClosed | None = None
        self.resume_token: bytes | None = None
        """The SETUP's resume token: this session may be resumed (until `resume_lost`)."""
        self.max_retained = max_retained
        self.sent_position = 0
        """Bytes of resumable frames sent (resumable sessions only)."""
        self.received_position = 0
        """Bytes of resumable frames received (resumable sessions only)."""
        self.resume_lost = False
        """More than ``max_retained`` bytes were unacknowledged at once: no resuming."""
        self._retained: deque[tuple[int, bytes]] = deque()  # (end position, frame)
        self._retained_bytes = 0

    # -- input -----------------------------------------------------------------------------

    def receive_data(self, data: bytes, now: float) -> list[RSocketEvent]:
        """Bytes from a byte stream (TCP, length-prefixed frames)."""
        if self._state is _State.CLOSED:
            return []
        try:
            frames = self._reader.feed(data)
        except RSocketProtocolError as exc:
            return self._fail(exc)
        events: list[RSocketEvent] = []
        for frame in frames:
            events += self._handle(frame, now)
            if self.closed is not None:  # the rest of the bytes are past the end
                break
        return events

    def receive_frame(self, data: bytes, now: float) -> list[RSocketEvent]:
        """One whole frame (a WebSocket message)."""
        if self._state is _State.CLOSED:
            return []
        if len(data) > self.max_frame:
            return self._fail(RSocketProtocolError(f"a frame of {len(data)} bytes is too long"))
        try:
            frame = decode_frame(data)
        except RSocketProtocolError as exc:
            return self._fail(exc)
        return self._handle(frame, now)

    def _handle(self, frame: Frame, now: float) -> list[RSocketEvent]:
        if self._lifetime_s:
            self._deadline = now + self._lifetime_s
        if self.resume_token is not None and resumable(frame.type, frame.stream_id):
            self.received_position += frame.size
        try:
            if self._state is _State.AWAITING_SETUP:
                return self._setup(frame, now)
            return self._open(frame, now)
        except RSocketProtocolError as exc:
            return self._fail(exc)

    def _setup(self, frame: Frame, now: float) -> list[RSocketEvent]:
        if frame.type is FrameType.RESUME:
            return [ResumeRequested(frame.resume_token or b"", frame.position,
                                    frame.first_position)]  # fmt: skip
        if frame.type is not FrameType.SETUP:
            raise RSocketProtocolError(
                f"the first frame must be SETUP, not {frame.type.name}", ErrorCode.INVALID_SETUP
            )
        if frame.version[0] != 1:
            raise RSocketProtocolError(
                f"version {frame.version[0]}.{frame.version[1]} is not 1.x",
                ErrorCode.UNSUPPORTED_SETUP,
            )
        if frame.keepalive_ms <= 0 or frame.lifetime_ms <= 0:
            raise RSocketProtocolError(
                "keep-alive interval and max lifetime must be above 0", ErrorCode.INVALID_SETUP
            )
        self._state = _State.OPEN
        self._lifetime_s = frame.lifetime_ms / 1000
        self._deadline = now + self._lifetime_s
        self._lease = frame.has(FLAG_LEASE)
        self.resume_token = frame.resume_token or None
        return [
            SetupReceived(
                frame.keepalive_ms, frame.lifetime_ms, frame.metadata_mime, frame.data_mime,
                frame.metadata, frame.data, frame.resume_token, self._lease,
            )
        ]  # fmt: skip

    def _open(self, frame: Frame, now: float) -> list[RSocketEvent]:
        kind = frame.type
        stream = self._streams.get(frame.stream_id)
        # A request's later fragments come as PAYLOAD frames, before the stream exists.
        continues = stream is None and frame.stream_id in self._partials
        if kind in _MODELS or (kind is FrameType.PAYLOAD and continues):
            return self._request(frame, now)
        if kind is FrameType.KEEPALIVE:
            self._release(frame.position)
            if frame.has(FLAG_RESPOND):
                # With what this side received: a resumable client stops keeping it.
                answer = Frame(FrameType.KEEPALIVE, position=self.received_position,
                               data=frame.data)  # fmt: skip
                self._emit(answer)
            return [KeepAliveReceived(frame.position)]
        if kind is FrameType.REQUEST_N:
            if stream is None or stream.interaction not in (
                Interaction.STREAM,
                Interaction.CHANNEL,
            ):
                return []  # a stream already ended: allowed, nothing to do
            stream.credit = min(UNBOUNDED, stream.credit + frame.request_n)
            return [RequestN(frame.stream_id, frame.request_n, stream.credit)]
        if kind is FrameType.CANCEL:
            self._end(frame.stream_id)
            return [Cancelled(frame.stream_id)] if stream is not None else []
        if kind is FrameType.PAYLOAD:
            return self._payload(frame, stream)
        if kind is FrameType.ERROR:
            message = frame.data.decode("utf-8", "replace")
            if frame.stream_id == 0:
                self._state = _State.CLOSED
                self.closed = ConnectionClosed(frame.error_code, message, by_peer=True)
                return [self.closed]
            self._end(frame.stream_id)
            return [StreamError(frame.stream_id, frame.error_code, message)]
        if kind is FrameType.METADATA_PUSH:
            return [MetadataPushed(frame.metadata or b"")]
        if kind in (FrameType.SETUP, FrameType.RESUME):
            raise RSocketProtocolError(f"{kind.name} after the connection was set up")
        return []  # LEASE from a client, RESUME_OK, EXT: nothing a server does with them

    def _request(self, frame: Frame, now: float) -> list[RSocketEvent]:
        stream_id = frame.stream_id
        partial = self._partials.get(stream_id)
        if partial is None:
            if stream_id % 2 == 0:
                raise RSocketProtocolError(f"stream {stream_id} is not a client's (odd) id")
            if stream_id <= self._last_stream_id:
                raise RSocketProtocolError(f"stream {stream_id} was used already")
            self._last_stream_id = stream_id
        whole = self._reassemble(frame, partial)
        if whole is None:
            return []
        interaction = _MODELS[whole.type]
        if self._lease and not self._use_lease(now):
            if interaction is not Interaction.FIRE_AND_FORGET:
                self.send_error(stream_id, ErrorCode.REJECTED, "no lease: wait for one")
            return []
        if len(self._streams) >= self.max_streams:
            if interaction is not Interaction.FIRE_AND_FORGET:
                self.send_error(stream_id, ErrorCode.REJECTED, "too many streams open")
            return []
        complete = whole.has(FLAG_COMPLETE)
        if interaction is not Interaction.FIRE_AND_FORGET:
            self._streams[stream_id] = _Stream(
                interaction,
                credit=whole.request_n if interaction in (Interaction.STREAM,
                                                          Interaction.CHANNEL) else 1,
                inbound_open=interaction is Interaction.CHANNEL and not complete,
            )  # fmt: skip
        return [
            RequestReceived(stream_id, interaction, whole.metadata, whole.data,
                            whole.request_n, complete)
        ]  # fmt: skip

    def _payload(self, frame: Frame, stream: _Stream | None) -> list[RSocketEvent]:
        if stream is None or not stream.inbound_open:
            return []  # to a stream that is over (a race with cancel): dropped
        whole = self._reassemble(frame, self._partials.get(frame.stream_id))
        if whole is None:
            return []
        complete = whole.has(FLAG_COMPLETE)
        if whole.has(FLAG_NEXT):
            if stream.inbound_credit <= 0:
                self.send_error(frame.stream_id, ErrorCode.INVALID, "a payload beyond REQUEST_N")
                return [StreamError(frame.stream_id, ErrorCode.INVALID, "payload past credit")]
            stream.inbound_credit -= 1
        if complete:
            stream.inbound_open = False
        return [
            PayloadReceived(frame.stream_id, whole.metadata, whole.data, whole.has(FLAG_NEXT),
                            complete)
        ]  # fmt: skip

    def _reassemble(self, frame: Frame, partial: _Partial | None) -> Frame | None:
        """The whole message once its last fragment is in; None while more follow."""
        if partial is None and not frame.has(FLAG_FOLLOWS):
            return frame
        if partial is None:
            partial = self._partials[frame.stream_id] = _Partial(frame, bytearray(), bytearray())
        partial.metadata += frame.metadata or b""
        partial.data += frame.data
        if len(partial.metadata) + len(partial.data) > self.max_message:
            raise RSocketProtocolError(
                f"a message over {self.max_message} bytes on stream {frame.stream_id}"
            )
        if frame.has(FLAG_FOLLOWS):
            return None
        del self._partials[frame.stream_id]
        first = partial.first
        flags = (first.flags & ~FLAG_FOLLOWS) | (frame.flags & FLAG_COMPLETE)
        return Frame(
            first.type, first.stream_id, flags,
            metadata=bytes(partial.metadata) if first.metadata is not None else None,
            data=bytes(partial.data), request_n=first.request_n,
        )  # fmt: skip

    # -- lease -------------------------------------------------------------------------------

    def grant_lease(self, ttl_ms: int, requests: int, now: float) -> None:
        """Grant the client ``requests`` requests for ``ttl_ms`` (when it asked for leases)."""
        self._lease_left, self._lease_until = requests, now + ttl_ms / 1000
        self._emit(Frame(FrameType.LEASE, keepalive_ms=ttl_ms, lease_requests=requests))

    def _use_lease(self, now: float) -> bool:
        if self._lease_left <= 0 or now > self._lease_until:
            return False
        self._lease_left -= 1
        return True

    # -- output ------------------------------------------------------------------------------

    def request_n(self, stream_id: int, n: int) -> None:
        """Let the client send ``n`` more payloads on request-channel ``stream_id`` (a
        channel's client waits for this before its second payload; more than granted ends the
        stream with ERROR INVALID)."""
        stream = self._streams.get(stream_id)
        if stream is None or not stream.inbound_open or n <= 0:
            return
        stream.inbound_credit = min(UNBOUNDED, stream.inbound_credit + n)
        self._emit(Frame(FrameType.REQUEST_N, stream_id, request_n=min(n, UNBOUNDED)))

    def is_open(self, stream_id: int) -> bool:
        """True while ``stream_id`` may still be answered (not completed, cancelled or
        ended by an ERROR either way)."""
        return stream_id in self._streams

    def credit(self, stream_id: int) -> int:
        """Payloads ``stream_id`` may be sent now (0 for a stream that is over)."""
        stream = self._streams.get(stream_id)
        return 0 if stream is None else stream.credit

    def send_payload(
        self,
        stream_id: int,
        data: bytes,
        *,
        metadata: bytes | None = None,
        complete: bool = False,
    ) -> None:
        """A payload on ``stream_id`` (with ``complete``: the last); `NoCredit` past the
        client's request n. A request-response stream ends with its one payload."""
        stream = self._streams.get(stream_id)
        if stream is None:
            raise NoCredit(f"stream {stream_id} is over")
        if stream.credit <= 0:
            raise NoCredit(f"stream {stream_id} has no credit: wait for REQUEST_N")
        if stream.credit < UNBOUNDED:
            stream.credit -= 1
        if stream.interaction is Interaction.RESPONSE:
            complete = True
        flags = FLAG_NEXT | (FLAG_COMPLETE if complete else 0)
        if metadata is None and len(data) <= self.max_frame - 64:
            if self.resume_token is None:  # nothing to count or keep: framed in one go
                self._out.append(payload_frame(stream_id, flags, data, framed=self.framed))
            else:
                self._push(payload_frame(stream_id, flags, data, framed=False), True)
        else:
            self._emit_fragmented(
                Frame(FrameType.PAYLOAD, stream_id, flags, metadata=metadata, data=data)
            )
        if complete:
            self._end(stream_id)

    def send_complete(self, stream_id: int) -> None:
        """End ``stream_id`` without a payload (needs no credit)."""
        if self._streams.pop(stream_id, None) is not None:
            self._emit(Frame(FrameType.PAYLOAD, stream_id, FLAG_COMPLETE))

    def send_error(self, stream_id: int, code: ErrorCode, message: str) -> None:
        """End ``stream_id`` with an ERROR (APPLICATION_ERROR, REJECTED, CANCELED, INVALID)."""
        self._streams.pop(stream_id, None)
        self._partials.pop(stream_id, None)
        self._emit(Frame(FrameType.ERROR, stream_id, error_code=code, data=message.encode()[:4096]))

    def resume(self, request: ResumeRequested, now: float, *, framed: bool) -> bool:
        """Continue this session on a new connection whose first frame was ``request``
        (``framed``: a byte stream): RESUME_OK with what was received, then every frame sent
        after the client's position. False (nothing changes) if the session cannot: it was not
        resumable, kept too little, or the client lacks what it would have to send again."""
        retained = self._retained
        oldest = retained[0][0] - len(retained[0][1]) if retained else self.sent_position
        if (
            self.resume_token is None
            or self.resume_lost
            or self._state is _State.CLOSED
            or not oldest <= request.last_received_server_position <= self.sent_position
            or request.first_available_client_position > self.received_position
        ):
            return False
        self._release(request.last_received_server_position)
        self.framed = framed
        self._reader = FrameReader(self.max_frame)
        # A request cut between its fragments keeps what came: those fragments count in the
        # position RESUME_OK reports, so the client sends only the rest. (A frame cut in the
        # middle was never counted, and comes again whole.)
        self._out.clear()  # what the old connection could not take is retained, or moot
        self._deadline = now + self._lifetime_s
        self._emit(Frame(FrameType.RESUME_OK, position=self.received_position))
        for _, encoded in retained:
            self._out.append(with_length(encoded) if framed else encoded)
        return True

    def _release(self, position: int) -> None:
        """The client has every frame up to ``position``: stop keeping them."""
        retained = self._retained
        while retained and retained[0][0] <= position:
            self._retained_bytes -= len(retained.popleft()[1])

    def close(self, code: ErrorCode = ErrorCode.CONNECTION_CLOSE, message: str = "") -> None:
        """Close: ERROR on stream 0, then nothing more."""
        if self._state is _State.CLOSED:
            return
        self._emit(Frame(FrameType.ERROR, 0, error_code=code, data=message.encode()[:4096]))
        self._state = _State.CLOSED
        self.closed = ConnectionClosed(code, message, by_peer=False)

    def data_to_send(self) -> list[bytes]:
        """What to write: byte strings for a stream, or one frame each (WebSocket)."""
        out, self._out = self._out, []
        return out

    def _emit(self, frame: Frame) -> None:
        self._push(encode_frame(frame), resumable(frame.type, frame.stream_id))

    def _push(self, encoded: bytes, counts: bool) -> None:
        """Queue one encoded frame; in a resumable session, count and keep what resumption
        counts."""
        self._out.append(with_length(encoded) if self.framed else encoded)
        if counts and self.resume_token is not None:
            self.sent_position += len(encoded)
            if self.resume_lost:
                return
            self._retained.append((self.sent_position, encoded))
            self._retained_bytes += len(encoded)
            if self._retained_bytes > self.max_retained:  # the client is too far behind
                self.resume_lost = True
                self._retained.clear()
                self._retained_bytes = 0

    def _emit_fragmented(self, frame: Frame) -> None:
        budget = self.max_frame - 64  # header, lengths and flags
        metadata, data = frame.metadata or b"", frame.data
        if len(metadata) + len(data) <= budget:
            self._emit(frame)
            return
        first = True
        while first or metadata or data:
            room = budget
            piece_meta, metadata = metadata[:room], metadata[room:]
            room -= len(piece_meta)
            piece_data, data = data[:room], data[room:]
            last = not metadata and not data
            flags = frame.flags if last else (frame.flags & ~FLAG_COMPLETE) | FLAG_FOLLOWS
            with_meta = frame.metadata is not None and (first or bool(piece_meta))
            piece = Frame(frame.type, frame.stream_id, flags, data=piece_data,
                          metadata=piece_meta if with_meta else None)  # fmt: skip
            self._emit(piece)
            first = False

    def _end(self, stream_id: int) -> None:
        self._streams.pop(stream_id, None)
        self._partials.pop(stream_id, None)

    def _fail(self, exc: RSocketProtocolError) -> list[RSocketEvent]:
        self.close(exc.code, str(exc))
        assert self.closed is not None
        return [self.closed]

    # -- time --------------------------------------------------------------------------------

    def get_timer(self) -> float | None:
        """When `handle_timer` must run next (the client's lifetime deadline), or None."""
        return None if self._state is _State.CLOSED else self._deadline

    def handle_timer(self, now: float) -> list[RSocketEvent]:
        """The client sent nothing for its max lifetime: it is gone."""
        if self._state is _State.CLOSED or self._deadline is None or now < self._deadline:
            return []
        self.close(ErrorCode.CONNECTION_ERROR, "no keep-alive within the max lifetime")
        assert self.closed is not None
        return [self.closed]
