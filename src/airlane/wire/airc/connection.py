"""`AircConnection`: the AIRC v1.2 protocol as a sans-I/O state machine.

Bytes in (`AircConnection.receive_data`), events out; messages in
(`AircConnection.send_message`, `AircConnection.send_signal`), bytes out
(`AircConnection.data_to_send`); time only as the ``now`` its caller passes, with
`AircConnection.get_timer` / `AircConnection.handle_timer` for ACK delays and retransmissions.
The same object serves AIRC over TCP and over WebSocket: both carry the same byte stream.

Per stream (a 16-bit StreamID), each direction independently:

- the sender numbers frames 1, 2, 3 ... (wrapping) and keeps at most ``send_window`` of them
  unacknowledged; a message larger than ``max_frame_payload`` goes out as fragments, the last
  one flagged EOM;
- the receiver delivers messages in seq order, each once: duplicates are dropped, frames ahead
  of a gap are held (up to ``reorder_window``), and it acknowledges cumulatively, after
  ``ack_every`` frames or ``ack_delay`` seconds, at once after a duplicate or a gap;
- the sender retransmits the oldest unacknowledged frame after the retransmission timeout
  (RFC 6298 estimate, doubled per retry) or after three repeated ACKs; after
  ``max_retransmits`` the peer has stopped acknowledging and the connection fails.

Frames flagged PRIORITY (all signalling, and messages sent with ``priority=True``) leave before
any other frame; within a stream, frames always leave in seq order. Pure ACK frames leave
first of all.

Transitions::

    state   input                                  effect
    OPEN    data / signal frame                    deliver, ACK (maybe delayed)
    OPEN    ACK frame                              release window, RTT sample
    OPEN    TimeRequest                            answer with TimeResponse
    OPEN    TimeResponse                           ClockUpdated
    OPEN    GoAway from the peer                   -> CLOSED, ConnectionClosed(by_peer)
    OPEN    malformed input, over a bound          -> CLOSED, GoAway(code) out,
                                                     ConnectionClosed(by_peer=False)
    OPEN    retransmit limit reached               -> CLOSED, GoAway(ACK_TIMEOUT) out
    OPEN    close()                                -> CLOSED, GoAway(code) out
    CLOSED  anything                               ignored
"""

from __future__ import annotations

import contextlib
import itertools

from airlane.wire.airc.clock import ClockEstimator, clock_sample
from airlane.wire.airc.config import AircConfig
from airlane.wire.airc.errors import AircError, AircProtocolError, ErrorCode
from airlane.wire.airc.events import (
    Acknowledged,
    AircEvent,
    ClockUpdated,
    ConnectionClosed,
    GapDetected,
    MessageReceived,
    SignalReceived,
)
from airlane.wire.airc.frame import (
    ACK_BIT,
    ANY_STREAM,
    EOM_BIT,
    PRIORITY_BIT,
    SIGNALLING_STREAM,
    Frame,
    FrameDecoder,
    encode_frame,
)
from airlane.wire.airc.receiver import Arrival, ReceiveStream
from airlane.wire.airc.sender import InFlight, RttEstimator, SendStream
from airlane.wire.airc.signalling import (
    GoAway,
    SignalMessage,
    TimeRequest,
    TimeResponse,
    decode_signal,
    encode_signal,
)

__all__ = ["AircConnection", "ConnectionStats", "SendQueueFull"]

_FAST_RETRANSMIT_DUP_ACKS = 3
_MAX_REASON = 1024  # a GoAway's reason is a str16, but nobody needs a novel


class SendQueueFull(AircError):
    """`AircConnection.send_message` would exceed ``max_queued_bytes``: the caller must wait
    for `airlane.wire.airc.events.Acknowledged` (check `AircConnection.can_send` first)."""


class ConnectionStats:
    """Counters of one connection."""

    __slots__ = (
        "beyond_window",
        "duplicates",
        "frames_received",
        "frames_sent",
        "gaps",
        "messages_received",
        "messages_sent",
        "retransmits",
    )

    def __init__(self) -> None:
        self.frames_sent = 0
        self.frames_received = 0
        self.messages_sent = 0
        self.messages_received = 0
        self.retransmits = 0
        self.duplicates = 0
        self.gaps = 0
        self.beyond_window = 0

    def as_dict(self) -> dict[str, int]:
        """The counters by name."""
        return {name: getattr(self, name) for name in self.__slots__}


