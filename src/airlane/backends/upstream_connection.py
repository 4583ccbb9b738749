"""One upstream HTTP/1.1 connection: an `asyncio.Protocol` around `ResponseParser`.

Thin by design (STYLE.md section 1): bytes from the loop go to the sans-I/O parser, its events
fill a bounded body buffer, and the one coroutine waiting for them is woken. No task of its
own; a single timer per connection enforces the deadlines, armed when a request is sent and
moved only when it fires, so a read costs one clock read rather than a timer. Only
`airlane.backends.upstream_http.ConnectionPool` drives it.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable
from typing import cast

from airlane.backends.http11 import (
    ResponseEnd,
    ResponseEvent,
    ResponseHead,
    ResponseParser,
)
from airlane.backends.upstream_config import UpstreamLimits, UpstreamTimeouts
from airlane.backends.upstream_errors import (
    TimeoutPhase,
    UpstreamDisconnected,
    UpstreamHTTPError,
    UpstreamTimeout,
)

__all__ = ["ConnectionState", "UpstreamConnection"]


class ConnectionState(enum.Enum):
    """Life of a connection. IDLE -> BUSY (a request) -> IDLE (reused), DRAINING (the body is
    read to its end, unwanted, then IDLE) or CLOSED; any state -> CLOSED."""

    IDLE = "idle in the pool"
    BUSY = "carrying a request"
    DRAINING = "reading the end of an unwanted body"
    CLOSED = "closed"


_IDLE, _BUSY, _DRAINING, _CLOSED = (
    ConnectionState.IDLE,
    ConnectionState.BUSY,
    ConnectionState.DRAINING,
    ConnectionState.CLOSED,
)


class UpstreamConnection(asyncio.Protocol):
    """One HTTP/1.1 connection: sends a request, parses its response as bytes arrive, and
    wakes the one coroutine waiting for them. Callbacks only; it starts no task."""

    def __init__(
        self,
        where: str,
        timeouts: UpstreamTimeouts,
        limits: UpstreamLimits,
        on_drained: Callable[[UpstreamConnection], None],
        on_closed: Callable[[UpstreamConnection, ConnectionState], None],
    ) -> None:
        self._loop = asyncio.get_running_loop()
        self._where = where
        self._timeouts = timeouts
        self._limits = limits
        self._on_drained = on_drained
        self._on_closed = on_closed
        self.state = _IDLE
        self.idle_since = self._loop.time()
        """When the connection last became idle (loop time)."""
        self.reused = False
        """True once it carried a request before the current one."""
        self.closed = self._loop.create_future()
        """Resolved once the transport is gone."""
        self._transport: asyncio.Transport | None = None
        self._parser = ResponseParser(max_head_bytes=limits.max_head_bytes)
        self._head: ResponseHead | None = None
        self._pieces: list[bytes] = []
        self._buffered = 0
        self._received = 0
        self.ended = False
        """True once the current response is complete."""
        self._keep_alive = False
        self._error: UpstreamHTTPError | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._listener: Callable[[], object] | None = None
        self._reading_paused = False
        self._write_resumed: asyncio.Future[None] | None = None
        self._progress_at = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._drain_budget = 0

    @property
    def answered(self) -> bool:
        """True once a byte of the current response arrived."""
        return self._received > 0

    @property
    def reusable(self) -> bool:
        """True if the response ended and the connection may carry another request."""
        return self.ended and self._keep_alive and self._parser.reusable and self.state is _BUSY

    # -- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        state = self.state
        if state is _BUSY:
            self._progress_at = self._loop.time()
            if not self._received:
                # The first byte: from now on the (usually shorter) idle deadline applies.
                self._set_timer(self._progress_at + self._timeouts.idle)
            self._received += len(data)
            try:
                events = self._parser.receive_data(data)
            except UpstreamHTTPError as exc:
                self._close(exc)
                return
            self._absorb(events)
        elif state is _DRAINING:
            self._drain(data)
        elif state is _IDLE:
            # Bytes nobody asked for: the peer is confused, the connection cannot be trusted.
            self._close(None)

    def eof_received(self) -> bool:
        if self.state is _BUSY:
            try:
                self._absorb(self._parser.receive_eof())
            except UpstreamHTTPError as exc:
                self._close(exc)
        elif self.state is _DRAINING:
            self._finish_drain(eof=True)
        return False  # close the transport; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.ended:
            detail = f": {exc}" if exc else ""
            self._close(UpstreamDisconnected(f"connection to upstream {self._where} lost{detail}"))
        else:
            self._close(None)
        if not self.closed.done():
            self.closed.set_result(None)

    def pause_writing(self) -> None:
        self._write_resumed = self._loop.create_future()

    def resume_writing(self) -> None:
        self._resume_writer()

    # -- used by the pool and the response ---------------------------------------------------

    def start_request(self, request: bytes) -> None:
        """Send ``request`` and expect its response."""
        assert self.state is _IDLE and self._transport is not None, self.state
        self.state = _BUSY
        self._parser.close()
        self._parser = ResponseParser(max_head_bytes=self._limits.max_head_bytes)
        self._head, self._pieces, self._buffered, self._received = None, [], 0, 0
        self.ended, self._error, self._keep_alive = False, None, False
        self._transport.write(request)
        self._progress_at = self._loop.time()
        self._set_timer(self._progress_at + self._timeouts.first_byte)

    async def wait_writable(self) -> None:
        """Return once the kernel took the request (at once unless its buffer was full)."""
        resumed = self._write_resumed
        if resumed is None:
            return
        try:
            async with asyncio.timeout(self._timeouts.write):
                await resumed
        except TimeoutError:
            error = UpstreamTimeout(TimeoutPhase.WRITE, self._where)
            self._close(error)
            raise error from None
        if self._error is not None:
            raise self._error

    async def wait_head(self) -> ResponseHead:
        """The response head, once it arrived."""
        while self._head is None:
            if self._error is not None:
                raise self._error
            await self._wait()
        return self._head

    async def read(self) -> bytes:
        """The body bytes received since the last call (waiting for some); ``b""`` once the
        body is complete. Raises the connection's error once what came before it is read."""
        while (data := self.take()) is None:
            await self._wait()
        return data

    def take(self, limit: int = 0) -> bytes | None:
        """`read` without waiting: None while nothing new has arrived. With a ``limit``, at
        most that many bytes (the rest stays for the next call)."""
        if not self._pieces:
            if self.ended:
                return b""
            if self._error is not None:
                raise self._error
            return None
        pieces = self._pieces
        if limit and self._buffered > limit:
            pieces = self._take_up_to(limit)
        else:
            self._pieces = []
            self._buffered = 0
        if (
            self._reading_paused
            and self._transport is not None
            and self._buffered <= self._limits.max_buffered_bytes
        ):
            self._reading_paused = False
            self._progress_at = self._loop.time()
            self._transport.resume_reading()
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    def _take_up_to(self, limit: int) -> list[bytes]:
        """The first ``limit`` bytes of what is buffered, out of the buffer."""
        taken: list[bytes] = []
        size = 0
        pieces = self._pieces
        while pieces and size < limit:
            piece = pieces[0]
            if size + len(piece) > limit:
                cut = limit - size
                taken.append(piece[:cut])
                pieces[0] = piece[cut:]
                size = limit
                break
            taken.append(pieces.pop(0))
            size += len(piece)
        self._buffered -= size
        return taken

    def listen(self, callback: Callable[[], object] | None) -> None:
        """Call ``callback`` (from the protocol's own call-backs) instead of waking a reader
        whenever body bytes, the body's end or an error arrive; None goes back to waking. A
        listener calls `take` for what is there; it must not raise."""
        self._listener = callback

    def park(self) -> None:
        """The response ended; wait in the pool for the next request."""
        self.state = _IDLE
        self.reused = True
        self.idle_since = self._loop.time()
        self._cancel_timer()

    def start_drain(self) -> None:
        """Read the rest of the body, unwanted, then report to the pool: ``on_drained`` when it
        ended in time and within ``max_drain_bytes``, else the connection closes."""
        self.state = _DRAINING
        self._pieces, self._buffered = [], 0
        self._drain_budget = self._limits.max_drain_bytes
        self._set_timer(self._loop.time() + self._timeouts.drain)
        if self._reading_paused and self._transport is not None:
            self._reading_paused = False
            self._transport.resume_reading()

    def close(self, error: UpstreamHTTPError | None = None) -> None:
        """Close the connection; a reader still waiting gets ``error`` (or a disconnect)."""
        if error is None and not self.ended:
            error = UpstreamDisconnected(f"connection to upstream {self._where} was closed")
        self._close(error)

    # -- internals ---------------------------------------------------------------------------

    def _absorb(self, events: list[ResponseEvent]) -> None:
        for event in events:
            if type(event) is bytes:
                self._pieces.append(event)
                self._buffered += len(event)
            elif type(event) is ResponseHead:
                self._head = event
            elif type(event) is ResponseEnd:
                self.ended = True
                self._keep_alive = event.keep_alive
                self._cancel_timer()
        if self._buffered > self._limits.max_buffered_bytes and not self._reading_paused:
            assert self._transport is not None
            self._reading_paused = True
            self._transport.pause_reading()
        self._wake()

    def _drain(self, data: bytes) -> None:
        self._drain_budget -= len(data)
        try:
            events = self._parser.receive_data(data)
        except UpstreamHTTPError:
            self._close(None)
            return
        end = events[-1] if events else None
        if type(end) is ResponseEnd:
            self.ended = True
            self._keep_alive = end.keep_alive
            self._finish_drain(eof=False)
        elif self._drain_budget < 0:
            self._close(None)

    def _finish_drain(self, *, eof: bool) -> None:
        if not eof and self._keep_alive and self._parser.reusable:
            self._cancel_timer()
            self._on_drained(self)
        else:
            self._close(None)

    async def _wait(self) -> None:
        waiter = self._loop.create_future()
        self._waiter = waiter
        try:
            await waiter
        finally:
            self._waiter = None

    def _wake(self) -> None:
        listener = self._listener
        if listener is not None:
            listener()
            return
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _resume_writer(self) -> None:
        resumed, self._write_resumed = self._write_resumed, None
        if resumed is not None and not resumed.done():
            resumed.set_result(None)

    def _set_timer(self, when: float) -> None:
        self._cancel_timer()
        self._timer = self._loop.call_at(when, self._on_timer)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _on_timer(self) -> None:
        """The one deadline of this connection is due, or was moved by progress since."""
        self._timer = None
        if self.state is _DRAINING:
            self._close(None)
            return
        if self.state is not _BUSY or self.ended:
            return
        now = self._loop.time()
        if self._reading_paused:
            # The reader, not the upstream, is slow: silence does not count against it.
            self._progress_at = now
        if self._received:
            phase, due = TimeoutPhase.IDLE, self._progress_at + self._timeouts.idle
        else:
            phase, due = TimeoutPhase.FIRST_BYTE, self._progress_at + self._timeouts.first_byte
        if now >= due:
            self._close(UpstreamTimeout(phase, self._where))
        else:
            self._timer = self._loop.call_at(due, self._on_timer)

    def _close(self, error: UpstreamHTTPError | None) -> None:
        state = self.state
        if error is not None and self._error is None and not self.ended:
            self._error = error
        if state is _CLOSED:
            return
        self.state = _CLOSED
        self._parser.close()
        self._cancel_timer()
        if self._transport is not None:
            self._transport.close()
        self._wake()
        self._resume_writer()
        self._on_closed(self, state)
