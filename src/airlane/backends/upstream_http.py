"""A lean asyncio HTTP/1.1 client for the upstream backend: one origin, a bounded pool.

Why not httpx: in proxy mode every upstream token chunk crosses this client, 25,000 a second
for 500 streams paced at 20 ms, on the gateway's one core. httpx on anyio pays, per read, a
stream wrapper chain, a cancel scope for the read timeout and an async iterator layer; here a
read costs the parsing it needs and one wake-up of the reader. The client does only what the
backend needs: one request at a time per connection, bodies sent with ``Content-Length``,
responses streamed.

Shape (STYLE.md section 1): `airlane.backends.http11` is the sans-I/O protocol;
`airlane.backends.upstream_connection` is a thin `asyncio.Protocol` that feeds it bytes and wakes
the one reader, with no task of its own; `ConnectionPool` (here) hands out connections, and
`airlane.backends.upstream_config` holds the settings::

    pool = ConnectionPool(Origin.from_url("http://127.0.0.1:8000"))
    async with await pool.request("POST", "/v1/chat/completions", headers, body) as response:
        while data := await response.read():
            ...
    await pool.aclose()

Bounds: at most ``max_connections`` connections (busy, draining or idle), a wait of at most
``pool`` seconds for one, at most ``max_buffered_bytes`` of unread body per connection (reading
pauses above it), and response heads of at most ``max_head_bytes``.

Leaving a response before its body ended closes the connection, which is how a cancelled
stream aborts the generation upstream; `UpstreamResponse.drain_on_close` instead lets the
connection read the rest of a body that is about to end (bounded), then go back to the pool.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable, Sequence

from airlane.backends.http11 import ResponseHead, encode_request
from airlane.backends.upstream_config import (
    DEFAULT_LIMITS,
    DEFAULT_TIMEOUTS,
    Origin,
    UpstreamLimits,
    UpstreamTimeouts,
)
from airlane.backends.upstream_connection import ConnectionState, UpstreamConnection
from airlane.backends.upstream_errors import (
    TimeoutPhase,
    UpstreamConnectError,
    UpstreamDisconnected,
    UpstreamTimeout,
)

__all__ = [
    "DEFAULT_LIMITS",
    "DEFAULT_TIMEOUTS",
    "ConnectionPool",
    "Origin",
    "UpstreamLimits",
    "UpstreamResponse",
    "UpstreamTimeouts",
]

_CLOSE_GRACE_S = 1.0  # `ConnectionPool.aclose` waits this long for transports to finish closing
_IDLE, _BUSY, _DRAINING = ConnectionState.IDLE, ConnectionState.BUSY, ConnectionState.DRAINING


class UpstreamResponse:
    """A response whose body is being received. Use as an async context manager: leaving it
    returns the connection to the pool if the body ended, and closes it otherwise."""

    __slots__ = ("_conn", "_drain", "_pool", "_released", "head", "take")

    def __init__(self, pool: ConnectionPool, conn: UpstreamConnection, head: ResponseHead) -> None:
        self._pool = pool
        self._conn = conn
        self._drain = False
        self._released = False
        self.head = head
        """Status line and header fields."""
        self.take: Callable[[int], bytes | None] = conn.take
        """`read` without waiting, at most the given number of bytes (0: all there is): None
        while nothing new has arrived (see `listen`). The connection's own method rather
        than a wrapper: a feed calls it twice per read."""

    @property
    def status(self) -> int:
        """The status code."""
        return self.head.status

    @property
    def reason(self) -> str:
        """The reason phrase."""
        return self.head.reason

    @property
    def complete(self) -> bool:
        """True once the whole body has been received."""
        return self._conn.ended

    def header(self, name: str) -> str | None:
        """The first value of header field ``name`` (lower case), or None."""
        return self.head.header(name)

    async def read(self) -> bytes:
        """Body bytes received since the last call, waiting for some; ``b""`` at the end.

        Raises:
            UpstreamHTTPError: the connection failed or timed out (after the bytes that came
                before the failure were read).
        """
        return await self._conn.read()

    def listen(self, callback: Callable[[], object] | None) -> None:
        """Have ``callback`` called whenever `take` may have something new (body bytes, the
        end, an error), from the connection's protocol call-backs, instead of a reader
        waiting in `read`; None stops it. For a reader with no task of its own (a feed)."""
        self._conn.listen(callback)

    async def read_up_to(self, limit: int) -> bytes:
        """The body, or its first ``limit`` bytes or so (to quote an error body)."""
        body = bytearray()
        while len(body) < limit and (data := await self._conn.read()):
            body += data
        return bytes(body)

    def drain_on_close(self) -> None:
        """On close, let the connection read the rest of the body (at most
        ``max_drain_bytes``, for ``UpstreamTimeouts.drain``) and then return to the pool,
        instead of closing it. For a body known to be at its end (after ``data: [DONE]``)."""
        self._drain = True

    def close(self) -> None:
        """Give the connection back; idempotent."""
        if not self._released:
            self._released = True
            self._pool._release(self._conn, drain=self._drain)

    async def __aenter__(self) -> UpstreamResponse:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self.close()


class ConnectionPool:
    """Connections to one origin, at most ``limits.max_connections``, reused (keep-alive).

    ``ssl_context`` is used for ``https`` origins (default: the system's trust store).
    """

    def __init__(
        self,
        origin: Origin,
        *,
        timeouts: UpstreamTimeouts = DEFAULT_TIMEOUTS,
        limits: UpstreamLimits = DEFAULT_LIMITS,
        ssl_context: ssl.SSLContext | None = None,
    ) -> None:
        self.origin = origin
        """Where the connections go."""
        self._where = str(origin)
        self._timeouts = timeouts
        self._limits = limits
        self._ssl: ssl.SSLContext | None = None
        if origin.scheme == "https":
            self._ssl = ssl_context or ssl.create_default_context()
        # One slot per connection that is busy or draining; idle ones hold none. So open
        # connections never exceed max_connections: a new one is made only when none is idle.
        self._slots = asyncio.Semaphore(limits.max_connections)
        self._idle: list[UpstreamConnection] = []  # a stack: the most recently used is reused first
        self._connections: set[UpstreamConnection] = set()
        self._closed = False

    @property
    def connections(self) -> int:
        """Open connections, busy, draining or idle."""
        return len(self._connections)

    @property
    def idle_connections(self) -> int:
        """Connections waiting in the pool for a request."""
        return len(self._idle)

    async def request(
        self, method: str, target: str, headers: Sequence[tuple[str, str]], body: bytes
    ) -> UpstreamResponse:
        """Send a request; return once the response head arrived (the body streams after).

        Raises:
            UpstreamHTTPError: no connection, a timeout, a failure before the head.
            RuntimeError: the pool is closed.
            ValueError: a header or target that cannot be sent.
        """
        if self._closed:
            raise RuntimeError("the connection pool is closed")
        request = encode_request(method, target, [("Host", self.origin.authority), *headers], body)
        await self._acquire()
        try:
            conn, head = await self._exchange(request)
        except BaseException:
            self._slots.release()
            raise
        return UpstreamResponse(self, conn, head)

    async def aclose(self) -> None:
        """Close every connection; responses still being read fail with a disconnect."""
        self._closed = True
        self._idle.clear()
        connections = list(self._connections)
        for conn in connections:
            conn.close(UpstreamDisconnected(f"the pool for upstream {self._where} was closed"))
        if connections:
            await asyncio.wait([c.closed for c in connections], timeout=_CLOSE_GRACE_S)

    async def _acquire(self) -> None:
        if not self._slots.locked():
            await self._slots.acquire()  # a free slot: returns without suspending
            return
        try:
            async with asyncio.timeout(self._timeouts.pool):
                await self._slots.acquire()
        except TimeoutError:
            raise UpstreamTimeout(TimeoutPhase.POOL, self._where) from None

    async def _exchange(self, request: bytes) -> tuple[UpstreamConnection, ResponseHead]:
        conn = self._take_idle()
        if conn is not None:
            try:
                return conn, await self._send(conn, request)
            except UpstreamDisconnected:
                if not conn.reused or conn.answered:
                    raise
                # The upstream closed this kept-alive connection as we reused it, before a
                # byte of answer (RFC 9112 section 9.3.1: a request a server never answered on
                # an idle connection may be retried). Once, on a fresh connection.
        conn = await self._connect()
        return conn, await self._send(conn, request)

    async def _send(self, conn: UpstreamConnection, request: bytes) -> ResponseHead:
        try:
            conn.start_request(request)
            await conn.wait_writable()
            return await conn.wait_head()
        except BaseException:
            conn.close()
            raise

    def _take_idle(self) -> UpstreamConnection | None:
        expired = asyncio.get_running_loop().time() - self._limits.keepalive_expiry
        while self._idle:
            conn = self._idle.pop()
            if conn.state is _IDLE and conn.idle_since > expired:
                return conn
            conn.close()
        return None

    async def _connect(self) -> UpstreamConnection:
        loop = asyncio.get_running_loop()
        origin = self.origin
        try:
            async with asyncio.timeout(self._timeouts.connect):
                _, conn = await loop.create_connection(
                    self._new_connection,
                    origin.host,
                    origin.port,
                    ssl=self._ssl,
                    server_hostname=origin.host if self._ssl is not None else None,
                )
        except TimeoutError:
            raise UpstreamTimeout(TimeoutPhase.CONNECT, self._where) from None
        except OSError as exc:  # refused, unreachable, name not found, TLS (ssl.SSLError)
            reason = exc.strerror or str(exc) or type(exc).__name__
            message = f"cannot connect to upstream {self._where}: {reason}"
            raise UpstreamConnectError(message) from exc
        if self._closed:
            conn.close()
            raise RuntimeError("the connection pool is closed")
        self._connections.add(conn)
        return conn

    def _new_connection(self) -> UpstreamConnection:
        return UpstreamConnection(
            self._where, self._timeouts, self._limits, self._on_drained, self._on_closed
        )

    def _release(self, conn: UpstreamConnection, *, drain: bool) -> None:
        """A response is done with ``conn``: back to the pool, draining, or closed."""
        if conn.reusable and not self._closed:
            conn.park()
            self._idle.append(conn)
        elif drain and conn.state is _BUSY and not conn.ended and not self._closed:
            conn.start_drain()
            return  # its slot is freed when the drain ends (_on_drained or _on_closed)
        else:
            conn.close()
        self._slots.release()

    def _on_drained(self, conn: UpstreamConnection) -> None:
        if self._closed:
            conn.close()  # the DRAINING -> CLOSED hook frees the slot
            return
        conn.park()
        self._idle.append(conn)
        self._slots.release()

    def _on_closed(self, conn: UpstreamConnection, was: ConnectionState) -> None:
        self._connections.discard(conn)
        if was is _IDLE and conn in self._idle:
            self._idle.remove(conn)  # at most max_connections long, and closing is rare
        if was is _DRAINING:
            self._slots.release()
