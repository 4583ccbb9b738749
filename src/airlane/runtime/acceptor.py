"""`Acceptor`: takes a listening socket's waiting connections in batches, not one a loop turn.

libuv, under uvloop, accepts one connection each time its loop polls a listening socket and
leaves the next one to the next poll (libuv 1.45, "unix: don't accept() connections in a
loop", libuv#3696). That is cheap for a lone connection, but a busy loop polls only once a
turn: a gateway relaying 500 upstream streams turns about every 10 ms, so 500 clients that
connect together were accepted at about one a turn, the last 4.6 s after the kernel had
finished its handshake (docs/performance-journal.md, "Accepting while busy"). Python's own asyncio
loop accepts up to a hundred connections a poll.

An `Acceptor` watches the socket itself (``add_reader``) and, each time it is readable,
accepts until the kernel's queue is empty or `MAX_PER_TURN` connections were taken; each
socket then goes to the loop's ``connect_accepted_socket`` with a protocol from the factory,
exactly as the loop's own server would have made it. A lone connection costs one ``accept``
that fails with ``EAGAIN`` after it, as it did before libuv's change.

When the process runs out of descriptors (``EMFILE``, ``ENFILE``) or kernel memory, or
``accept`` fails in any other way that is not one connection's own, the acceptor stops
watching for `RETRY_S` and says so in the log, rather than spinning on a socket that stays
readable: the connections wait in the listen backlog meanwhile, where the kernel bounds
them. A connection that failed between the handshake and ``accept`` (reset, refused by a
filter) is skipped. `AcceptorMetrics` reports each listener's counts on ``/metrics``.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import ssl
from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["MAX_PER_TURN", "RETRY_S", "Acceptor", "AcceptorMetrics"]

log = logging.getLogger("airlane.runtime.acceptor")

MAX_PER_TURN = 128
"""Connections accepted per readiness at most, so that one poll cannot hold the loop long
(each is an ``accept`` and a task to hand it over; the requests the connections then make
are admitted separately, `airlane.runtime.admission`)."""
RETRY_S = 0.1
"""How long the acceptor stops watching after ``accept`` failed for want of descriptors or
memory, or for a reason that is not one connection's."""

# Errors that belong to the one connection being accepted; the next may well succeed.
_ONE_CONNECTION = frozenset({errno.ECONNABORTED, errno.EPROTO, errno.EPERM})


