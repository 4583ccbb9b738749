"""`Http3Server`: the HTTP/3 listener, serving the same ASGI application as the HTTP port.

It listens on UDP (by default the HTTP port's number, which the TCP port's ``Alt-Svc`` header
names, so browsers and clients that speak HTTP/3 move over by themselves) with aioquic, one
`H3Protocol` per connection. QUIC always encrypts: the listener uses the gateway's TLS
certificate when it has one (``--tls-cert``), else a self-signed one made at start
(`airlane.transports.http.h3.certificate`), whose SHA-256 it logs for clients that trust by
hash. The application is the one the HTTP server started; its lifespan state is shared, not
run again.

New connections are where a UDP listener is cheapest to attack: anyone can send Initial
packets from forged addresses, and each would make connection state that lives until the
idle timeout. So a connection counts against ``max_connections`` only once its ClientHello
was read, one in its handshake is dropped after ``handshake_timeout_s``, at most
``max_handshakes`` are in their handshake at once (new Initials beyond are dropped), and with
more than ``retry_above`` in their handshake a new client must first echo a Retry token, which
only a client that receives at its address can (QUIC's address validation).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, cast

from aioquic.asyncio.server import QuicServer
from aioquic.buffer import Buffer  # type: ignore[attr-defined]  # re-exported from C
from aioquic.h3.connection import H3_ALPN
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.packet import QuicPacketType, pull_quic_header
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from airlane.gateway import ServerTls
from airlane.runtime import quic_congestion  # noqa: F401 - registers airlane-bbr with aioquic
from airlane.runtime.quic_mtu import FLOOR, forbid_fragments
from airlane.runtime.socket_lanes import LanesConfig
from airlane.runtime.udp_batch import read_in_batches
from airlane.transports.http.h3.certificate import EphemeralCertificate, ephemeral_certificate
from airlane.transports.http.h3.config import Http3Config
from airlane.transports.http.h3.protocol import H3Protocol
from airlane.transports.http.h3.tickets import TicketStore

__all__ = ["Http3Server"]

log = logging.getLogger("airlane.http3")


class Http3Server:
    """Serves ``app`` over HTTP/3 (see the module docstring)."""

    def __init__(
        self,
        app: Callable[..., Awaitable[None]],
        config: Http3Config | None = None,
        *,
        tls: ServerTls | None = None,
        app_state: dict[str, Any] | None = None,
        max_body_bytes: int = 8 << 20,
        lanes: LanesConfig | None = None,
    ) -> None:
        self.app = app
        self.config = config or Http3Config()
        self.tls = tls
        self.app_state = app_state or {}
        """The application's lifespan state, as the HTTP server's requests carry it."""
        self.max_body_bytes = max_body_bytes
        """What a request body may buffer before its stream is stopped (the application's
        own limit; the application refuses past it)."""
        self.lanes = lanes or LanesConfig()
        """How a connection that declares a lane marks its datagrams (``[lanes]``)."""
        self.sender: socket.socket | None = None
        """A duplicate of the listening socket's descriptor, which connections with a lane
        send their marked datagrams on (`airlane.runtime.datagram_lanes`)."""
        self.certificate: EphemeralCertificate | None = None
        """The certificate made at start, when the gateway has none of its own."""
        self.address: tuple[str, int] | None = None
        """Where it listens (host, UDP port), once started."""
        self.connections: set[H3Protocol] = set()
        """Connections open now."""
        self.refused = 0
        """Connections refused because ``max_connections`` were open."""
        self.handshaking: set[H3Protocol] = set()
        """Connections in their handshake now."""
        self.dropped_initials = 0
        """New connections' packets dropped because ``max_handshakes`` were in progress."""
        self._configuration: QuicConfiguration | None = None
        self._tls_loads = -1  # the `ServerTls.loads` the configuration's certificate is from
        self.tickets = TicketStore(self.config.session_tickets)
        """Session tickets issued and not used yet (0-RTT resumption)."""
        self._server: QuicServer | None = None

    @property
    def port(self) -> int:
        """The UDP port (0 before `start`)."""
        return 0 if self.address is None else self.address[1]

    async def start(self, sock: socket.socket) -> None:
        """Serve on ``sock``, a bound UDP socket (this server closes it)."""
        configuration = self._configuration = self._make_configuration()
        size = self.config.socket_buffer_bytes
        for option in (socket.SO_RCVBUF, socket.SO_SNDBUF):
            sock.setsockopt(socket.SOL_SOCKET, option, size)
        forbid_fragments(sock)  # QUIC datagrams are never fragmented (RFC 9000 section 14)
        self.sender = sock.dup()  # the transport closes ``sock``; this closes its duplicate
        self.sender.setblocking(False)
        sockname = sock.getsockname()
        self.address = (str(sockname[0]), int(sockname[1]))
        loop = asyncio.get_running_loop()
        _, self._server = await loop.create_datagram_endpoint(
            lambda: _Listener(
                self,
                configuration=configuration,
                create_protocol=partial(H3Protocol, server=self),
                session_ticket_fetcher=self.tickets.pop,
                session_ticket_handler=self.tickets.add,
            ),
            sock=sock,
        )
        host = self.address[0]
        if self.certificate is not None:
            log.info(
                "HTTP/3 on UDP %s:%d with a self-signed certificate, SHA-256 %s",
                host,
                self.port,
                self.certificate.sha256.hex(),
            )

    def _make_configuration(self) -> QuicConfiguration:
        c = self.config
        configuration = QuicConfiguration(
            is_client=False,
            alpn_protocols=list(H3_ALPN),
            idle_timeout=c.idle_timeout_s,
            max_stream_data=c.stream_window,
            max_data=c.connection_window,
            congestion_control_algorithm=c.congestion_control,
            # Discovery starts from the size every path carries (raised after the handshake).
            max_datagram_size=FLOOR if c.path_mtu_discovery else c.max_datagram_size,
            max_datagram_frame_size=65536,  # WebTransport datagrams (H3_DATAGRAM)
        )
        if self.tls is not None:
            self._load_certificate(configuration, self.tls)
        else:
            self.certificate = ephemeral_certificate()
            configuration.certificate = self.certificate.certificate
            configuration.private_key = self.certificate.key
        return configuration

    def _load_certificate(self, configuration: QuicConfiguration, tls: ServerTls) -> None:
        chain, key, _ = tls.material()
        certificates = x509.load_pem_x509_certificates(chain)
        configuration.certificate = certificates[0]
        configuration.certificate_chain = certificates[1:]
        configuration.private_key = serialization.load_pem_private_key(key, None)
        self._tls_loads = tls.loads

    def follow_certificate(self) -> None:
        """Before a new connection: if the gateway reloaded its certificate files since, the
        new connection gets the new certificate (those open keep theirs), as on TCP."""
        tls, configuration = self.tls, self._configuration
        if tls is not None and configuration is not None and tls.loads != self._tls_loads:
            self._load_certificate(configuration, tls)
            log.info("HTTP/3 serves the reloaded certificate to new connections")

    # -- connections (`H3Protocol` calls these) ---------------------------------------------

    def opened(self, protocol: H3Protocol) -> bool:
        """A connection began; False if it must be refused (too many are open)."""
        if len(self.connections) >= self.config.max_connections:
            self.refused += 1
            return False
        self.connections.add(protocol)
        return True

    def closed(self, protocol: H3Protocol) -> None:
        """A connection ended."""
        self.connections.discard(protocol)
        self.handshaking.discard(protocol)

    async def aclose(self) -> None:
        """Close every connection, then stop listening (idempotent)."""
        server, self._server = self._server, None
        if server is None:
            return
        for protocol in list(self.connections):
            protocol.shut()
        server.close()
        if self.sender is not None:
            self.sender.close()


