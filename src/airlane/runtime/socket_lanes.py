"""Lanes on the wire: a socket marked with the lane of what it carries.

Inside a connection Airlane sends control before interactive before bulk. Once bytes leave the
process that order is gone: a cancel queued behind megabytes of a model update in the socket
buffer, the qdisc or the NIC waits for all of them. So a client that keeps its signalling on a
connection of its own (an AIRC ``LANE`` message, the WebSocket multiplex's ``lane`` op) gets
that connection's socket marked, on the gateway's side:

- ``IP_TOS`` / ``IPV6_TCLASS``: the DSCP code point, which routers and the sending host's qdiscs
  may honour (RFC 4594's classes: signalling CS5, low-latency data AF21, high-throughput data
  AF11);
- ``SO_PRIORITY``: the packet priority the host's own qdiscs read (``pfifo_fast``'s bands,
  HTB's class selection). Values 0-6 need no privilege: control 6 (``TC_PRIO_INTERACTIVE``,
  band 0), interactive 0, bulk 2 (``TC_PRIO_BULK``, band 2);
- ``TCP_NOTSENT_LOWAT`` on bulk sockets: the kernel takes bulk bytes only while less than this
  is unsent, so they wait in the process (where lanes order them and the transport's flow
  control bounds them) instead of in the kernel.

Where ``airlane shaping`` has attached its classifier, the socket is also put in the
classifier's flow map (`airlane.runtime.lane_flows`), so its packets are sorted into the lane's
band on the interface whatever the socket's own marks.

Nothing here needs privileges; what the kernel refuses is reported, never raised.
"""

from __future__ import annotations

import contextlib
import logging
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol, overload

from airlane.core import Lane
from airlane.runtime.lane_flows import LaneFlows, socket_cookie

__all__ = [
    "DEFAULT_BPF_DIR",
    "TCP_NOTSENT_LOWAT",
    "LaneMarker",
    "LanesConfig",
    "MarkableSocket",
    "SocketLane",
    "bulk_while",
    "lane_marker",
    "mark_socket",
    "socket_marks",
]

log = logging.getLogger("airlane.lanes")

TCP_NOTSENT_LOWAT = getattr(socket, "TCP_NOTSENT_LOWAT", 25)
"""Linux's option number (Python 3.11's `socket` does not name it)."""

DEFAULT_BPF_DIR = "/run/airlane/bpf"
"""Where ``airlane shaping`` mounts its BPF filesystem and pins the classifier's maps."""


class MarkableSocket(Protocol):
    """What marking needs of a socket: a `socket.socket`, or the wrapper asyncio and uvloop
    hand out as a transport's ``socket`` extra."""

    @property
    def family(self) -> int: ...

    @property
    def type(self) -> int: ...

    def setsockopt(self, level: int, option: int, value: int, /) -> None: ...

    @overload
    def getsockopt(self, level: int, option: int, /) -> int: ...

    @overload
    def getsockopt(self, level: int, option: int, buflen: int, /) -> bytes: ...


_LANES = {"control": Lane.CONTROL, "interactive": Lane.INTERACTIVE, "bulk": Lane.BULK}


