"""`Handoff`: sibling processes on one machine pass accepted connections to each other.

The workers of ``airlane serve --workers`` share one port: the kernel gives each new
connection to any of them. A stream, though, is produced by one process, and a reader that
lands on another costs the machine the events twice over (the broker carries them to that
process, which decodes, holds and encodes them again). A worker that sees a request it would
rather leave to the stream's own process hands the connection over instead: the socket
itself (``SCM_RIGHTS``) and the request read on it (its head, and its body where it has a
small one), which the sibling reads as if the client had just sent it. The client sees one
connection and one response, from the sibling.

Each process listens on a Unix ``SOCK_SEQPACKET`` socket, ``<directory>/<name>.sock``, named
after itself, and keeps one link to each sibling it has handed to (at most `MAX_LINKS`); a
message is one connection (the request, at most `MAX_REQUEST_BYTES`, with one descriptor).
Sending never waits: a sibling that is gone (no socket, nobody listening, the link broken)
or whose queue is full refuses, and the caller serves the request itself. Receiving takes at
most `MAX_PER_TURN` messages per link and readiness; anything malformed (no descriptor,
several, a cut message, not a stream socket) is closed and dropped. The directory is the
supervisor's (mode 0700), so only the same user's processes can hand connections in.

(Datagram sockets would need no links, but Linux queues at most ``net.unix.max_dgram_qlen``
datagrams for a receiver, 10 by default: a burst of readers overflowed it at once.)
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import logging
import os
import resource
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from airlane.runtime.acceptor import RETRY_S
from airlane.runtime.loadboard import LoadBoard

__all__ = [
    "MAX_LINKS",
    "MAX_PER_TURN",
    "MAX_REQUEST_BYTES",
    "Handoff",
    "HandoffMetrics",
    "handoff_path",
]

log = logging.getLogger("airlane.runtime.handoff")

MAX_REQUEST_BYTES = 96 * 1024
"""The largest request (head and body) a connection is handed over with (a bigger one is
served where it arrived)."""
MAX_PER_TURN = 64
"""Connections taken in per link and readiness at most (each is a transport to set up)."""
MAX_LINKS = 256
"""Links kept to siblings, and taken from them, at most (``--workers`` allows 256)."""
_SUN_PATH_MAX = 107
"""Bytes a Unix socket's path may have on Linux (``sun_path`` less its terminator)."""


def handoff_path(directory: Path, name: str) -> Path:
    """Where the process ``name`` takes connections in."""
    return directory / f"{name}.sock"