class _Listener(QuicServer):
    """aioquic's server, with the admission rules for new connections of `Http3Server` (see
    the module docstring). aioquic decides per Initial packet whether to answer with a Retry
    by whether its ``_retry`` handler is set, so this sets or clears it per new connection."""

    def __init__(self, owner: Http3Server, **kwargs: Any) -> None:
        super().__init__(retry=True, **kwargs)
        self._owner = owner
        self._validator = self._retry

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        read_in_batches(cast(asyncio.DatagramTransport, transport), self._batch)

    def _batch(self, batch: list[tuple[bytes, Any]]) -> None:
        for data, addr in batch:
            self.datagram_received(data, addr)

    def datagram_received(self, data: bytes | str, addr: Any) -> None:
        if isinstance(data, bytes) and data and data[0] & 0x80:  # a long header: handshake
            try:
                header = pull_quic_header(
                    Buffer(data=data), host_cid_length=self._configuration.connection_id_length
                )
            except ValueError:
                return
            if (
                header.packet_type == QuicPacketType.INITIAL
                and header.destination_cid not in self._protocols
            ):
                owner = self._owner
                handshaking = len(owner.handshaking)
                if handshaking >= owner.config.max_handshakes:
                    owner.dropped_initials += 1
                    return
                owner.follow_certificate()
                # A token is checked whenever one comes (its client was sent a Retry).
                retry = bool(header.token) or handshaking >= owner.config.retry_above
                # aioquic types the handler as always set, but answers a Retry only when set.
                self._retry = self._validator if retry else None  # type: ignore[assignment]
        super().datagram_received(data, addr)