class Acceptor:
    """Accepts connections on a bound, listening socket for ``protocol_factory``'s protocols.

    Closing it (`close`, then `wait_closed`) stops accepting; connections already accepted
    are left to their protocols. The methods mirror `asyncio.Server`'s, so a server that
    keeps a list of those can keep an acceptor in it.
    """

    def __init__(
        self,
        sock: socket.socket,
        protocol_factory: Callable[[], asyncio.Protocol],
        *,
        max_per_turn: int = MAX_PER_TURN,
        tls: Callable[[], ssl.SSLContext] | None = None,
        handshake_timeout_s: float = 10.0,
        on_refused: Callable[[str | None, ssl.SSLError], None] | None = None,
    ) -> None:
        if max_per_turn < 1:
            raise ValueError(f"max_per_turn must be >= 1, not {max_per_turn}")
        self.sock = sock
        self.protocol_factory = protocol_factory
        self.max_per_turn = max_per_turn
        self.tls = tls
        """The TLS context for a connection accepted now (asked per connection, so that
        reloaded certificates apply to the next one); None: plain TCP."""
        self.handshake_timeout_s = handshake_timeout_s
        self.on_refused = on_refused
        """Told of every handshake the TLS layer refused (the client's address and why): a
        missing or untrusted certificate, a client that is not TLS. Not of one that stalled or
        hung up, which says nothing about who it is."""
        self.accepted = 0
        """Connections accepted so far."""
        self.handshakes_failed = 0
        """TLS handshakes that failed (no or a bad client certificate, not TLS at all...)."""
        self.pauses = 0
        """Times accepting stopped for `RETRY_S` (out of descriptors or memory, or another
        failure of ``accept`` that is not one connection's)."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._retry: asyncio.TimerHandle | None = None
        # Accepted sockets being handed to the loop, and those whose hand-over has not begun
        # (a task cancelled before its first step never runs, so `close` closes those).
        self._handing_over: set[asyncio.Task[None]] = set()
        self._not_begun: set[socket.socket] = set()
        self._closed = False
        self._short = False  # out of descriptors since the last accept (said once)

    def start(self) -> None:
        """Start accepting on the running loop."""
        if self._loop is not None or self._closed:
            raise RuntimeError("an acceptor starts once")
        self._loop = asyncio.get_running_loop()
        self.sock.setblocking(False)
        self._watch()

    def close(self) -> None:
        """Stop accepting (the socket itself stays open: its owner closes it)."""
        if self._closed:
            return
        self._closed = True
        self._unwatch()
        for task in self._handing_over:
            task.cancel()
        for conn in self._not_begun:
            conn.close()
        self._not_begun.clear()

    async def wait_closed(self) -> None:
        """Wait until the connections accepted before `close` have been handed over."""
        if self._handing_over:
            await asyncio.gather(*self._handing_over, return_exceptions=True)

    def is_serving(self) -> bool:
        """Whether it accepts connections (started, not closed)."""
        return self._loop is not None and not self._closed

    def _watch(self) -> None:
        assert self._loop is not None
        self._retry = None
        if not self._closed:
            self._loop.add_reader(self.sock.fileno(), self._on_readable)

    def _unwatch(self) -> None:
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        elif self._loop is not None:
            self._loop.remove_reader(self.sock.fileno())

    def _on_readable(self) -> None:
        accept = self.sock.accept
        for _ in range(self.max_per_turn):
            try:
                conn, address = accept()
            except (BlockingIOError, InterruptedError):
                return  # the queue is empty
            except OSError as exc:
                if exc.errno in _ONE_CONNECTION:
                    continue  # that connection failed before it was accepted
                # Out of descriptors or memory, or the socket itself is wrong: calling again
                # at once would fail the same way.
                self._pause(exc)
                return
            self.accepted += 1
            self._short = False
            self._begin(conn, address, self.protocol_factory, self.tls)

    def adopt(self, conn: socket.socket, protocol_factory: Callable[[], asyncio.Protocol]) -> None:
        """Serve ``conn``, a plain connection another process accepted and handed over
        (`airlane.runtime.handoff`), with a protocol from ``protocol_factory``, as if this
        acceptor had accepted it."""
        if self._loop is None or self._closed:
            conn.close()
            return
        self._begin(conn, None, protocol_factory, None)

    def _begin(
        self,
        conn: socket.socket,
        address: object,
        protocol_factory: Callable[[], asyncio.Protocol],
        tls: Callable[[], ssl.SSLContext] | None,
    ) -> None:
        assert self._loop is not None
        self._not_begun.add(conn)
        task = self._loop.create_task(self._hand_over(conn, address, protocol_factory, tls))
        self._handing_over.add(task)
        task.add_done_callback(self._handed_over)

    async def _hand_over(
        self,
        conn: socket.socket,
        address: object,
        protocol_factory: Callable[[], asyncio.Protocol],
        tls: Callable[[], ssl.SSLContext] | None,
    ) -> None:
        self._not_begun.discard(conn)
        loop = asyncio.get_running_loop()
        try:
            # The transport and the protocol are made at once; this waits for connection_made.
            if tls is None:
                await loop.connect_accepted_socket(protocol_factory, conn)
            else:
                await loop.connect_accepted_socket(
                    protocol_factory,
                    conn,
                    ssl=tls(),
                    ssl_handshake_timeout=self.handshake_timeout_s,
                )
        except (ssl.SSLError, ConnectionError, TimeoutError) as exc:
            # A client that is not TLS, shows no or an untrusted certificate, or hangs up:
            # the handshake is refused; theirs to fix, not a failure of this server's.
            if isinstance(exc, ssl.SSLError) and self.on_refused is not None:
                self.on_refused(_host_of(address), exc)
            conn.close()
            self.handshakes_failed += 1
            log.debug("TLS handshake refused: %s", exc)
        except BaseException:
            # Closes the socket if no transport took it (the factory failed); a transport
            # that did has detached it on closing, which makes this a no-op.
            conn.close()
            raise

    def _handed_over(self, task: asyncio.Task[None]) -> None:
        self._handing_over.discard(task)
        if not task.cancelled() and (exc := task.exception()) is not None:
            log.warning("could not set up an accepted connection: %s", exc)

    def _pause(self, exc: OSError) -> None:
        assert self._loop is not None
        self.pauses += 1
        if not self._short:  # once until a connection gets through again, not every RETRY_S
            self._short = True
            log.warning(
                "cannot accept connections (%s); they wait in the listen queue, retried "
                "every %.1f s",
                exc.strerror or exc,
                RETRY_S,
            )
        self._loop.remove_reader(self.sock.fileno())
        self._retry = self._loop.call_later(RETRY_S, self._watch)


class AcceptorMetrics(Collector):
    """The ``/metrics`` families of a process's acceptors, labelled by listener name:
    ``airlane_accepted_connections_total`` and ``airlane_accept_pauses_total`` (each a stop
    of `RETRY_S`, mostly for want of descriptors)."""

    def __init__(self) -> None:
        self._acceptors: dict[str, Acceptor] = {}

    def watch(self, listener: str, acceptor: Acceptor) -> None:
        """Report ``acceptor``'s counts as ``listener``'s (replacing an earlier one)."""
        self._acceptors[listener] = acceptor

    def collect(self) -> Iterator[Metric]:
        """The two families, one sample per listener."""
        accepted = CounterMetricFamily(
            "airlane_accepted_connections",
            "Connections accepted, by listener",
            labels=["listener"],
        )
        pauses = CounterMetricFamily(
            "airlane_accept_pauses",
            "Times accepting stopped for a while because accept failed (out of descriptors "
            "or memory), by listener",
            labels=["listener"],
        )
        for listener, acceptor in self._acceptors.items():
            accepted.add_metric([listener], acceptor.accepted)
            pauses.add_metric([listener], acceptor.pauses)
        yield accepted
        yield pauses


def _host_of(address: object) -> str | None:
    """The host of an address ``accept`` returned (a tuple for IP; a path for Unix)."""
    return str(address[0]) if isinstance(address, tuple) and address else None
