"""Lanes on a shared UDP socket: each datagram marked with its connection's lane.

A TCP connection has a socket of its own, so `airlane.runtime.socket_lanes` marks the socket.
A QUIC server answers every connection from one UDP socket: marking the socket would mark all
of them. So a QUIC connection whose client declared a lane sends each of its datagrams with
the lane's marks as ancillary data of ``sendmsg``, which Linux takes per packet:

- ``IP_TOS`` (and ``IPV6_TCLASS`` on an IPv6 socket, whose peers may be IPv4-mapped): the DSCP
  code point, which the ``airlane shaping`` classifier's DSCP map sorts into the lane's band;
- ``SO_PRIORITY``: the packet priority the host's qdiscs read (Linux 6.13 and later take it
  per packet; an older kernel refuses it once, and the connection goes on with DSCP alone).

A datagram the socket cannot take now (its buffer is full) goes to the transport's own queue
unmarked rather than being dropped: QUIC would resend a drop, a round trip later.

**Segmentation offload.** Inside `batch`, what the connection sends is held and then sent in
runs: consecutive datagrams to one address, all the same size but the last (which may be
shorter), go out in one ``sendmsg`` with ``UDP_SEGMENT`` (Linux 4.18 and later), and the kernel
cuts them into datagrams. A QUIC sender writes its packets full-size one after the other, so a
run is up to 64 datagrams, one system call where there were 64: measured on a 50 MB HTTP/3
download, that system call per datagram was most of the gateway's CPU. A kernel or device that
refuses it (``EINVAL``, ``EIO``: no checksum offload) turns it off for the connection, and the
datagrams go one by one.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
import struct
from collections.abc import Callable, Iterator
from typing import Any

from airlane.core import Lane
from airlane.runtime.socket_lanes import LanesConfig

__all__ = ["DatagramLane"]

log = logging.getLogger("airlane.lanes")

_Ancillary = list[tuple[int, int, bytes]]

UDP_SEGMENT = getattr(socket, "UDP_SEGMENT", 103)
"""The segment size of a ``sendmsg`` (linux/udp.h; Python's socket module lacks the name)."""
MAX_SEGMENTS = 64
"""Datagrams in one segmented send at most (the kernel's ``UDP_MAX_SEGMENTS``)."""
MAX_SEGMENTED_BYTES = 65_000
"""Bytes in one segmented send at most (one IP packet's worth, headers aside)."""
_NO_OFFLOAD = frozenset({errno.EINVAL, errno.EIO, errno.ENOPROTOOPT, errno.EOPNOTSUPP})


class DatagramLane:
    """The lane of one connection on a shared UDP socket (see the module docstring): call it
    with a `Lane` to mark what the connection sends from now on, send through `sendto`."""

    __slots__ = (
        "_ancillary",
        "_config",
        "_held",
        "_priority_ok",
        "_queued",
        "_sock",
        "_transport",
        "lane",
        "on_too_big",
        "segmenting",
    )

    def __init__(
        self,
        transport: asyncio.DatagramTransport,
        config: LanesConfig,
        sock: socket.socket | None,
    ) -> None:
        self._transport = transport
        self._config = config
        self._sock = sock
        """The transport's socket, or a duplicate of it, to ``sendmsg`` on (a transport hands
        out a wrapper without it); None: datagrams go out unmarked."""
        # Bytes waiting in the transport's own queue (asyncio's and uvloop's tell; typeshed's
        # DatagramTransport does not declare it).
        self._queued: Callable[[], int] = getattr(transport, "get_write_buffer_size", lambda: 0)
        self._ancillary: _Ancillary = []
        self._priority_ok = True
        self._held: list[tuple[bytes, Any]] | None = None
        self.segmenting = sock is not None
        self.on_too_big: Callable[[], None] | None = None
        """Called when the kernel refuses a datagram as larger than the path MTU it knows
        (``EMSGSIZE``; the datagram is dropped). None: such an error goes to the transport's
        protocol."""
        """Whether `batch` sends runs of datagrams with ``UDP_SEGMENT`` (off once refused)."""
        self.lane: Lane | None = None
        """The lane declared last (None: none, datagrams go out as the socket sends them)."""

    def __call__(self, lane: Lane) -> str:
        """Mark the connection's datagrams for ``lane`` from now on; what is set, as
        ``"dscp=40 priority=6"`` (empty when ``[lanes]`` is off or the socket cannot)."""
        self.lane = lane
        config, sock = self._config, self._sock
        if not config.enabled or sock is None:
            self._ancillary = []
            return ""
        tos = struct.pack("i", config.dscp(lane) << 2)
        ancillary = [(socket.IPPROTO_IP, socket.IP_TOS, tos)]
        if sock.family == socket.AF_INET6:
            ancillary.append((socket.IPPROTO_IPV6, socket.IPV6_TCLASS, tos))
        done = f"dscp={config.dscp(lane)}"
        if self._priority_ok:
            priority = struct.pack("i", config.priority(lane))
            ancillary.append((socket.SOL_SOCKET, socket.SO_PRIORITY, priority))
            done = f"{done} priority={config.priority(lane)}"
        self._ancillary = ancillary
        return done

    def release(self) -> None:
        """What declared the lane ended (a WebTransport session): the connection keeps its
        lane until it closes, since its other requests may have declared the same."""

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        """The transport's (this stands in for it where a protocol only sends)."""
        return self._transport.get_extra_info(name, default)

    @contextlib.contextmanager
    def bulk_while(self) -> Iterator[str]:
        """Mark the connection bulk for the ``with`` block, then give it back its lane."""
        before = self.lane
        try:
            yield self(Lane.BULK)
        finally:
            if before is None:
                self.lane = None
                self._ancillary = []
            else:
                self(before)

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Hold what is sent in the ``with`` block; send it at its end, in segmented runs (see
        the module docstring)."""
        if self._held is not None:  # nested: the outer block sends
            yield
            return
        held: list[tuple[bytes, Any]] = []
        self._held = held
        try:
            yield
        finally:
            self._held = None
            self._send_runs(held)

    def _send_runs(self, held: list[tuple[bytes, Any]]) -> None:
        sock = self._sock
        count = len(held)
        index = 0
        while index < count:
            data, addr = held[index]
            if sock is None or not self.segmenting or self._queued():
                self._send_one(data, addr)
                index += 1
                continue
            size = len(data)
            end, total = index + 1, size
            while end < count and end - index < MAX_SEGMENTS:
                more, to = held[end]
                if to != addr or len(more) > size or total + len(more) > MAX_SEGMENTED_BYTES:
                    break
                total += len(more)
                end += 1
                if len(more) < size:  # only the last of a run may be shorter
                    break
            if end - index == 1:
                self._send_one(data, addr)
                index = end
                continue
            segment = (socket.SOL_UDP, UDP_SEGMENT, struct.pack("H", size))
            run = b"".join([datagram for datagram, _ in held[index:end]])
            try:
                sock.sendmsg([run], [*self._ancillary, segment], 0, addr)
            except (BlockingIOError, InterruptedError):
                # The socket's buffer is full: the rest waits in the transport's queue.
                for datagram, to in held[index:]:
                    self._transport.sendto(datagram, to)
                return
            except OSError as exc:
                if exc.errno == errno.EMSGSIZE and self.on_too_big is not None:
                    self.on_too_big()  # the run is dropped: the connection sends it again
                    index = end
                    continue
                if exc.errno in (errno.EINVAL, errno.EPERM) and self._refused(exc):
                    continue  # the priority was the refused mark: the same run without it
                if exc.errno in _NO_OFFLOAD:
                    self.segmenting = False
                    log.debug("UDP segmentation offload refused (%s): datagrams one by one", exc)
                # One by one, through the path that reports a path's error to the protocol.
                for datagram, to in held[index:end]:
                    self._send_one(datagram, to)
            index = end

    def sendto(self, data: bytes, addr: Any) -> None:
        """Send one datagram to ``addr``, with the lane's marks when it has one (inside
        `batch`: at the end of the block)."""
        held = self._held
        if held is not None:
            held.append((data, addr))
            return
        self._send_one(data, addr)

    def _send_one(self, data: bytes, addr: Any) -> None:
        sock = self._sock
        direct = self._ancillary or self.on_too_big is not None
        if not direct or sock is None or self._queued():
            # No marks, or datagrams already wait in the transport's queue: behind them.
            self._transport.sendto(data, addr)
            return
        for _ in range(2):  # again once without the priority, if the kernel refused it
            try:
                sock.sendmsg([data], self._ancillary, 0, addr)
                return
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                if exc.errno == errno.EMSGSIZE and self.on_too_big is not None:
                    self.on_too_big()  # dropped: the connection sends it again, smaller
                    return
                if exc.errno not in (errno.EINVAL, errno.EPERM) or not self._refused(exc):
                    break
        # Through the transport: it queues, or reports a path's error to the protocol.
        self._transport.sendto(data, addr)

    def _refused(self, exc: OSError) -> bool:
        """The kernel refused a mark (EINVAL: an old kernel without per-packet priority;
        EPERM: a priority this process may not set): drop the priority, go on with DSCP.
        False when there was no priority to drop."""
        if not self._priority_ok or self.lane is None:
            return False
        self._priority_ok = False
        log.info("lanes: per-datagram SO_PRIORITY refused (%s); marking DSCP only", exc)
        self(self.lane)
        return True
