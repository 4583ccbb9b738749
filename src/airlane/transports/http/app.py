"""The HTTP surface as one plain ASGI application.

Mount it inside a FastAPI/Starlette app or serve it with any ASGI server. Routes:

- ``POST /v1/chat/completions``        OpenAI-compatible, streaming and not
- ``GET  /v1/models``                  the models this gateway answers for
- ``/v1/streams...``                   the streams API (see `airlane.transports.http.streams`)
- ``/v1/logs...``                      event logs and consumer groups (`...http.logs`)
- ``/v1/schemas...``                   the schema registry (`...http.schemas`)
- ``/v1/rules...``                     streaming SQL rules and their approvals (`...http.rules`)
- ``/v1/webrtc...``                    WebRTC signalling: data channels (`...http.webrtc`)
- ``/v1/rooms/{room}``                 shared-state rooms, HTTP and WebSocket (`...http.rooms`)
- ``WS   /v1/yjs/{room}``              Yjs documents, y-websocket protocol (`...http.yjs`)
- ``/v1/artifacts...``                 model artifacts, files with ranges (`...http.artifacts`)
- ``GET  /v1/ws``                      WebSocket, many streams per socket
- ``GET  /v1/loadtest/sse|ws``         benchmark source
- ``GET  /healthz``, ``GET /metrics``  liveness and Prometheus metrics
- ``GET  /v1/metrics/stream``          the same, a JSON sample a second (SSE)
- ``GET  /v1/cluster``                 the nodes sharing the hub, as this one knows them
- ``GET  /console...``                 the web console (`...http.console`)

Every failure is an `AirlaneError` with a code, which becomes a JSON error body with the status
`airlane.transports.http.errors` gives it (or a WebSocket close code with a reason); an
unexpected exception is logged here and answered with 500, and the server keeps serving.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any, NoReturn

from airlane.core.errors import AirlaneError, ErrorCode, NotFound
from airlane.gateway import ForwardedIdentity, Gateway, Principal
from airlane.runtime.admission import Admission, Overloaded
from airlane.runtime.lane_flows import LaneFlows, ShapingCounters
from airlane.runtime.socket_lanes import LanesConfig
from airlane.transports.http.artifacts import handle_artifacts
from airlane.transports.http.asgi import (
    HANDED_OVER,
    PEER_EXTENSION,
    Receive,
    Request,
    Scope,
    Send,
    allow_methods,
    send_body,
    send_error,
    send_json,
)
from airlane.transports.http.auth import authenticate
from airlane.transports.http.browser import check_browser, check_json_body
from airlane.transports.http.chat import handle_chat_completions
from airlane.transports.http.config import HttpConfig
from airlane.transports.http.console import handle_console, serve_metrics_stream
from airlane.transports.http.context import AppContext, WebSocketEndpoint, WebSocketHandler
from airlane.transports.http.errors import close_code, close_reason, error_json, http_status
from airlane.transports.http.loadtest import loadtest_spec, render_loadtest_sse
from airlane.transports.http.logs import handle_logs
from airlane.transports.http.metrics import HttpMetrics
from airlane.transports.http.rooms import handle_rooms, serve_room
from airlane.transports.http.rules import handle_rules
from airlane.transports.http.schemas import handle_schemas
from airlane.transports.http.streams import handle_streams
from airlane.transports.http.webrtc.config import WebRtcConfig
from airlane.transports.http.webrtc.signalling import handle_webrtc
from airlane.transports.http.websocket import accept, serve_loadtest_ws, serve_websocket
from airlane.transports.http.yjs import YJS_PATH_PREFIX, serve_yjs

__all__ = ["AirlaneApp", "create_app"]

log = logging.getLogger("airlane.http")


# What browsers may send and read: the HTTP API's headers, plus gRPC-Web's and Connect's, the
# model metadata of the RPC API, and byte ranges of artifact files.
_CORS_ALLOW_HEADERS = (
    b"authorization, content-type, last-event-id, x-grpc-web, x-user-agent, grpc-timeout, "
    b"connect-protocol-version, connect-timeout-ms, x-model-id, x-model-version, x-request-id, "
    b"range, if-range"
)
_CORS_EXPOSE_HEADERS = (
    b"x-airlane-stream-id, grpc-status, grpc-message, grpc-status-details-bin, "
    b"content-range, accept-ranges, etag"
)
# Paths that never wait for (or are refused by) the admission: the health probe and the
# metrics scrape cost little and are what an operator needs most from an overloaded gateway.
_UNQUEUED = frozenset({"/healthz", "/metrics", "/v1/metrics/stream"})


class AirlaneApp:
    """The ASGI application. Runs the gateway's lifecycle on ASGI ``lifespan`` events."""

    def __init__(
        self,
        gateway: Gateway,
        config: HttpConfig | None = None,
        *,
        subprotocols: Mapping[str, WebSocketHandler] | None = None,
        mounts: Mapping[str, Callable[[Scope, Receive, Send], Awaitable[None]]] | None = None,
        websockets: Mapping[str, WebSocketEndpoint] | None = None,
        forwarded: ForwardedIdentity | None = None,
        webrtc: WebRtcConfig | None = None,
        lanes: LanesConfig | None = None,
        lane_flows: LaneFlows | None = None,
        shaping: ShapingCounters | None = None,
    ) -> None:
        self.gateway = gateway
        self.forwarded = forwarded
        """Client identities in ``x-forwarded-client-cert`` from trusted proxies (a mesh in
        front); None: the header is not read."""
        self.config = config or HttpConfig()
        self.metrics = HttpMetrics(gateway.stats, lambda: gateway.running_generations)
        self.context = AppContext(
            gateway,
            self.config,
            self.metrics,
            dict(subprotocols or {}),
            webrtc or WebRtcConfig(),
            lanes=lanes or LanesConfig(),
            lane_flows=lane_flows,
        )
        self.metrics.shaping = shaping
        self.mounts = dict(mounts or {})
        """HTTP paths under each prefix go to that ASGI app (gRPC-Web / Connect), after CORS;
        given by the composition root (a transport never imports another)."""
        self.websockets = dict(websockets or {})
        """WebSocket paths another transport serves (RSocket's), given by the composition
        root."""
        self.on_shutdown: list[Callable[[], Awaitable[None]]] = []
        """Run on ASGI shutdown before the gateway closes (other listeners say goodbye)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await self._lifespan(receive, send)
            return
        # Every request's set-up waits while paced work is due (`airlane.runtime.admission`),
        # but the operator's two: an overloaded gateway must still answer probes and scrapes.
        if scope["path"] not in _UNQUEUED:
            try:
                await Admission.for_loop().admit()
            except Overloaded as exc:
                await self._refuse_overloaded(scope, receive, send, exc)
                return
        if self.forwarded is not None:
            self._forwarded_peer(scope, self.forwarded)
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "websocket":
            await self._websocket(scope, receive, send)

    @staticmethod
    def _forwarded_peer(scope: Scope, forwarded: ForwardedIdentity) -> None:
        """Put the identity a trusted proxy forwarded in the scope, as the client's (the
        proxy's own TLS certificate, if any, names the proxy, not the client)."""
        header = None
        for name, value in scope.get("headers", ()):
            if name.lower() == b"x-forwarded-client-cert":
                header = value.decode("latin-1")
        client = scope.get("client")
        peer = forwarded.identity(client[0] if client else None, header)
        if peer is not None:
            scope["extensions"] = {**(scope.get("extensions") or {}), PEER_EXTENSION: peer}

    async def _refuse_overloaded(
        self, scope: Scope, receive: Receive, send: Send, exc: Overloaded
    ) -> None:
        """HTTP 503 with ``Retry-After``; a WebSocket handshake refused the same way where
        the server can (else accepted and closed with 1013, "try again later")."""
        if scope["type"] == "websocket":
            await refuse_websocket(scope, receive, send, exc)
            return
        status = await send_error(send, exc)
        self.metrics.count_request(_route_label(scope["path"]), str(status))

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await self.gateway.start()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                for hook in self.on_shutdown:
                    await hook()
                if self.context.peers is not None:  # WebRTC sessions end before the gateway
                    await self.context.peers.aclose()
                await self.gateway.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request.from_scope(scope)
        try:
            check_browser(self.config, request, websocket=True)
        except AirlaneError as exc:
            await refuse_websocket(scope, receive, send, exc)
            return
        if request.path == "/v1/ws":
            await serve_websocket(self.context, request, receive, send)
        elif request.path == "/v1/loadtest/ws":
            await serve_loadtest_ws(self.context, request, receive, send)
        elif request.path.startswith("/v1/rooms/"):
            await serve_room(self.context, request, receive, send)
        elif request.path.startswith(YJS_PATH_PREFIX):
            await serve_yjs(self.context, request, receive, send)
        elif (endpoint := self.websockets.get(request.path)) is not None:
            await self._serve_endpoint(endpoint, request, receive, send)
        else:
            await refuse_websocket(
                scope, receive, send, NotFound(f"no WebSocket endpoint {request.path[:200]}")
            )

    async def _serve_endpoint(
        self, endpoint: WebSocketEndpoint, request: Request, receive: Receive, send: Send
    ) -> None:
        """A WebSocket another transport serves: credentials on the handshake, if any, are
        checked here (a refusal closes it); without them, its protocol authenticates."""
        principal = None
        query, config = request.query, self.config
        if (
            request.bearer is not None
            or "ticket" in query
            or (config.query_tokens and "access_token" in query)
        ):
            try:
                principal = authenticate(self.gateway, config, request)
            except AirlaneError as exc:
                await refuse_websocket(request.scope, receive, send, exc)
                return
        # The path names the protocol: a subprotocol offered with it (``rsocket``) is taken.
        offered = request.scope.get("subprotocols") or []
        if not await accept(receive, send, offered[0] if offered else None):
            return
        client = request.scope.get("client")
        origin = str(client[0]) if client else None
        self.metrics.connections["ws"] += 1
        try:
            await endpoint(principal, request.peer, origin, receive, send)
        finally:
            self.metrics.connections["ws"] -= 1

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request.from_scope(scope)
        route = _route_label(request.path)
        status = 200
        origin = request.headers.get(b"origin")
        if request.method != "OPTIONS":
            try:
                check_browser(self.config, request)
            except AirlaneError as exc:
                status = await self._report(send, exc, request)
                self.metrics.count_request(route, str(status))
                return
        if origin is not None and self.config.cors_origins:
            allowed = self._cors_headers(origin)
            if request.method == "OPTIONS":
                await send_body(send, 204 if allowed else 403, b"", b"text/plain", allowed)
                return
            send = _with_headers(send, allowed)
        for prefix, mounted in self.mounts.items():
            if request.path.startswith(prefix):
                await mounted(scope, receive, send)
                self.metrics.count_request(route, "rpc")
                return
        try:
            check_json_body(request)
            await self._dispatch(request, receive, send)
        except AirlaneError as exc:
            status = await self._report(send, exc, request)
        except Exception:
            # Reached only by a bug: log it with the traceback here, never send it out.
            log.exception("unhandled error on %s %s", request.method, request.path)
            status = await self._report(send, AirlaneError("internal server error"), request)
        if not scope.get(HANDED_OVER):  # (else the sibling that answered it counts it)
            self.metrics.count_request(route, str(status))

    async def _report(self, send: Send, exc: AirlaneError, request: Request) -> int:
        """The error response for ``exc``; its status (the one it would have had, when the
        response had started and only the connection can end now)."""
        try:
            return await send_error(send, exc)
        except Exception:  # the response had started, or the client is gone
            log.debug("could not report %s on %s %s", exc.code, request.method, request.path)
            return http_status(exc.code)

    async def _dispatch(self, request: Request, receive: Receive, send: Send) -> None:
        path, method = request.path, request.method
        if path == "/healthz":
            allow_methods(method, "GET")
            await send_json(send, 200, self.gateway.health())
            return
        if path == "/metrics":
            allow_methods(method, "GET")
            await send_body(send, 200, self.metrics.render(), b"text/plain; version=0.0.4")
            return
        if path == "/v1/metrics/stream":  # what /metrics says, a sample a second
            await serve_metrics_stream(self.context, request, receive, send)
            return
        if path == "/console" or path.startswith("/console/"):  # static pages, no secrets
            await handle_console(self.context, request, send)
            return
        if path == "/v1/tickets" and "ticket" in request.query:
            self._refuse_renewal(request)
        principal = authenticate(self.gateway, self.config, request)
        if path == "/v1/tickets":
            allow_methods(method, "POST")
            ticket, ttl_s = self.gateway.issue_ticket(principal)
            await send_json(send, 200, {"ticket": ticket, "expires_in_s": ttl_s})
        elif path == "/v1/chat/completions":
            allow_methods(method, "POST")
            await handle_chat_completions(self.context, principal, request, receive, send)
        elif path == "/v1/models":
            allow_methods(method, "GET")
            await send_json(send, 200, self._models())
        elif path == "/v1/cluster":
            allow_methods(method, "GET")
            await send_json(send, 200, self.gateway.cluster())
        elif path == "/v1/streams" or path.startswith("/v1/streams/"):
            await handle_streams(self.context, principal, request, receive, send)
        elif path == "/v1/logs" or path.startswith("/v1/logs/"):
            await handle_logs(self.context, principal, request, receive, send)
        elif path == "/v1/schemas" or path.startswith("/v1/schemas/"):
            await handle_schemas(self.context, principal, request, receive, send)
        elif path == "/v1/rules" or path.startswith("/v1/rules/"):
            await handle_rules(self.context, principal, request, receive, send)
        elif path == "/v1/webrtc" or path.startswith("/v1/webrtc/"):
            await handle_webrtc(self.context, principal, request, receive, send)
        elif path.startswith("/v1/rooms/"):
            await handle_rooms(self.context, principal, request, receive, send)
        elif path == "/v1/artifacts" or path.startswith("/v1/artifacts/"):
            await handle_artifacts(self.context, principal, request, receive, send)
        elif path == "/v1/loadtest/sse":
            allow_methods(method, "GET")
            await self._loadtest_sse(principal, request, receive, send)
        else:
            raise NotFound(f"no route for {method} {path[:200]}")

    def _refuse_renewal(self, request: Request) -> NoReturn:
        """A ticket is never exchanged for another: tickets asked for with tickets would
        renew one for ever, and one that leaked (into an access log) would outlive the key or
        token it was issued for. Refused as unauthenticated, audited."""
        refusal = AirlaneError(
            "a ticket cannot ask for another ticket: POST /v1/tickets with the key, token or "
            "certificate it was issued for",
            code=ErrorCode.UNAUTHENTICATED,
        )
        origin = request.client_host
        self.gateway.audit.record("deny", refusal.code.value, reason=str(refusal), origin=origin)
        raise refusal

    async def _loadtest_sse(
        self, principal: Principal, request: Request, receive: Receive, send: Send
    ) -> None:
        spec = loadtest_spec(request)
        async with self.gateway.loadtest(principal, spec) as (stream_id, sub):
            pump = self.context.sse_pump(request, receive, send)
            await pump.start([(b"x-airlane-stream-id", stream_id.encode())])
            await pump.pump(sub, render_loadtest_sse)
            await pump.finish()

    def _cors_headers(self, origin: bytes) -> list[tuple[bytes, bytes]]:
        origins = self.config.cors_origins
        if "*" not in origins and origin.decode("latin-1") not in origins:
            return []
        return [
            (b"access-control-allow-origin", b"*" if "*" in origins else origin),
            (b"access-control-allow-headers", _CORS_ALLOW_HEADERS),
            (b"access-control-allow-methods", b"GET, POST, DELETE, OPTIONS"),
            (b"access-control-expose-headers", _CORS_EXPOSE_HEADERS),
            (b"access-control-max-age", b"600"),
            (b"vary", b"origin"),
        ]

    def _models(self) -> dict[str, object]:
        return {
            "object": "list",
            "data": [
                {"id": name, "object": "model", "created": 0, "owned_by": "airlane"}
                for name in self.config.models
            ],
        }