class Handoff:
    """One process's end (see the module docstring): `start` takes connections in, `send`
    hands one over, `close` stops both and removes the socket file."""

    def __init__(self, directory: Path, name: str) -> None:
        self.directory = directory
        self.name = name
        """This process's name among its siblings (its socket's)."""
        self.path = handoff_path(directory, name)
        self.sent = 0
        """Connections handed to a sibling."""
        self.received = 0
        """Connections taken over from a sibling."""
        self.refused = 0
        """Hand-overs that did not happen (the sibling gone, busy or holding too many
        connections, or the request too large): served here."""
        self.lost = 0
        """Connections handed in that this process had no descriptor for (the kernel
        closed them): a board keeps siblings from sending where there is no room."""
        self.board: LoadBoard | None = None
        """Where this process and its siblings compare their loads, so that a server
        places new streams on the least loaded (None: they start where they arrive). Its
        owner starts and closes it."""
        self._listener: socket.socket | None = None
        self._links: dict[str, socket.socket] = {}
        """Open links to siblings, by name."""
        self._incoming: set[socket.socket] = set()
        """Links siblings opened to this process."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._on_connection: Callable[[socket.socket, bytes], None] | None = None
        self._retry: asyncio.TimerHandle | None = None
        """Watching for links again after a failed accept."""
        self._buffer = bytearray(MAX_REQUEST_BYTES)
        """Where each message is read (one at a time, on the loop)."""

    @property
    def usable(self) -> bool:
        """Whether the socket path fits (a long temporary directory may not)."""
        return len(os.fsencode(self.path)) <= _SUN_PATH_MAX

    def start(self, on_connection: Callable[[socket.socket, bytes], None]) -> None:
        """Listen and take connections in on the running loop: ``on_connection(sock,
        request)`` for each (it owns ``sock`` from then on)."""
        if self._listener is not None:
            raise RuntimeError("a handoff starts once")
        self._loop = asyncio.get_running_loop()
        self._on_connection = on_connection
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()  # an earlier process of this name's (names carry a run)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            listener.setblocking(False)
            listener.bind(os.fspath(self.path))
            listener.listen(MAX_LINKS)
        except OSError:
            listener.close()
            raise
        self._listener = listener
        self._loop.add_reader(listener.fileno(), self._on_link)

    def _watch_links(self) -> None:
        self._retry = None
        if self._listener is not None and self._loop is not None:
            self._loop.add_reader(self._listener.fileno(), self._on_link)

    def send(self, sibling: str, fd: int, request: bytes) -> bool:
        """Hand the connection ``fd`` (still this process's to close) to ``sibling`` with the
        ``request`` read on it; False, without a trace on the connection, where it cannot be."""
        if self._listener is None or sibling == self.name:
            return False
        if len(request) > MAX_REQUEST_BYTES:
            self.refused += 1
            return False
        link = self._links.get(sibling)
        try:
            if link is None:
                link = self._link(sibling)
            # (`socket.send_fds` would do, but drops its address argument in 3.11.)
            rights = array.array("i", [fd])
            link.sendmsg([request], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, rights)])
        except OSError as exc:  # gone (no file, nobody listening, link broken) or busy
            self.refused += 1
            if link is not None and not isinstance(exc, BlockingIOError):
                self._links.pop(sibling, None)
                link.close()
            log.debug("could not hand a connection to %s: %s", sibling, exc)
            return False
        self.sent += 1
        return True

    def close(self) -> None:
        """Stop taking connections in and remove the socket; connections handed over and
        not yet taken are closed (their clients see the connection end)."""
        listener, self._listener = self._listener, None
        if listener is None:
            return
        loop = self._loop
        assert loop is not None
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        loop.remove_reader(listener.fileno())
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        listener.close()
        for link in self._links.values():
            link.close()
        self._links.clear()
        for link in self._incoming:
            loop.remove_reader(link.fileno())
            while (taken := _receive(link, self._buffer)) not in (None, False):
                if isinstance(taken, tuple):
                    taken[0].close()
            link.close()
        self._incoming.clear()

    def _link(self, sibling: str) -> socket.socket:
        if len(self._links) >= MAX_LINKS:
            raise BlockingIOError(f"{MAX_LINKS} links are open")
        link = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            link.setblocking(False)
            link.connect(os.fspath(handoff_path(self.directory, sibling)))
        except OSError:
            link.close()
            raise
        self._links[sibling] = link
        return link

    def _on_link(self) -> None:
        """A sibling opens a link."""
        listener, loop = self._listener, self._loop
        assert listener is not None and loop is not None
        while True:
            try:
                link, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                # Out of descriptors, mostly: the link waits in the listen queue, taken
                # when this process has room again (watched again after a pause, not in a
                # loop that the queued link would keep readable).
                log.warning("handoff socket %s: %s; retried in %.1f s", self.path, exc, RETRY_S)
                loop.remove_reader(listener.fileno())
                self._retry = loop.call_later(RETRY_S, self._watch_links)
                return
            if len(self._incoming) >= MAX_LINKS:
                link.close()
                continue
            link.setblocking(False)
            self._incoming.add(link)
            loop.add_reader(link.fileno(), self._on_readable, link)

    def _on_readable(self, link: socket.socket) -> None:
        callback = self._on_connection
        assert callback is not None
        for _ in range(MAX_PER_TURN):
            taken = _receive(link, self._buffer)
            if taken is None:
                return
            if taken is False:  # the sibling closed its end (or stopped)
                assert self._loop is not None
                self._loop.remove_reader(link.fileno())
                self._incoming.discard(link)
                link.close()
                return
            if isinstance(taken, tuple):
                self.received += 1
                callback(*taken)
            elif taken is _LOST:
                self.lost += 1
                log.warning(
                    "a connection handed over was lost: no descriptor left for it "
                    "(RLIMIT_NOFILE %d)",
                    resource.getrlimit(resource.RLIMIT_NOFILE)[0],
                )


_LOST = "lost"
"""What `_receive` returns for a connection whose descriptor could not be taken in."""


_RIGHTS_SPACE = socket.CMSG_SPACE(2 * array.array("i").itemsize)
"""Room for two descriptors: one more than a message may carry, to see that it had more."""


def _receive(
    link: socket.socket, buffer: bytearray
) -> tuple[socket.socket, bytes] | bool | str | None:
    """The next connection handed over on ``link``, with its request (read into
    ``buffer``, `MAX_REQUEST_BYTES` long, then copied out: a fresh buffer of that size per
    connection would churn the allocator); True for a message dropped (malformed: what it
    carried is closed), `_LOST` for a connection this process had no descriptor for (the
    kernel closed it), False once the link has ended, None while nothing waits."""
    try:
        size, ancillary, flags, _ = link.recvmsg_into([buffer], _RIGHTS_SPACE)
    except (BlockingIOError, InterruptedError):
        return None
    except OSError as exc:
        log.debug("handoff link: %s", exc)
        return False
    request = bytes(buffer[:size])
    fds = _descriptors(ancillary)
    if not request and not fds:
        return False  # the sibling closed its end
    if flags & socket.MSG_CTRUNC and not fds and request:
        return _LOST  # the descriptor table is full: Linux drops what does not fit
    if flags & (socket.MSG_TRUNC | socket.MSG_CTRUNC) or len(fds) != 1 or not request:
        for fd in fds:
            os.close(fd)
        return True
    try:
        conn = socket.socket(fileno=fds[0])
    except OSError:  # not a socket at all
        os.close(fds[0])
        return True
    if conn.type != socket.SOCK_STREAM:
        conn.close()
        return True
    conn.setblocking(False)
    return conn, request


def _descriptors(ancillary: list[tuple[int, int, bytes]]) -> list[int]:
    """The descriptors an ``SCM_RIGHTS`` message brought (whole ones: a cut one is none)."""
    fds = array.array("i")
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
    return list(fds)


class HandoffMetrics(Collector):
    """``airlane_handoff_connections_total``, by ``direction``: ``sent`` (handed to a
    sibling), ``received`` (taken over from one), ``refused`` (the sibling gone, busy or
    holding too many connections, or the request too large: served where it arrived),
    ``lost`` (handed in with no descriptor left for it: closed)."""

    def __init__(self, handoff: Handoff) -> None:
        self.handoff = handoff

    def collect(self) -> Iterator[Metric]:
        """The one family."""
        family = CounterMetricFamily(
            "airlane_handoff_connections",
            "Connections passed between the processes of one airlane serve --workers",
            labels=["direction"],
        )
        family.add_metric(["sent"], self.handoff.sent)
        family.add_metric(["received"], self.handoff.received)
        family.add_metric(["refused"], self.handoff.refused)
        family.add_metric(["lost"], self.handoff.lost)
        yield family
