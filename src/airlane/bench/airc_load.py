"""The AIRC load client: one asyncio ``Protocol`` per stream, over AIRC/TCP or AIRC/WebSocket.

Each stream is one AIRC connection driven by the real sans-I/O `AircConnection` (it orders,
reassembles and acknowledges: the gateway's send window is 64 unacknowledged frames per
stream, so a client that did not acknowledge would stall it). `AircLoadStream` holds the
connection and records into a `StreamTally`; the protocols only move bytes and run the
connection's timer (delayed ACKs) on ``time.monotonic()``, as `airlane.client.airc` does.

Per stream: connect (over WebSocket: the upgrade handshake of `ClientHandshake`, offering
``airc.v1.2``, then AIRC's bytes in masked binary frames), send ``GEN_REQ`` with the encoder
``airlane-loadtest`` and the workload as its body; the ``GEN_ACK`` names the StreamID, each
message on it is one chunk's JSON (the same bytes as a ``/v1/loadtest/ws`` text message), and
the server's ``Close`` signal on that StreamID ends the stream. The client then says
``GOAWAY`` (and, over WebSocket, sends a close frame) and closes the socket. A connection that
ends before the ``Close`` is the stream's error, with the ``GOAWAY`` reason if one came.
"""

from __future__ import annotations

import asyncio
import re
import time
from typing import cast

import orjson

from airlane.bench.chunk import MAX_DIGITS, LoadProtocolError, read_seq_ts
from airlane.bench.config import BenchConfig
from airlane.bench.tally import StreamTally
from airlane.bench.ws_frames import (
    CLOSE_NORMAL,
    CLOSE_PROTOCOL_ERROR,
    BinaryStreamReader,
    FrameError,
    Opcode,
    client_frame,
    close_payload,
)
from airlane.bench.ws_handshake import ClientHandshake
from airlane.runtime.timers import DeadlineTimer
from airlane.wire.airc import (
    AIRC_SUBPROTOCOL,
    ANY_STREAM,
    LOADTEST_ENCODER,
    AircConnection,
    AircEvent,
    Close,
    ConnectionClosed,
    Error,
    ErrorCode,
    GenAck,
    GenRequest,
    MessageReceived,
    SignalReceived,
)

__all__ = [
    "REQUEST_ID",
    "AircLoadStream",
    "loadtest_request",
    "run_airc_stream",
]

REQUEST_ID = 1
"""The ``request_id`` of each connection's one ``GEN_REQ``."""

_CHUNK_HEAD = re.compile(rb'\{"seq":(\d{1,%d}),"ts":(\d{1,%d}),' % (MAX_DIGITS, MAX_DIGITS))
_MAX_WS_PAYLOAD = 125  # client_frame's limit: the client only sends small things (ACKs)


def loadtest_request(config: BenchConfig) -> GenRequest:
    """The ``GEN_REQ`` for one stream of ``config``'s workload."""
    body = {"chunks": config.chunks, "mode": config.mode, "interval_ms": config.interval_ms}
    return GenRequest(REQUEST_ID, ANY_STREAM, 0, LOADTEST_ENCODER, orjson.dumps(body))


