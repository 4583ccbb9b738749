"""`WebRtcPeers`: the gateway's WebRTC peer connections, each with its data channels bound to
the ``/v1/ws`` session protocol.

A client offers (`WebRtcPeers.offer`, an SDP offer with a data channel); the gateway answers
with every candidate it gathered (host, then server-reflexive and relayed ones when
``[webrtc]`` names STUN and TURN servers), and takes the client's trickled candidates after
(`WebRtcPeer.trickle`). Each data channel the client opens with a label of
`CHANNEL_LABELS` runs a `airlane.transports.http.websocket.WebSocketSession` over a
`ChannelPort`: the same ops (subscribe with a resume position, generate, publish, cancel),
the same events. ``airlane`` is the reliable, ordered channel (JSON; ``airlane.msgpack``:
MessagePack); a client may open one per stream it follows, so that one stream's lost packet
holds back no other (each channel is an SCTP stream of its own). ``airlane.rt`` (and
``airlane.rt.msgpack``) is for the real-time lanes (presence, progress, cancel): the client
opens it unordered without retransmissions, and the gateway drops what it sends there while
the peer is behind instead of waiting. A client that loses its peer connection offers a new
one and subscribes again from the last ``id`` it saw; one whose network changed restarts ICE
instead (a trickled fragment with a new ``ice-ufrag``, `WebRtcPeer.trickle`): the gateway
answers with its own new credentials and candidates, and its channels carry on over the new
path (`airlane.transports.http.webrtc.restart`).

Bounds: ``max_peers`` connections (503 past it), offers and candidate fragments of at most
``max_sdp_bytes``, ``max_candidates`` remote candidates, messages of at most
``max_message_bytes``, and a connection that is not connected ``ice_timeout_s`` after its
answer is closed. aiortc (the ``webrtc`` extra) is imported on the first offer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Any, TypeVar

from airlane.core.errors import AirlaneError, BadRequest, ErrorCode, NotFound
from airlane.gateway import Principal
from airlane.transports.http.webrtc.config import WebRtcConfig
from airlane.transports.http.webrtc.port import ChannelPort
from airlane.transports.http.webrtc.restart import IceRestart, RemoteIce, parse_fragment
from airlane.transports.http.webrtc.restart import supported as restart_supported
from airlane.transports.http.webrtc.turn import turn_credentials

if TYPE_CHECKING:
    from airlane.transports.http.context import AppContext

__all__ = [
    "CHANNEL_LABELS",
    "IceRestartUnsupported",
    "WebRtcPeer",
    "WebRtcPeers",
    "sha256_fingerprint_only",
]

log = logging.getLogger("airlane.webrtc")

T = TypeVar("T")

CHANNEL_LABELS = {
    "airlane": ("airlane.v1.json", False),
    "airlane.msgpack": ("airlane.v1.msgpack", False),
    "airlane.rt": ("airlane.v1.json", True),
    "airlane.rt.msgpack": ("airlane.v1.msgpack", True),
}
"""Data channel labels the gateway serves: the ``/v1/ws`` subprotocol each speaks, and whether
it is the lossy real-time channel."""


class WebRtcUnavailable(AirlaneError):
    """aiortc is not installed."""

    code = ErrorCode.UNSUPPORTED


class IceRestartUnsupported(AirlaneError):
    """The client restarted ICE (new credentials) where the gateway cannot follow (before the
    connection is up, or an aiortc whose internals `restart` does not know). Over HTTP it is
    a 422, as RFC 9725 asks of a session that takes trickled candidates but no restart."""

    code = ErrorCode.UNSUPPORTED


def _check_offer(sdp: str, config: WebRtcConfig) -> None:
    if not sdp.startswith("v=0"):
        raise BadRequest("not an SDP offer: it must start with 'v=0'", param="sdp")
    if "m=application" not in sdp or "webrtc-datachannel" not in sdp:
        raise BadRequest(
            "the offer has no data channel (an 'm=application ... webrtc-datachannel' "
            "section): create one before the offer",
            param="sdp",
        )
    candidates = sdp.count("a=candidate:")
    if candidates > config.max_candidates:
        raise BadRequest(
            f"the offer carries {candidates} candidates; at most {config.max_candidates}",
            param="sdp",
        )


async def _refusing_bad_candidates(work: Awaitable[T]) -> T:
    """``work``, with aiortc's and aioice's complaints about a candidate (parse errors, asserts)
    turned into a `BadRequest` that says what."""
    try:
        return await work
    except AirlaneError:
        raise
    except Exception as exc:
        reason = str(exc) or type(exc).__name__
        raise BadRequest(f"a candidate that cannot be used: {reason}") from None


class WebRtcPeer:
    """One peer connection and its channels' sessions."""

    def __init__(self, peers: WebRtcPeers, principal: Principal, connection: Any) -> None:
        self.id = secrets.token_urlsafe(12)
        self.peers = peers
        self.principal = principal
        self.connection = connection
        self.candidates = 0
        """Remote candidates taken (since the last ICE restart)."""
        self._remote_ufrag: str | None = None
        self._restart: IceRestart | None = None
        self._counted = False
        self.started = time.monotonic()
        self._sessions: set[asyncio.Task[None]] = set()
        self._timeout: asyncio.TimerHandle | None = None
        self._closing: asyncio.Task[None] | None = None
        connection.on("datachannel", self._on_channel)
        connection.on("connectionstatechange", self._on_state)

    @property
    def pair(self) -> str | None:
        """The candidate pair ICE chose, as ``<local type>/<protocol>-<remote type>``
        (``host/udp-host``, ``relay/udp-srflx``...); None until it has chosen."""
        # aiortc exposes no selected pair: its ICE transport's aioice connection keeps the
        # nominated pair per component. Read defensively; a newer aiortc may move it.
        try:
            sctp = self.connection.sctp
            ice = sctp.transport.transport._connection
            pair = ice._nominated.get(1)
            local, remote = pair.local_candidate, pair.remote_candidate
            return f"{local.type}/{local.transport.lower()}-{remote.type}"
        except (AttributeError, KeyError, TypeError):
            return None

    @property
    def state(self) -> str:
        """The connection's state (``new``, ``connecting``, ``connected``, ``failed``...)."""
        return str(self.connection.connectionState)

    async def answer(self, offer: str) -> str:
        """Take the offer; the answer, with the gateway's candidates."""
        from aiortc import RTCSessionDescription

        try:
            await self.connection.setRemoteDescription(RTCSessionDescription(offer, "offer"))
            answer = await self.connection.createAnswer()
            await self.connection.setLocalDescription(answer)
        except Exception as exc:  # aiortc's parser refuses bad SDP with asserts, too
            log.debug("webrtc: offer refused", exc_info=exc)
            reason = str(exc) or type(exc).__name__
            raise BadRequest(f"the offer cannot be used: {reason}", param="sdp") from None
        self._remote_ufrag = parse_fragment(offer).ufrag
        self.candidates = offer.count("a=candidate:")  # trickled ones count on from these
        loop = asyncio.get_running_loop()
        self._timeout = loop.call_later(self.peers.config.ice_timeout_s, self._ice_timed_out)
        return sha256_fingerprint_only(str(self.connection.localDescription.sdp))

    async def trickle(self, fragment: str) -> str | None:
        """Take an ``application/trickle-ice-sdpfrag`` from the client: its candidates, or,
        when it names new ICE credentials, an ICE restart (`restart.IceRestart`). For a
        restart, the fragment to answer with (the gateway's new credentials and candidates);
        otherwise None."""
        remote = parse_fragment(fragment)
        if remote.ufrag is not None and remote.ufrag != self._remote_ufrag:
            return await self._restart_ice(remote)
        self._count(remote.candidates)
        # Counted before the awaits below: concurrent fragments must not pass the bound
        # together. Bad candidates are refused whole and count for nothing.
        self.candidates += len(remote.candidates)
        restart = self._restart
        try:
            if restart is not None and not restart.done.is_set():
                await _refusing_bad_candidates(restart.add_candidates(remote))
            else:
                await _refusing_bad_candidates(self._add_candidates(remote))
        except BadRequest:
            self.candidates -= len(remote.candidates)
            raise
        return None

    def _count(self, candidates: list[str]) -> None:
        """Refuse ``candidates`` if, with those taken (the offer's and trickled ones), the
        connection would hold more than ``max_candidates``."""
        limit = self.peers.config.max_candidates
        if self.candidates + len(candidates) > limit:
            raise BadRequest(f"at most {limit} candidates a connection")

    async def _add_candidates(self, remote: RemoteIce) -> None:
        from aiortc.sdp import candidate_from_sdp

        for line in remote.candidates:
            candidate = candidate_from_sdp(line)
            candidate.sdpMid = remote.mid or "0"
            await self.connection.addIceCandidate(candidate)

    async def _restart_ice(self, remote: RemoteIce) -> str:
        from aiortc import RTCIceServer

        ice = self._ice_transport()
        if self.state != "connected" or ice is None or not restart_supported(ice):
            when = "before it connects" if self.state != "connected" else "with this aiortc"
            raise IceRestartUnsupported(
                f"this gateway's WebRTC peer cannot restart ICE {when}: offer a new peer "
                "connection (POST /v1/webrtc) and subscribe again from the last id seen"
            )
        if not remote.pwd:
            raise BadRequest("an ICE restart names the new a=ice-pwd with the new a=ice-ufrag")
        limit = self.peers.config.max_candidates
        if len(remote.candidates) > limit:
            raise BadRequest(f"at most {limit} candidates a connection")
        if self._restart is not None:
            await self._restart.aclose()
        servers = [RTCIceServer(**server) for server in self.peers.ice_servers(self.principal)]
        outcomes = self.peers.context.metrics.webrtc_restarts
        mid = parse_fragment(str(self.connection.remoteDescription.sdp)).mid or "0"
        restart = IceRestart(ice, servers, self.peers.config.ice_timeout_s, outcomes, mid=mid)
        self._restart = restart
        try:
            answer = await _refusing_bad_candidates(restart.begin(remote))
        except BaseException:
            await restart.aclose()
            raise
        self._remote_ufrag = remote.ufrag
        self.candidates = len(remote.candidates)
        return answer

    def _ice_transport(self) -> Any:
        sctp = self.connection.sctp
        return None if sctp is None else sctp.transport.transport

    def _on_channel(self, channel: Any) -> None:
        served = CHANNEL_LABELS.get(channel.label)
        if served is None:
            log.info("webrtc: channel %r is not served; closed", channel.label)
            channel.close()
            return
        if len(self._sessions) >= self.peers.config.max_channels:
            log.info(
                "webrtc: peer %s already has %d channels; %r closed",
                self.id,
                len(self._sessions),
                channel.label,
            )
            channel.close()
            return
        subprotocol, lossy = served
        pair = self.pair
        if pair is not None and not self._counted:
            self._counted = True
            metrics = self.peers.context.metrics.webrtc_pairs
            if pair in metrics or len(metrics) < 32:
                metrics[pair] = metrics.get(pair, 0) + 1
        # Listening from now: the peer may send before a task of ours runs.
        config = self.peers.config
        port = ChannelPort(
            channel,
            max_queued=config.max_queued,
            high_water=config.send_high_water,
            max_message=config.max_message_bytes,
            binary=subprotocol.endswith("msgpack"),
            lossy=lossy,
            on_drop=self.peers.context.metrics.count_webrtc_drop,
        )
        reader = f"webrtc {pair or 'unknown'}"
        task = asyncio.create_task(self._serve(port, subprotocol, reader), name=f"webrtc {self.id}")
        self._sessions.add(task)
        task.add_done_callback(self._sessions.discard)

    async def _serve(self, port: ChannelPort, subprotocol: str, reader: str) -> None:
        from airlane.transports.http.websocket import WebSocketSession

        context = self.peers.context
        session = WebSocketSession(context, self.principal, port.send, subprotocol, reader=reader)
        context.metrics.connections["webrtc"] += 1
        try:
            await session.run(port.receive)
        finally:
            context.metrics.connections["webrtc"] -= 1

    def _on_state(self) -> None:
        state = self.state
        if state == "connected" and self._timeout is not None:
            self._timeout.cancel()
            self._timeout = None
        elif state in ("failed", "closed"):
            self._close_later()

    def _ice_timed_out(self) -> None:
        self._timeout = None
        if self.state != "connected":
            log.info(
                "webrtc: %s not connected after %.0f s; closed",
                self.id,
                self.peers.config.ice_timeout_s,
            )
            self._close_later()

    def _close_later(self) -> None:
        if self._closing is None:
            self._closing = asyncio.create_task(self.aclose(), name=f"webrtc close {self.id}")

    async def aclose(self) -> None:
        """Close the connection and end its sessions."""
        self.peers.forget(self)
        if self._timeout is not None:
            self._timeout.cancel()
        if self._restart is not None:
            await self._restart.aclose()
        with contextlib.suppress(Exception):
            await self.connection.close()
        sessions = list(self._sessions)
        for task in sessions:
            task.cancel()
        for task in sessions:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


