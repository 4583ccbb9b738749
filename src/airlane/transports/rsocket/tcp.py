"""RSocket over TCP: a listener of its own, one `RSocketSession` per accepted connection.

The protocol object is the thin asyncio adapter: bytes in go to the session, the session's
bytes go to the transport, and the transport's flow control (``pause_writing`` /
``resume_writing``) reaches the session's senders.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import cast

from airlane.gateway import Gateway, ServerTls
from airlane.runtime.acceptor import Acceptor
from airlane.transports.rsocket.config import RSocketServerConfig
from airlane.transports.rsocket.resumption import detached_sessions
from airlane.transports.rsocket.session import RSocketSession

__all__ = ["RSocketTcpServer"]

_LISTEN_BACKLOG = 4096
_LINGER_S = 2.0
"""After the closing ERROR, how long input is still read (and dropped) before the socket
closes: closing with unread input makes the kernel send RST, which can destroy the ERROR
before the peer reads it."""


class _RSocketProtocol(asyncio.Protocol):
    """One TCP connection."""

    def __init__(self, server: RSocketTcpServer) -> None:
        self._server = server
        self._transport: asyncio.Transport | None = None
        self._session: RSocketSession | None = None
        self._lingering: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's do not subclass it
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        server = self._server
        address = transport.get_extra_info("peername")
        peer = None
        if server.tls is not None and (sslobj := transport.get_extra_info("ssl_object")):
            peer = server.tls.peer_identity(sslobj.getpeercert())
        self._session = RSocketSession(
            server.gateway,
            server.config,
            self,
            framed=True,
            peer=peer,
            origin=address[0] if isinstance(address, tuple) else None,
            detached=server.detached,
        )
        server.sessions.add(self._session)

    def data_received(self, data: bytes) -> None:
        session = self._session
        # After a RESUME moved the session to another connection, this one is only closing.
        if session is not None and self._lingering is None and session.attached_to(self):
            session.data_received(data)

    def eof_received(self) -> bool:
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        if self._lingering is not None:
            self._lingering.cancel()
        session, self._session = self._session, None
        if session is not None:
            self._server.release(session, self)

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

    def adopt(self, session: RSocketSession) -> None:
        """This connection resumed ``session``: hand it what arrives from now on."""
        if self._session is not None:
            self._server.sessions.discard(self._session)
        self._session = session
        self._server.sessions.add(session)

    def close(self) -> None:
        """Close once the written bytes are flushed: half-close at once, then drop input
        until the peer closes too or `_LINGER_S` passes."""
        transport = self._transport
        if transport is None or transport.is_closing() or self._lingering is not None:
            return
        if not transport.can_write_eof():
            transport.close()
            return
        transport.write_eof()
        self._lingering = asyncio.get_running_loop().call_later(_LINGER_S, transport.close)


class RSocketTcpServer:
    """The RSocket/TCP listener: start it on a bound socket, close it to end every session."""

    def __init__(
        self,
        gateway: Gateway,
        config: RSocketServerConfig | None = None,
        *,
        tls: ServerTls | None = None,
    ) -> None:
        self.gateway = gateway
        self.config = config or RSocketServerConfig()
        self.tls = tls
        """TLS for every connection (with client certificates when it asks for them)."""
        self.sessions: set[RSocketSession] = set()
        """Open sessions."""
        self.detached = detached_sessions(gateway, self.config)
        """Resumable sessions whose connection dropped (shared with the WebSocket path)."""
        self._server: Acceptor | None = None
        self._closing: set[asyncio.Task[None]] = set()

    @property
    def acceptor(self) -> Acceptor:
        """What takes this server's connections."""
        assert self._server is not None, "not started"
        return self._server

    @property
    def url(self) -> str:
        """``tcp://host:port`` (``tcp+tls://`` with TLS)."""
        assert self._server is not None, "not started"
        host, port = self._server.sock.getsockname()[:2]
        scheme = "tcp" if self.tls is None else "tcp+tls"
        return f"{scheme}://{f'[{host}]' if ':' in host else host}:{port}"

    async def start(self, sock: socket.socket) -> None:
        """Serve connections accepted on ``sock`` (bound; this server owns it from now on)."""
        sock.listen(_LISTEN_BACKLOG)
        tls = self.tls
        self._server = Acceptor(
            sock,
            lambda: _RSocketProtocol(self),
            tls=None if tls is None else lambda: tls.context,
            on_refused=None if tls is None else tls.refused,
        )
        self._server.start()

    def release(self, session: RSocketSession, link: _RSocketProtocol) -> None:
        """``link``'s connection is gone: keep its session for a RESUME if it is resumable,
        else stop its requests in a task this server owns."""
        if not session.attached_to(link):
            return  # a RESUME on another connection took the session over
        self.sessions.discard(session)
        if session.detach():
            return
        task = asyncio.get_running_loop().create_task(session.aclose())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def aclose(self) -> None:
        """Stop listening, close every session (ERROR CONNECTION_CLOSE) and wait for them."""
        if self._server is not None:
            self._server.close()
        for session in list(self.sessions):
            session.close(message="server shutting down")
            await session.aclose()
        await self.detached.aclose()
        while self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server.sock.close()