class AircLoadStream:
    """One load-test stream over one AIRC connection, sans I/O: bytes in (`receive_data`),
    bytes out (`data_to_send`), the timer (`get_timer`, `handle_timer`) on
    ``time.monotonic()`` seconds. ``done`` once the server's ``Close`` arrived; a problem
    raises `LoadProtocolError`."""

    __slots__ = ("connection", "done", "stream", "tally")

    def __init__(self, tally: StreamTally, request: GenRequest, now: float) -> None:
        self.tally = tally
        self.connection = AircConnection(now=now)
        """The protocol state machine."""
        self.stream: int | None = None
        """The StreamID the chunks arrive on, once ``GEN_ACK`` said it."""
        self.done = False
        """True once the server's ``Close`` ended the stream."""
        self.connection.send_signal(request)

    def receive_data(self, data: bytes, now_ns: int) -> None:
        """Read AIRC bytes that arrived at ``now_ns`` (``time.monotonic_ns()``).

        Raises:
            LoadProtocolError: the connection closed first, the request was refused, or a
                message is not a chunk of the stream asked for.
        """
        if not self.done:
            self._handle(self.connection.receive_data(data, now_ns / 1e9), now_ns)

    def data_to_send(self, now: float) -> bytes:
        """What the connection has to send now (ACKs, answers, the ``GEN_REQ``)."""
        return self.connection.data_to_send(now)

    def get_timer(self) -> float | None:
        """When `handle_timer` should run next (None: nothing is pending)."""
        return None if self.done else self.connection.get_timer()

    def handle_timer(self, now: float) -> None:
        """Run the connection's delayed ACKs and retransmissions.

        Raises:
            LoadProtocolError: the server stopped acknowledging.
        """
        if not self.done:
            self._handle(self.connection.handle_timer(now), time.monotonic_ns())

    def close(self, code: ErrorCode = ErrorCode.NO_ERROR, reason: str = "") -> None:
        """Say ``GOAWAY`` (its bytes come out of `data_to_send`); idempotent."""
        self.connection.close(code, reason)

    def ended_early(self, how: str) -> LoadProtocolError:
        """The error for a link that ended (``how``) before the stream's ``Close``."""
        closed = self.connection.closed
        if closed is not None and closed.by_peer:
            how += f" after GOAWAY {closed.code.name}: {closed.reason!r}"
        return LoadProtocolError(f"{how} before the stream's Close")

    def _handle(self, events: list[AircEvent], now_ns: int) -> None:
        seqs: list[bytes] = []
        stamps: list[bytes] = []
        size = 0
        match = _CHUNK_HEAD.match
        try:
            for event in events:
                if type(event) is MessageReceived and event.stream_id == self.stream:
                    data = event.data
                    head = match(data)
                    if head is not None:
                        seqs.append(head[1])
                        stamps.append(head[2])
                        size += len(data)
                        continue
                    # Not a chunk head: read_seq_ts says why (ChunkFormatError), as in ws_frames.
                    self.tally.record(seqs, stamps, size, now_ns)
                    seqs, stamps, size = [], [], 0
                    seq, ts = read_seq_ts(data)
                    self.tally.chunk(seq, ts, len(data), now_ns)
                elif isinstance(event, SignalReceived):
                    if self._on_signal(event):
                        break
                elif isinstance(event, MessageReceived):
                    raise LoadProtocolError(
                        f"a message on StreamID {event.stream_id}, "
                        f"not on the load-test stream ({self.stream})"
                    )
                elif isinstance(event, ConnectionClosed):
                    who = "the server" if event.by_peer else "the client"
                    raise LoadProtocolError(
                        f"the AIRC connection ended before the stream's Close: {who} sent "
                        f"GOAWAY {event.code.name}: {event.reason!r}"
                    )
        finally:
            # What arrived before a problem counts.
            self.tally.record(seqs, stamps, size, now_ns)

    def _on_signal(self, event: SignalReceived) -> bool:
        """Handle a signal; True once the stream is over."""
        message = event.message
        if isinstance(message, GenAck) and message.request_id == REQUEST_ID:
            if self.stream is not None:
                raise LoadProtocolError("a second GEN_ACK")
            self.stream = message.stream
        elif isinstance(message, Error):
            raise LoadProtocolError(
                f"the server refused the GEN_REQ: {message.code}: {message.message}"
            )
        elif isinstance(message, Close) and message.stream == self.stream:
            self.done = True
            return True
        return False


class _AircLoadProtocol(asyncio.Protocol):
    """Moves one AIRC connection's bytes; resolves ``finished`` when the stream is over.
    Subclasses say how AIRC's bytes travel (`_receive`, `_send`)."""

    def __init__(self, stream: AircLoadStream) -> None:
        self.stream = stream
        self.loop = asyncio.get_running_loop()
        self.finished: asyncio.Future[None] = self.loop.create_future()
        self.transport: asyncio.Transport | None = None
        self._timer = DeadlineTimer(self._on_timer)

    # -- asyncio.Protocol -------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)
        self._opened()

    def data_received(self, data: bytes) -> None:
        now_ns = time.monotonic_ns()
        try:
            airc = self._receive(data)
            if airc:
                self.stream.receive_data(airc, now_ns)
        except LoadProtocolError as exc:
            self._fail(exc)
            return
        if self.stream.done:
            self._finish()
        else:
            self._flush(now_ns / 1e9)

    def pause_writing(self) -> None:
        # The client writes only ACKs and answers: a socket that does not drain them is not
        # read from until it does (a bounded write buffer).
        assert self.transport is not None
        self.transport.pause_reading()

    def resume_writing(self) -> None:
        assert self.transport is not None
        self.transport.resume_reading()

    def eof_received(self) -> bool:
        self._end(self.stream.ended_early("the server closed the connection"))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is None:
            exc = self.stream.ended_early("the connection was lost")
        self._end(exc)

    # -- transport-specific -----------------------------------------------------------------

    def _opened(self) -> None:
        """The socket is connected."""
        self._flush(time.monotonic())

    def _receive(self, data: bytes) -> bytes:
        """AIRC's bytes in ``data`` (raises `LoadProtocolError`)."""
        return data

    def _send(self, airc: bytes) -> None:
        """Write AIRC's bytes."""
        self._write(airc)

    def _goodbye(self) -> None:
        """Whatever ends the link after the ``GOAWAY`` (over WebSocket, a close frame)."""

    # -- plumbing ---------------------------------------------------------------------------

    def _write(self, data: bytes) -> None:
        if data and self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def _flush(self, now: float) -> None:
        stream = self.stream
        if out := stream.data_to_send(now):
            self._send(out)
        self._timer.arm(stream.get_timer())

    def _on_timer(self) -> None:
        now = time.monotonic()
        try:
            self.stream.handle_timer(now)
        except LoadProtocolError as exc:
            self._fail(exc)
            return
        self._flush(now)

    def _finish(self) -> None:
        """The stream is over: ``GOAWAY``, close the link, resolve ``finished``."""
        self.stream.close()
        self._send(self.stream.data_to_send(time.monotonic()))
        self._goodbye()
        self._end(None)

    def _fail(self, error: LoadProtocolError) -> None:
        """Our verdict on the server's input: ``GOAWAY`` if the connection is still open."""
        self.stream.close(ErrorCode.INTERNAL_ERROR, str(error)[:200])
        # The GOAWAY: ours, or the one the connection queued when it refused the input.
        self._send(self.stream.data_to_send(time.monotonic()))
        self._end(error)

    def _end(self, error: Exception | None) -> None:
        """Resolve ``finished`` (first call wins) and close the connection."""
        if not self.finished.done():
            if error is None:
                self.finished.set_result(None)
            else:
                self.finished.set_exception(error)
        self.close()

    def close(self) -> None:
        """Stop the timer and close the socket; idempotent."""
        self._timer.close()
        if self.transport is not None:
            self.transport.close()