async def refuse_websocket(scope: Scope, receive: Receive, send: Send, exc: AirlaneError) -> None:
    """Refuse a handshake for ``exc``: with its HTTP status and JSON body where the server
    supports the ASGI denial-response extension, else accepted and closed with its close code
    and the message as the reason."""
    if (await receive())["type"] != "websocket.connect":
        return
    if "websocket.http.response" in scope.get("extensions", {}):
        body = error_json(exc)
        await send(
            {
                "type": "websocket.http.response.start",
                "status": http_status(exc.code),
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "websocket.http.response.body", "body": body})
        return
    await send({"type": "websocket.accept"})
    await send(
        {"type": "websocket.close", "code": close_code(exc.code), "reason": close_reason(str(exc))}
    )


def _with_headers(send: Send, headers: list[tuple[bytes, bytes]]) -> Send:
    """``send`` that adds ``headers`` to the response start."""
    if not headers:
        return send

    async def wrapped(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), *headers]}
        await send(message)

    return wrapped


def _route_label(path: str) -> str:
    """A bounded label for metrics: stream ids are not part of it."""
    if path.startswith("/v1/streams/"):
        return "/v1/streams/{id}"
    if path.startswith("/v1/logs/"):
        return "/v1/logs/{log}"
    if path.startswith("/v1/schemas/"):
        return "/v1/schemas/{subject}"
    if path.startswith("/v1/rules/"):
        return "/v1/rules/{name}"
    if path.startswith("/v1/webrtc/"):
        return "/v1/webrtc/{session}"
    if path.startswith("/v1/rooms/"):
        return "/v1/rooms/{room}"
    if path.startswith("/v1/artifacts/"):
        return "/v1/artifacts/{name}"
    if path == "/console" or path.startswith("/console/"):
        return "/console"
    if path in (
        "/healthz",
        "/metrics",
        "/v1/chat/completions",
        "/v1/models",
        "/v1/streams",
        "/v1/logs",
        "/v1/schemas",
        "/v1/rules",
        "/v1/webrtc",
        "/v1/artifacts",
        "/v1/loadtest/sse",
        "/v1/tickets",
        "/v1/cluster",
        "/v1/metrics/stream",
    ):
        return path
    return "other"


def create_app(gateway: Gateway, config: HttpConfig | None = None) -> AirlaneApp:
    """The ASGI application for ``gateway``."""
    return AirlaneApp(gateway, config)