@dataclass(frozen=True, slots=True)
class LanesConfig:
    """How connections with a declared lane are marked (``[lanes]``, docs/lanes.md)."""

    enabled: bool = True
    """Mark sockets whose lane a client declares; off: the declaration is answered, nothing
    is marked."""
    control_dscp: int = 40
    """DSCP of the control lane (CS5, RFC 4594's signalling class)."""
    interactive_dscp: int = 18
    """DSCP of the interactive lane (AF21, low-latency data)."""
    bulk_dscp: int = 10
    """DSCP of the bulk lane (AF11, high-throughput data)."""
    control_priority: int = 6
    """``SO_PRIORITY`` of the control lane (6: ``pfifo_fast`` band 0, no privilege needed)."""
    interactive_priority: int = 0
    """``SO_PRIORITY`` of the interactive lane."""
    bulk_priority: int = 2
    """``SO_PRIORITY`` of the bulk lane (``TC_PRIO_BULK``: ``pfifo_fast`` band 2)."""
    bulk_notsent_lowat: int = 131_072
    """``TCP_NOTSENT_LOWAT`` of bulk sockets: unsent bytes the kernel holds at most; 0 leaves
    the system's default (``net.ipv4.tcp_notsent_lowat``)."""
    bulk_response_bytes: int = 1 << 20
    """An artifact download (a model update) at least this long goes out in the bulk lane:
    its connection is marked bulk while it is sent, then given its marks back; 0: never."""
    classifier: bool = True
    """Put sockets with a declared lane in the ``airlane shaping`` classifier's flow map
    when it is attached (and this process may open it)."""
    bpf_dir: str = DEFAULT_BPF_DIR
    """The BPF filesystem the classifier's maps are pinned under."""

    def __post_init__(self) -> None:
        for name in ("control_dscp", "interactive_dscp", "bulk_dscp"):
            if not 0 <= getattr(self, name) <= 63:
                raise ValueError(f"[lanes] {name} is a DSCP code point, 0-63")
        for name in ("control_priority", "interactive_priority", "bulk_priority"):
            if not 0 <= getattr(self, name) <= 0xFFFFFFFF:
                raise ValueError(f"[lanes] {name} must be 0 or more")
        if self.bulk_notsent_lowat < 0 or self.bulk_response_bytes < 0:
            raise ValueError("[lanes] bulk_notsent_lowat and bulk_response_bytes must be 0 or more")

    def dscp(self, lane: Lane) -> int:
        """The DSCP code point of ``lane``."""
        return (self.control_dscp, self.interactive_dscp, self.bulk_dscp)[lane]

    def priority(self, lane: Lane) -> int:
        """The ``SO_PRIORITY`` of ``lane``."""
        return (self.control_priority, self.interactive_priority, self.bulk_priority)[lane]

    @staticmethod
    def lane(name: str) -> Lane:
        """``control``, ``interactive`` or ``bulk``; ValueError for anything else."""
        try:
            return _LANES[name]
        except KeyError:
            raise ValueError(f"lane must be control, interactive or bulk, not {name!r}") from None


class SocketLane:
    """Marks one connection's socket for the lane its client declares, and takes it out of
    the classifier's flow map when the connection ends (`release`)."""

    __slots__ = ("_config", "_cookie", "_flows", "_sock")

    def __init__(
        self, sock: MarkableSocket, config: LanesConfig, flows: LaneFlows | None = None
    ) -> None:
        self._sock = sock
        self._config = config
        self._flows = flows
        self._cookie: int | None = None

    def __call__(self, lane: Lane) -> str:
        """Mark the socket for ``lane``; what was set (see `mark_socket`), plus
        ``classifier`` when the shaping classifier took the socket too."""
        marks = mark_socket(self._sock, lane, self._config)
        flows = self._flows
        if flows is None or not self._config.enabled or not self._config.classifier:
            return marks
        try:
            cookie = self._cookie or socket_cookie(self._sock)
        except OSError:
            return marks  # not a socket with a cookie (an old kernel)
        if flows.add(cookie, lane):
            self._cookie = cookie
            marks = f"{marks} classifier".strip()
        return marks

    def release(self) -> None:
        """The connection ended: forget its socket in the classifier's map."""
        if self._flows is not None and self._cookie is not None:
            self._flows.remove(self._cookie)
            self._cookie = None


class LaneMarker(Protocol):
    """What marks one connection for the lane its client declares, as the transports take it:
    `SocketLane` for a connection with a socket of its own, or
    `airlane.runtime.datagram_lanes.DatagramLane` for a QUIC connection."""

    def __call__(self, lane: Lane, /) -> str:
        """Mark the connection for ``lane``; what was set."""
        ...

    def release(self) -> None:
        """What declared the lane has ended."""
        ...


def lane_marker(
    sock: MarkableSocket | None, config: LanesConfig, flows: LaneFlows | None = None
) -> SocketLane | None:
    """A `SocketLane` for ``sock`` (None without a socket: a connection that is not TCP)."""
    if sock is None:
        return None
    return SocketLane(sock, config, flows)