class WebRtcPeers:
    """The gateway's peer connections; see the module docstring."""

    def __init__(self, context: AppContext, config: WebRtcConfig | None = None) -> None:
        self.context = context
        self.config = config or WebRtcConfig()
        self._peers: dict[str, WebRtcPeer] = {}

    def __len__(self) -> int:
        return len(self._peers)

    def ice_servers(self, principal: Principal) -> list[dict[str, Any]]:
        """The STUN and TURN servers, with TURN credentials minted for ``principal``."""
        config = self.config
        servers: list[dict[str, Any]] = []
        if config.stun:
            servers.append({"urls": list(config.stun)})
        if config.turn and config.turn_secret:
            username, credential = turn_credentials(
                config.turn_secret, principal.name, config.turn_ttl_s, time.time()
            )
            servers.append(
                {"urls": list(config.turn), "username": username, "credential": credential}
            )
        return servers

    async def offer(self, principal: Principal, sdp: str) -> tuple[WebRtcPeer, str]:
        """A new peer connection answering ``sdp``, and its answer."""
        _check_offer(sdp, self.config)
        if len(self._peers) >= self.config.max_peers:
            raise AirlaneError(
                f"{self.config.max_peers} WebRTC peer connections are open, the limit",
                code=ErrorCode.OVERLOADED,
            )
        try:
            from aiortc import RTCConfiguration, RTCIceServer, RTCPeerConnection
        except ImportError:
            raise WebRtcUnavailable("WebRTC needs aiortc: pip install 'airlane[webrtc]'") from None
        ice = [RTCIceServer(**server) for server in self.ice_servers(principal)]
        connection = RTCPeerConnection(RTCConfiguration(iceServers=ice or None))
        peer = WebRtcPeer(self, principal, connection)
        self._peers[peer.id] = peer
        try:
            answer = await peer.answer(sdp)
        except BaseException:
            await peer.aclose()
            raise
        return peer, answer

    def get(self, principal: Principal, peer_id: str) -> WebRtcPeer:
        """The caller's peer connection ``peer_id`` (another principal's is not found)."""
        peer = self._peers.get(peer_id)
        if peer is None or peer.principal != principal:
            raise NotFound(f"no WebRTC session {peer_id[:40]!r}")
        return peer

    def forget(self, peer: WebRtcPeer) -> None:
        """Drop a closed peer."""
        if self._peers.get(peer.id) is peer:
            del self._peers[peer.id]

    async def aclose(self) -> None:
        """Close every peer connection."""
        for peer in list(self._peers.values()):
            await peer.aclose()


def sha256_fingerprint_only(sdp: str) -> str:
    """``sdp`` with its certificate fingerprints cut to the SHA-256 one.

    aiortc lists SHA-256, SHA-384 and SHA-512. libdatachannel keeps the last it reads, but
    when ICE connects before it has stored the answer (its threads race), it hashes the
    certificate with SHA-256 and compares that against the SHA-512 line: the handshake fails,
    about one set-up in twenty. One SHA-256 line (what browsers send) verifies the same way
    whichever thread wins, and every peer supports it.
    """
    lines = sdp.split("\r\n")
    kept = [
        line
        for line in lines
        if not line.startswith("a=fingerprint:")
        or line.lower().startswith("a=fingerprint:sha-256 ")
    ]
    if not any(line.startswith("a=fingerprint:") for line in kept):
        return sdp  # no SHA-256 line to keep: leave the answer as aiortc made it
    return "\r\n".join(kept)