class AircConnection:
    """One AIRC session, either side. See the module docstring for its rules."""

    def __init__(self, config: AircConfig | None = None, *, now: float) -> None:
        self.config = config or AircConfig()
        self.stats = ConnectionStats()
        """Counters."""
        self.clock = ClockEstimator()
        """NTP-style estimate of the peer's clock relative to ours."""
        self._start = now
        self._decoder = FrameDecoder(self.config.max_receive_payload)
        self._rtt = RttEstimator(self.config.initial_rto, self.config.min_rto, self.config.max_rto)
        self._send: dict[int, SendStream] = {}
        self._receive: dict[int, ReceiveStream] = {}
        self._sending: dict[int, None] = {}  # streams with queued fragments, in arrival order
        self._queued_bytes = 0
        self._priority_queued = 0  # queued fragments flagged PRIORITY (skip that pass if 0)
        self._received_bytes = 0  # held for the peer: frames ahead of gaps, partial messages
        self._in_flight: dict[int, None] = {}  # streams with unacknowledged frames
        self._owed_acks: dict[int, None] = {}  # streams that owe the peer an ACK
        self._ack_deadline: float | None = None
        self._ack_now = False
        self._retransmit: list[InFlight] = []  # frames due again, sent before new ones
        self._out: list[bytes] = []
        self._nonces = itertools.count(1)
        self._time_requests: dict[int, None] = {}  # nonces awaiting an answer (at most 16)
        self._closed: ConnectionClosed | None = None
        self._now = now  # the latest time a caller passed in (for GOAWAY's timestamp)

    # -- state ------------------------------------------------------------------------------

    @property
    def closed(self) -> ConnectionClosed | None:
        """How the connection ended, or None while it is open."""
        return self._closed

    @property
    def queued_bytes(self) -> int:
        """Bytes waiting for a send window."""
        return self._queued_bytes

    def timestamp(self, now: float) -> int:
        """``now`` on this connection's clock: microseconds since it started, as a u32."""
        return int((now - self._start) * 1_000_000) & 0xFFFFFFFF

    def can_send(self, stream_id: int) -> bool:
        """True if a message on ``stream_id`` would not wait behind a full window (its queue
        is empty and it has window left) and the connection's queue has room."""
        stream = self._send.get(stream_id)
        if self._queued_bytes >= self.config.max_queued_bytes:
            return False
        return stream is None or (not stream.queue and stream.window_open)

    def fits(self, size: int) -> bool:
        """True if a message of ``size`` bytes may be queued now (`send_message` would not
        raise `SendQueueFull`): the queue is empty, or holds room for it."""
        queued = self._queued_bytes
        return not queued or queued + size <= self.config.max_queued_bytes

    def pending(self, stream_id: int) -> int:
        """Frames of ``stream_id`` not yet acknowledged: queued or in flight. Zero means the
        peer has everything sent on it (a good time to say the stream is over)."""
        stream = self._send.get(stream_id)
        return len(stream.queue) + len(stream.in_flight) if stream is not None else 0

    def unacknowledged(self, stream_id: int) -> int:
        """Frames sent on ``stream_id`` and not yet acknowledged."""
        stream = self._send.get(stream_id)
        return len(stream.in_flight) if stream is not None else 0

    # -- sending ----------------------------------------------------------------------------

    def send_message(self, stream_id: int, data: bytes, *, priority: bool = False) -> None:
        """Queue ``data`` as one message on ``stream_id`` (fragmented if needed).

        Raises:
            SendQueueFull: the connection already holds ``max_queued_bytes``.
            ValueError: ``stream_id`` is not a usable StreamID.
        """
        if self._closed is not None:
            return
        if not 0 <= stream_id < ANY_STREAM:
            raise ValueError(f"StreamID {stream_id} is out of range 0..{ANY_STREAM - 1}")
        if self._queued_bytes + len(data) > self.config.max_queued_bytes and self._queued_bytes:
            raise SendQueueFull(
                f"{self._queued_bytes} bytes are queued; the limit is "
                f"{self.config.max_queued_bytes}"
            )
        stream = self._send_stream(stream_id)
        base = PRIORITY_BIT if priority else 0
        size = self.config.max_frame_payload
        last = max(0, (len(data) - 1) // size)
        queue = stream.queue
        for i in range(last + 1):
            piece = data[i * size : (i + 1) * size] if last else data
            queue.append((piece, base | EOM_BIT if i == last else base))
        if priority:
            self._priority_queued += last + 1
        stream.queued_bytes += len(data)
        self._queued_bytes += len(data)
        self._sending[stream_id] = None
        self.stats.messages_sent += 1

    def send_signal(self, message: SignalMessage) -> None:
        """Queue a signalling message on stream 255, with priority."""
        self.send_message(SIGNALLING_STREAM, encode_signal(message), priority=True)

    def request_clock_sync(self) -> int:
        """Start an NTP-style clock exchange; the answer becomes a `ClockUpdated` event.
        Returns its nonce."""
        nonce = next(self._nonces) & 0xFFFFFFFF
        if len(self._time_requests) >= 16:  # unanswered ones are forgotten, oldest first
            del self._time_requests[next(iter(self._time_requests))]
        self._time_requests[nonce] = None
        self.send_signal(TimeRequest(nonce))
        return nonce

    def close(self, code: ErrorCode = ErrorCode.NO_ERROR, reason: str = "") -> None:
        """End the connection, telling the peer why with ``GOAWAY``; idempotent."""
        if self._closed is None:
            self._end(code, reason, by_peer=False)

    def data_to_send(self, now: float) -> bytes:
        """Everything ready to go out now: ACKs, retransmissions, then new frames (priority
        ones first, streams interleaved one frame at a time)."""
        out = self._out
        self._now = now
        if self._closed is None:
            if self._ack_now or (self._ack_deadline is not None and now >= self._ack_deadline):
                self._flush_acks(now)
            if self._retransmit:
                # One acknowledged since it fell due (a fast retransmit, then the ACK it was
                # waiting for) stays home.
                out.extend(frame.data for frame in self._retransmit if not frame.acknowledged)
                self._retransmit.clear()
            if self._sending:
                if self._priority_queued:
                    self._transmit(now, priority=True)
                self._transmit(now, priority=False)
        if not out:
            return b""
        data = b"".join(out)
        out.clear()
        return data

    def _transmit(self, now: float, *, priority: bool) -> None:
        stamp = self.timestamp(now)
        deadline = now + self._rtt.rto
        sending, send = self._sending, self._send
        stats, out = self.stats, self._out
        moved = True
        while moved:
            moved = False
            for stream_id in list(sending):
                stream = send[stream_id]
                if len(stream.in_flight) >= stream.window:
                    continue
                piece, flags = stream.queue[0]
                # The priority pass takes priority heads only; the second pass takes any head,
                # so a priority frame queued behind a normal one on its stream still goes now.
                if priority and not flags & PRIORITY_BIT:
                    continue
                stream.queue.popleft()
                if flags & PRIORITY_BIT:
                    self._priority_queued -= 1
                seq = stream.take_seq()
                data = encode_frame(Frame(stream_id, seq, stamp, piece, flags))
                out.append(data)
                stream.in_flight.append(InFlight(seq, data, now, deadline))
                self._in_flight[stream_id] = None
                stream.queued_bytes -= len(piece)
                self._queued_bytes -= len(piece)
                stats.frames_sent += 1
                moved = True
                if not stream.queue:
                    del sending[stream_id]

    def _flush_acks(self, now: float) -> None:
        stamp = self.timestamp(now)
        for stream_id in self._owed_acks:
            stream = self._receive[stream_id]
            stream.since_ack = 0
            ack = stream.cumulative_ack
            self._out.append(encode_frame(Frame(stream_id, ack, stamp, b"", ACK_BIT)))
        self._owed_acks.clear()
        self._ack_deadline = None
        self._ack_now = False

    # -- receiving --------------------------------------------------------------------------

    def receive_data(self, data: bytes, now: float) -> list[AircEvent]:
        """Feed bytes from the peer; return what they mean. Never raises for bad input: a
        protocol violation closes the connection and is reported as `ConnectionClosed`."""
        if self._closed is not None:
            return []
        self._now = now
        events: list[AircEvent] = []
        # Frames that arrived whole before a malformed one count, however the bytes were
        # split: the outcome depends on the byte stream only (as in the C library).
        frames, failure = self._decoder.decode(data)
        try:
            for frame in frames:
                self._on_frame(frame, now, events)
                if self._closed is not None:
                    return events
        except AircProtocolError as exc:
            failure = exc
        if failure is not None:
            events.append(self._end(failure.goaway, failure.reason, by_peer=False))
        return events

    def _on_frame(self, frame: Frame, now: float, events: list[AircEvent]) -> None:
        self.stats.frames_received += 1
        if frame.flags & ACK_BIT:
            self._on_ack(frame, now, events)
            return
        stream = self._receive.get(frame.stream_id)
        if stream is None:
            self._check_stream_budget(frame.stream_id)
            config = self.config
            stream = ReceiveStream(config.reorder_window, config.max_message_size)
            self._receive[frame.stream_id] = stream
        delivered: list[tuple[bytes, int, bool]] = []
        expected, buffered = stream.expected, stream.buffered
        arrival = stream.accept(frame, delivered)
        self._received_bytes += stream.buffered - buffered
        if self._received_bytes > self.config.max_receive_buffer:
            raise AircProtocolError(
                ErrorCode.FLOW_CONTROL,
                f"the peer made us hold over {self.config.max_receive_buffer} bytes "
                "(frames ahead of gaps and partial messages)",
            )
        stream_id = frame.stream_id
        if arrival == Arrival.IN_ORDER:
            self._owe_ack(stream, stream_id, now, now_=stream.held > 0)
        else:
            if arrival == Arrival.AHEAD and stream.held == 1:
                self.stats.gaps += 1
                events.append(GapDetected(stream_id, expected, frame.seq))
            elif arrival == Arrival.DUPLICATE:
                self.stats.duplicates += 1
            elif arrival == Arrival.BEYOND_WINDOW:
                self.stats.beyond_window += 1
            # Tell the sender where we are at once: a repeated ACK starts its fast retransmit.
            self._owe_ack(stream, stream_id, now, now_=True)
        for data, timestamp, priority in delivered:
            if self._closed is not None:  # a GoAway among them: nothing after it counts
                break
            self.stats.messages_received += 1
            if stream_id == SIGNALLING_STREAM:
                self._on_signal(data, timestamp, now, events)
            else:
                events.append(MessageReceived(stream_id, data, timestamp, priority))

    def _owe_ack(self, stream: ReceiveStream, stream_id: int, now: float, *, now_: bool) -> None:
        self._owed_acks[stream_id] = None
        # ``ack_every`` frames on one stream send the ACK without waiting for the delay.
        if now_ or stream.since_ack >= self.config.ack_every:
            self._ack_now = True
        elif self._ack_deadline is None:
            self._ack_deadline = now + self.config.ack_delay

    def _on_ack(self, frame: Frame, now: float, events: list[AircEvent]) -> None:
        if frame.payload:
            raise AircProtocolError(
                ErrorCode.BAD_LENGTH, f"an ACK frame carries no payload, got {len(frame.payload)}"
            )
        stream = self._send.get(frame.stream_id)
        if stream is None:
            raise AircProtocolError(
                ErrorCode.FLOW_CONTROL, f"ACK on stream {frame.stream_id}, which sent nothing"
            )
        acked = stream.acknowledge(frame.stream_id, frame.seq)
        if acked:
            newest = acked[-1]
            if newest.retries == 0:
                self._rtt.observe(now - newest.sent_at)
            if stream.in_flight:
                # The oldest frame left now gets a fresh timeout (RFC 6298, rule 5.3).
                stream.in_flight[0].deadline = now + self._rtt.backoff(stream.in_flight[0].retries)
            else:
                self._in_flight.pop(frame.stream_id, None)
            events.append(Acknowledged(frame.stream_id, frame.seq))
        elif stream.dup_acks == _FAST_RETRANSMIT_DUP_ACKS and stream.in_flight:
            self._resend(stream.in_flight[0], now)

    def _on_signal(self, data: bytes, timestamp: int, now: float, events: list[AircEvent]) -> None:
        message = decode_signal(data)
        received_at = self.timestamp(now)
        if isinstance(message, TimeRequest):
            # Best effort: with our own queue full the answer is dropped (the peer may ask
            # again); the peer's input must never make receive_data raise SendQueueFull.
            with contextlib.suppress(SendQueueFull):
                self.send_signal(TimeResponse(message.nonce, timestamp, received_at))
        elif isinstance(message, TimeResponse):
            # t1 is the request frame's own header timestamp, as the peer echoes it: the time
            # it actually left, not when it was queued.
            if message.nonce in self._time_requests:
                del self._time_requests[message.nonce]
                t1 = message.origin_ts
                sample = clock_sample(t1, message.receive_ts, timestamp, received_at)
                if self.clock.add(sample):
                    offset, delay = self.clock.offset_us, self.clock.delay_us
                    assert offset is not None and delay is not None
                    events.append(ClockUpdated(offset, delay))
        elif isinstance(message, GoAway):
            events.append(self._end(message.code, message.reason, by_peer=True))
        else:
            events.append(SignalReceived(message, timestamp, received_at))

    # -- timers -----------------------------------------------------------------------------

    def get_timer(self) -> float | None:
        """When `handle_timer` should run next (None: nothing is pending)."""
        if self._closed is not None:
            return None
        deadline = self._ack_deadline
        for stream_id in self._in_flight:
            due = self._send[stream_id].in_flight[0].deadline
            if deadline is None or due < deadline:
                deadline = due
        return deadline

    def handle_timer(self, now: float) -> list[AircEvent]:
        """Run what is due at ``now``: delayed ACKs and retransmissions. A frame that ran out
        of retransmissions closes the connection (`ErrorCode.ACK_TIMEOUT`)."""
        if self._closed is not None:
            return []
        self._now = now
        if self._ack_deadline is not None and now >= self._ack_deadline:
            self._ack_now = True
        for stream_id in self._in_flight:
            oldest = self._send[stream_id].in_flight[0]
            if now < oldest.deadline:
                continue
            if oldest.retries >= self.config.max_retransmits:
                waited = now - oldest.sent_at
                return [
                    self._end(
                        ErrorCode.ACK_TIMEOUT,
                        f"the peer stopped acknowledging: stream {stream_id} seq {oldest.seq} "
                        f"unacknowledged after {oldest.retries} retransmissions over "
                        f"{waited:.1f} s",
                        by_peer=False,
                    )
                ]
            self._resend(oldest, now)
        return []

    def _resend(self, frame: InFlight, now: float) -> None:
        frame.retries += 1
        frame.deadline = now + self._rtt.backoff(frame.retries)
        self._retransmit.append(frame)
        self.stats.retransmits += 1

    # -- helpers ----------------------------------------------------------------------------

    def _send_stream(self, stream_id: int) -> SendStream:
        stream = self._send.get(stream_id)
        if stream is None:
            # Stream 255 is always available: answers to the peer's signalling must not
            # depend on how many data streams the application opened.
            data_streams = len(self._send) - (SIGNALLING_STREAM in self._send)
            if stream_id != SIGNALLING_STREAM and data_streams >= self.config.max_streams:
                raise ValueError(f"this connection already uses {len(self._send)} StreamIDs")
            stream = self._send[stream_id] = SendStream(self.config.send_window)
        return stream

    def _check_stream_budget(self, stream_id: int) -> None:
        data_streams = len(self._receive) - (SIGNALLING_STREAM in self._receive)
        if stream_id != SIGNALLING_STREAM and data_streams >= self.config.max_streams:
            raise AircProtocolError(
                ErrorCode.TOO_MANY_STREAMS,
                f"the peer used more than {self.config.max_streams} StreamIDs",
            )

    def _end(self, code: ErrorCode, reason: str, *, by_peer: bool) -> ConnectionClosed:
        event = ConnectionClosed(code, reason, by_peer)
        if not by_peer:
            self._send_goaway(code, reason)
        self._closed = event
        # Whatever is still queued or in flight will never be acknowledged now: drop it.
        self._send.clear()
        self._sending.clear()
        self._in_flight.clear()
        self._retransmit.clear()
        self._owed_acks.clear()
        self._queued_bytes = self._priority_queued = 0
        return event

    def _send_goaway(self, code: ErrorCode, reason: str) -> None:
        # Signalling already queued goes first, window or not, so that the peer (which reads
        # stream 255 in seq order) reaches the GOAWAY; nobody waits for its ACK.
        stream = self._send.get(SIGNALLING_STREAM) or SendStream(self.config.send_window)
        stream.queue.append(
            (encode_signal(GoAway(code, reason[:_MAX_REASON])), PRIORITY_BIT | EOM_BIT)
        )
        stamp = self.timestamp(self._now)
        while stream.queue:
            piece, flags = stream.queue.popleft()
            frame = Frame(SIGNALLING_STREAM, stream.take_seq(), stamp, piece, flags)
            self._out.append(encode_frame(frame))