class _AircWsLoadProtocol(_AircLoadProtocol):
    """AIRC over WebSocket: the upgrade handshake, then binary frames both ways."""

    def __init__(self, stream: AircLoadStream, authority: str, target: str) -> None:
        super().__init__(stream)
        self._handshake: ClientHandshake | None = ClientHandshake(
            authority, target, subprotocol=AIRC_SUBPROTOCOL
        )
        self._reader = BinaryStreamReader()

    def _opened(self) -> None:
        assert self._handshake is not None
        self._write(self._handshake.request())

    def _receive(self, data: bytes) -> bytes:
        if self._handshake is not None:
            rest = self._handshake.receive_data(data)
            if rest is None:
                return b""
            self._handshake = None
            self._flush(time.monotonic())  # the GEN_REQ, now that the WebSocket is open
            data = rest
        reader = self._reader
        airc = reader.feed(data)
        if reader.outgoing:
            self._write(b"".join(reader.outgoing))
            reader.outgoing.clear()
        if reader.close is not None:
            # Whatever came before the close frame counts (it may hold the Close signal).
            if airc:
                self.stream.receive_data(airc, time.monotonic_ns())
            if not self.stream.done:
                code, reason = reader.close
                raise self.stream.ended_early(
                    f"the server closed the WebSocket with code {code} ({reason!r})"
                )
            return b""
        return airc

    def _send(self, airc: bytes) -> None:
        if self._handshake is not None or self._reader.close is not None:
            return  # no WebSocket yet, or no more
        frames = [
            client_frame(Opcode.BINARY, airc[i : i + _MAX_WS_PAYLOAD])
            for i in range(0, len(airc), _MAX_WS_PAYLOAD)
        ]
        self._write(b"".join(frames))

    def _goodbye(self) -> None:
        if self._handshake is None and self._reader.close is None:
            self._write(client_frame(Opcode.CLOSE, close_payload(CLOSE_NORMAL)))

    def _fail(self, error: LoadProtocolError) -> None:
        super()._fail(error)
        if self._handshake is None and self._reader.close is None:
            code = error.code if isinstance(error, FrameError) else CLOSE_PROTOCOL_ERROR
            self._write(client_frame(Opcode.CLOSE, close_payload(code)))


async def run_airc_stream(
    host: str,
    port: int,
    request: GenRequest,
    tally: StreamTally,
    deadline: float,
    *,
    websocket: bool = False,
    path: str = "/v1/ws",
) -> None:
    """Read one load-test stream over AIRC into ``tally``: over the AIRC/TCP listener at
    ``host:port``, or with ``websocket`` over ``ws://host:port/v1/ws``. Never raises (failures
    go into ``tally.error``). ``deadline`` is on the loop's clock."""
    loop = asyncio.get_running_loop()
    tally.start_ns = time.monotonic_ns()
    protocol: _AircLoadProtocol | None = None
    try:
        stream = AircLoadStream(tally, request, time.monotonic())
        if websocket:
            authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            protocol = _AircWsLoadProtocol(stream, authority, path)
        else:
            protocol = _AircLoadProtocol(stream)
        async with asyncio.timeout_at(deadline):
            await loop.create_connection(lambda: protocol, host, port)
            await protocol.finished
        tally.finished = True
    except TimeoutError:
        tally.error = "timed out"
    except (OSError, ValueError, LoadProtocolError) as exc:
        tally.error = f"{type(exc).__name__}: {exc}"
    finally:
        if protocol is not None:
            protocol.close()