def mark_socket(sock: MarkableSocket, lane: Lane, config: LanesConfig) -> str:
    """Mark ``sock`` (a connected TCP socket) for ``lane``; what was set, as
    ``"priority=6 dscp=40"`` (empty if nothing could be or ``config`` is off). A mark the
    kernel refuses is left out of the answer and logged at debug level."""
    if not config.enabled:
        return ""
    done = []
    tos = config.dscp(lane) << 2  # DSCP is the upper six bits of the TOS / traffic class byte
    # IP_TOS first: Linux also derives the socket's priority from the TOS it is given, which
    # SO_PRIORITY below then overrides.
    levels = [(socket.IPPROTO_IP, socket.IP_TOS)]
    if sock.family == socket.AF_INET6:
        # A dual-stack socket may carry IPv4 (mapped) or IPv6: mark both.
        levels.append((socket.IPPROTO_IPV6, socket.IPV6_TCLASS))
    dscp_set = False
    for level, option in levels:
        dscp_set |= _set(sock, level, option, tos)
    if dscp_set:
        done.append(f"dscp={config.dscp(lane)}")
    if _set(sock, socket.SOL_SOCKET, socket.SO_PRIORITY, config.priority(lane)):
        done.append(f"priority={config.priority(lane)}")
    # 0 gives the socket back the system's default (a lane changed from bulk to another).
    lowat = config.bulk_notsent_lowat if lane is Lane.BULK else 0
    stream = sock.type == socket.SOCK_STREAM
    if stream and _set(sock, socket.IPPROTO_TCP, TCP_NOTSENT_LOWAT, lowat) and lowat:
        done.append(f"notsent_lowat={lowat}")
    return " ".join(done)


@contextlib.contextmanager
def bulk_while(sock: MarkableSocket | None, config: LanesConfig) -> Iterator[str]:
    """Mark ``sock`` bulk for the ``with`` block (a long response the server knows is bulk,
    such as a model update), then give it back the marks it had; yields what was set."""
    if sock is None or not config.enabled:
        yield ""
        return
    before = _raw_marks(sock)
    try:
        yield mark_socket(sock, Lane.BULK, config)
    finally:
        for level, option, value in before:  # in order: the TOS resets the priority
            _set(sock, level, option, value)


def _raw_marks(sock: MarkableSocket) -> list[tuple[int, int, int]]:
    options = [(socket.IPPROTO_IP, socket.IP_TOS)]
    if sock.family == socket.AF_INET6:
        options.append((socket.IPPROTO_IPV6, socket.IPV6_TCLASS))
    options += [(socket.SOL_SOCKET, socket.SO_PRIORITY), (socket.IPPROTO_TCP, TCP_NOTSENT_LOWAT)]
    marks = []
    for level, option in options:
        try:
            marks.append((level, option, sock.getsockopt(level, option)))
        except (OSError, ValueError):  # as in `_set`
            continue
    return marks


def socket_marks(sock: MarkableSocket) -> dict[str, int]:
    """What ``sock`` is marked with now: ``dscp``, ``priority``, ``notsent_lowat`` (those the
    kernel tells)."""
    marks = {}
    level, option = (
        (socket.IPPROTO_IPV6, socket.IPV6_TCLASS)
        if sock.family == socket.AF_INET6
        else (socket.IPPROTO_IP, socket.IP_TOS)
    )
    for name, args in (
        ("dscp", (level, option)),
        ("priority", (socket.SOL_SOCKET, socket.SO_PRIORITY)),
        ("notsent_lowat", (socket.IPPROTO_TCP, TCP_NOTSENT_LOWAT)),
    ):
        try:
            value = sock.getsockopt(*args)
        except (OSError, ValueError):  # as in `_set`
            continue
        marks[name] = value >> 2 if name == "dscp" else value
    return marks


def _set(sock: MarkableSocket, level: int, option: int, value: int) -> bool:
    try:
        sock.setsockopt(level, option, value)
    except (OSError, ValueError) as exc:
        # EPERM: a priority above 6 without CAP_NET_ADMIN (or CAP_NET_RAW on newer kernels);
        # ENOPROTOOPT: not this family. ValueError: the connection closed meanwhile (uvloop's
        # stand-in socket then has the descriptor -1).
        log.debug("lanes: setsockopt(%d, %d, %d) refused: %s", level, option, value, exc)
        return False
    return True
