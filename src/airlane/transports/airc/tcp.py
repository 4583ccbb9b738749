"""AIRC over TCP: a listener of its own, one `AircSession` per accepted connection.

The protocol object is the thin asyncio adapter ARCHITECTURE.md asks for: bytes in go to the
session, the session's bytes go to the transport, and the transport's flow control
(``pause_writing`` / ``resume_writing``) reaches the session's pumps.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from typing import cast

from airlane.gateway import Gateway, ServerTls
from airlane.runtime.acceptor import Acceptor
from airlane.runtime.lane_flows import LaneFlows
from airlane.runtime.socket_lanes import LanesConfig, lane_marker
from airlane.transports.airc.config import AircServerConfig
from airlane.transports.airc.session import AircSession, RtcSignalling
from airlane.wire.airc import ErrorCode as GoAwayCode

__all__ = ["LISTEN_BACKLOG", "AircTcpServer"]

log = logging.getLogger("airlane.airc")

LISTEN_BACKLOG = 4096
"""Connections the kernel queues before the loop accepts them (as for the HTTP listener)."""
_LINGER_S = 2.0
"""After GOAWAY, how long input is still read (and dropped) before the socket closes: closing
with unread input makes the kernel send RST, which can destroy the GOAWAY before the peer
reads it."""


class _AircProtocol(asyncio.Protocol):
    """One TCP connection (a plain ``Protocol``: the decoder wants ``bytes``, which is what
    ``data_received`` hands over, with no read buffer kept per connection)."""

    def __init__(self, server: AircTcpServer) -> None:
        self._server = server
        self._transport: asyncio.Transport | None = None
        self._session: AircSession | None = None
        self._lingering: asyncio.TimerHandle | None = None

    # -- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self._transport = cast(asyncio.Transport, transport)
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        server = self._server
        address = transport.get_extra_info("peername")
        peer = None
        if server.tls is not None and (sslobj := transport.get_extra_info("ssl_object")):
            peer = server.tls.peer_identity(sslobj.getpeercert())
        self._session = AircSession(
            server.gateway,
            server.config,
            self,
            # No principal yet: AUTH names one, or the first request asks the gate with the
            # certificate alone (asking now would audit a refusal for every connection that
            # is about to send AUTH).
            principal=None,
            peer=peer,
            origin=address[0] if isinstance(address, tuple) else None,
            rtc=server.rtc,
            mark_lane=lane_marker(sock, server.lanes, server.lane_flows),
        )
        server.sessions.add(self._session)

    def data_received(self, data: bytes) -> None:
        if self._session is not None and self._lingering is None:
            self._session.data_received(data)

    def eof_received(self) -> bool:
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        if self._lingering is not None:
            self._lingering.cancel()
        session, self._session = self._session, None
        if session is not None:
            self._server.release(session)

    def pause_writing(self) -> None:
        if self._session is not None:
            self._session.pause_writing()

    def resume_writing(self) -> None:
        if self._session is not None:
            self._session.resume_writing()

    # -- Link -------------------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        """Queue ``data`` on the socket."""
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(data)

    def close(self, code: GoAwayCode, reason: str) -> None:
        """Close once the written bytes (the ``GOAWAY`` among them) are flushed: half-close
        at once, then read and drop input until the peer closes too or `_LINGER_S` passes."""
        transport = self._transport
        if transport is None or transport.is_closing() or self._lingering is not None:
            return
        if not transport.can_write_eof():
            transport.close()
            return
        transport.write_eof()
        loop = asyncio.get_running_loop()
        self._lingering = loop.call_later(_LINGER_S, transport.close)


class AircTcpServer:
    """The AIRC/TCP listener: start it on a bound socket, close it to end every session."""

    def __init__(
        self,
        gateway: Gateway,
        config: AircServerConfig | None = None,
        *,
        tls: ServerTls | None = None,
        rtc: RtcSignalling | None = None,
        lanes: LanesConfig | None = None,
        lane_flows: LaneFlows | None = None,
    ) -> None:
        self.gateway = gateway
        self.config = config or AircServerConfig()
        self.lanes = lanes or LanesConfig()
        """How a connection that declares its lane (``SET_LANE``) is marked."""
        self.lane_flows = lane_flows
        """The shaping classifier's flow map, if the composition root gave one."""
        self.tls = tls
        """TLS for every connection (with client certificates when it asks for them)."""
        self.rtc = rtc
        """WebRTC signalling for ``RTC_*`` messages (the HTTP app's peers), if any."""
        self.sessions: set[AircSession] = set()
        """Open sessions."""
        self._server: Acceptor | None = None
        self._closing: set[asyncio.Task[None]] = set()

    @property
    def acceptor(self) -> Acceptor:
        """What takes this server's connections (its counts: `Acceptor.accepted`...)."""
        assert self._server is not None, "not started"
        return self._server

    @property
    def address(self) -> tuple[str, int]:
        """The bound host and port."""
        assert self._server is not None, "not started"
        host, port = self._server.sock.getsockname()[:2]
        return host, port

    @property
    def url(self) -> str:
        """``tcp://host:port`` (``tcp+tls://`` with TLS)."""
        host, port = self.address
        scheme = "tcp" if self.tls is None else "tcp+tls"
        return f"{scheme}://{f'[{host}]' if ':' in host else host}:{port}"

    async def start(self, sock: socket.socket) -> None:
        """Serve connections accepted on ``sock`` (bound; this server owns it from now on)."""
        # Listen (again) with a deep queue: a burst of connections would otherwise overflow a
        # short one and wait for SYN retransmits. Accepted in batches (`airlane.runtime.acceptor`).
        sock.listen(LISTEN_BACKLOG)
        tls = self.tls
        self._server = Acceptor(
            sock,
            lambda: _AircProtocol(self),
            tls=None if tls is None else lambda: tls.context,
            on_refused=None if tls is None else tls.refused,
        )
        self._server.start()

    def release(self, session: AircSession) -> None:
        """A connection is gone: release its cursors in a task this server owns."""
        self.sessions.discard(session)
        task = asyncio.get_running_loop().create_task(session.aclose())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def aclose(self) -> None:
        """Stop listening, say ``GOAWAY`` to every session and wait for their cleanup."""
        if self._server is not None:
            self._server.close()
        for session in list(self.sessions):
            session.close(GoAwayCode.NO_ERROR, "server shutting down")
            await session.aclose()
        while self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server.sock.close()
