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
                                                     client's candidates -> 204
DELETE   /v1/webrtc/{session}                        close it -> 204
=======  ==========================================  ============================================

A malformed offer, one with no data channel, too many candidates or one that is too large is
a 400 (413) that says what is wrong; nothing is kept.
"""

from __future__ import annotations

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

__all__ = ["handle_webrtc"]

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
        await peer.add_candidates(_text(await read_body(receive, limit)))
        await send_body(send, 204, b"", b"text/plain")
    elif method == "DELETE":
        await peer.aclose()
        await send_body(send, 204, b"", b"text/plain")
    else:
        allow_methods(method, "PATCH, DELETE")


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
