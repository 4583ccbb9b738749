"""The WebRTC signalling endpoints, WHIP-style (RFC 9725's shape, for data channels).

=======  ==========================================  ============================================
method   path                                        what
=======  ==========================================  ============================================
GET      /v1/webrtc/ice-servers                      the STUN/TURN servers to offer with, TURN
                                                     credentials minted for the caller
POST     /v1/webrtc                                  ``application/sdp`` offer -> 201, the answer
                                                     (``application/sdp``), ``Location`` of the
                                                     session, ``Link`` headers naming the ICE
                                                     servers
PATCH    /v1/webrtc/{session}                        ``application/trickle-ice-sdpfrag``: the
                                                     client's candidates -> 204; an ICE restart
                                                     (a new ``ice-ufrag`` and ``ice-pwd``) ->
                                                     200, the gateway's new ones and its
                                                     candidates (422 where it cannot restart)
DELETE   /v1/webrtc/{session}                        close it -> 204
=======  ==========================================  ============================================

A malformed offer, one with no data channel, too many candidates or one that is too large is
a 400 (413) that says what is wrong; nothing is kept.

`PeerSignalling` offers the same to AIRC's ``RTC_*`` messages (AIRC over WebSocket).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airlane.core.errors import AirlaneError, BadRequest, ErrorCode, NotFound
from airlane.gateway import Principal
from airlane.transports.http.asgi import (
    Receive,
    Request,
    Send,
    allow_methods,
    read_body,
    send_body,
    send_json,
)
from airlane.transports.http.context import AppContext
from airlane.transports.http.errors import error_json
from airlane.transports.http.webrtc.peer import IceRestartUnsupported

if TYPE_CHECKING:
    from airlane.transports.http.webrtc.peer import WebRtcPeers

__all__ = ["PeerSignalling", "handle_webrtc"]

SDP = b"application/sdp"
TRICKLE = "application/trickle-ice-sdpfrag"


async def handle_webrtc(
    app: AppContext, principal: Principal, request: Request, receive: Receive, send: Send
) -> None:
    """Route a request under ``/v1/webrtc``."""
    peers = app.webrtc_peers()
    rest = request.path[len("/v1/webrtc") :].strip("/")
    method = request.method
    if rest == "ice-servers":
        allow_methods(method, "GET")
        await send_json(send, 200, {"iceServers": peers.ice_servers(principal)})
        return
    limit = peers.config.max_sdp_bytes
    if not rest:
        allow_methods(method, "POST")
        _content_type(request, "application/sdp")
        offer = _text(await read_body(receive, limit))
        peer, answer = await peers.offer(principal, offer)
        headers = [(b"location", f"/v1/webrtc/{peer.id}".encode())]
        for server in peers.ice_servers(principal):
            for url in server["urls"]:
                link = f'<{url}>; rel="ice-server"'
                if "username" in server:
                    link += (
                        f'; username="{server["username"]}"; '
                        f'credential="{server["credential"]}"; credential-type="password"'
                    )
                headers.append((b"link", link.encode()))
        await send_body(send, 201, answer.encode(), SDP, headers)
        return
    if "/" in rest:
        raise NotFound(f"no WebRTC resource {request.path[:200]}")
    peer = peers.get(principal, rest)
    if method == "PATCH":
        _content_type(request, TRICKLE)
        try:
            restarted = await peer.trickle(_text(await read_body(receive, limit)))
        except IceRestartUnsupported as exc:
            await send_body(send, 422, error_json(exc, status=422), b"application/json")
            return
        if restarted is None:
            await send_body(send, 204, b"", b"text/plain")
        else:  # an ICE restart: the gateway's new credentials and candidates
            await send_body(send, 200, restarted.encode(), TRICKLE.encode())
    elif method == "DELETE":
        await peer.aclose()
        await send_body(send, 204, b"", b"text/plain")
    else:
        allow_methods(method, "PATCH, DELETE")


class PeerSignalling:
    """The gateway's peer connections as AIRC's ``RtcSignalling``: what ``RTC_OFFER``,
    ``RTC_CANDIDATES`` and ``RTC_CLOSE`` do, with the bounds and refusals of the endpoints."""

    def __init__(self, context: AppContext) -> None:
        self._context = context

    def _peers(self, text: str) -> WebRtcPeers:
        peers = self._context.webrtc_peers()
        limit = peers.config.max_sdp_bytes
        if len(text.encode()) > limit:
            raise AirlaneError(
                f"an offer or candidate fragment of at most {limit} bytes",
                code=ErrorCode.BODY_TOO_LARGE,
            )
        return peers

    async def offer(self, principal: Principal, sdp: str) -> tuple[str, str]:
        """A new peer connection for ``sdp``: its session id and the answer."""
        peer, answer = await self._peers(sdp).offer(principal, sdp)
        return peer.id, answer

    async def add_candidates(self, principal: Principal, session: str, fragment: str) -> str:
        """The client's trickled candidates for ``session``, or its ICE restart: then the
        fragment to answer with, else ``""``."""
        answer = await self._peers(fragment).get(principal, session).trickle(fragment)
        return answer or ""

    async def close(self, principal: Principal, session: str) -> None:
        """Close ``session``."""
        await self._context.webrtc_peers().get(principal, session).aclose()


def _content_type(request: Request, expected: str) -> None:
    given = (request.header(b"content-type") or "").split(";")[0].strip().lower()
    if given != expected:
        raise AirlaneError(
            f"send {expected}, not {given or 'no content type'}",
            code=ErrorCode.UNSUPPORTED_MEDIA_TYPE,
        )


def _text(body: bytes) -> str:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequest("the body is not UTF-8 text", param="sdp") from None
