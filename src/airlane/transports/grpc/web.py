"""gRPC-Web and Connect for browsers: `AirlaneService` as an ASGI application (connectrpc).

Mounted on the HTTP API's own app and port (``POST /airlane.v1.Airlane/<Method>``), it serves
the Connect protocol (JSON or binary, unary and streaming), gRPC-Web binary
(``application/grpc-web+proto``) and, through a small shim, gRPC-Web text
(``application/grpc-web-text``, base64: what Google's grpc-web JavaScript uses for server
streaming; connectrpc has no text mode). Native gRPC stays on its own HTTP/2 listener
(`airlane.transports.grpc.GrpcServer`): an HTTP/1.1 ASGI server cannot send trailers.

The same servicer serves both, unchanged: endpoints are built from the service descriptor,
handlers get a `_Context` with the parts of ``grpc.aio.ServicerContext`` they use, streamed
responses may be pre-serialized bytes (passed through by the binary codec, parsed for JSON),
and an interceptor sets the call context (``x-model-id`` ...) and turns anything unexpected
into INTERNAL without leaking its text.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import struct
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextvars import ContextVar
from typing import Any, NoReturn
from urllib.parse import quote

import grpc
from connectrpc.code import Code
from connectrpc.compat import google_protobuf_json_codec
from connectrpc.errors import ConnectError
from connectrpc.method import IdempotencyLevel, MethodInfo, StreamType
from connectrpc.request import RequestContext
from connectrpc.server import ConnectASGIApplication, Endpoint
from google.protobuf import message_factory
from google.protobuf.descriptor import MethodDescriptor
from google.protobuf.message import Message

from airlane.core.errors import AirlaneError
from airlane.gateway import Gateway, PeerIdentity
from airlane.runtime.callcontext import CALL, CallContext
from airlane.transports.grpc.config import GrpcServerConfig
from airlane.transports.grpc.context import call_context
from airlane.transports.grpc.service import AirlaneService
from airlane.v1 import service_pb2

__all__ = ["GRPC_WEB_PREFIX", "grpc_web_app"]

log = logging.getLogger("airlane.grpc")

_SERVICE = service_pb2.DESCRIPTOR.services_by_name["Airlane"]
GRPC_WEB_PREFIX = f"/{_SERVICE.full_name}/"
"""Paths under this prefix go to the gRPC-Web / Connect application."""

Scope = MutableMapping[str, Any]
Message_ = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message_]]
Send = Callable[[Message_], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

_CONNECT_CODE = {
    status: Code.CANCELED if status is grpc.StatusCode.CANCELLED else Code[status.name]
    for status in grpc.StatusCode
    if status is not grpc.StatusCode.OK
}
_STREAM_TYPE = {
    (False, False): StreamType.UNARY,
    (False, True): StreamType.SERVER_STREAM,
    (True, False): StreamType.CLIENT_STREAM,
    (True, True): StreamType.BIDI_STREAM,
}


_PEER: ContextVar[PeerIdentity | None] = ContextVar("grpc_web_peer", default=None)
"""The identity of the request being served, as the HTTP server found it."""


class _WebService(AirlaneService):
    """`AirlaneService` on the HTTP port: the caller's certificate identity is the one the
    HTTP server found (its TLS client certificate's, or what a trusted proxy forwarded), read
    from each request's scope by the ``peer`` function `grpc_web_app` is given, so mTLS,
    SPIFFE rules and identity tenants hold here as on every other wire."""

    def _identity(self, context: Any) -> PeerIdentity | None:
        return _PEER.get()


class _BinaryCodec:
    """Protobuf binary, letting pre-serialized responses through as they are."""

    def name(self) -> str:
        return "proto"

    def encode(self, message: Any) -> bytes:
        return message if isinstance(message, bytes) else bytes(message.SerializeToString())

    def decode(self, data: bytes | bytearray, message_class: type[Message]) -> Message:
        return message_class.FromString(bytes(data))


class _Context:
    """What `AirlaneService` uses of ``grpc.aio.ServicerContext``, over a Connect request."""

    def __init__(self, ctx: RequestContext[Any, Any]) -> None:
        self._ctx = ctx

    def peer(self) -> str:
        """gRPC's peer string (``ipv4:host:port``, ``ipv6:[host]:port``) of the HTTP client,
        for the audit log; empty when the server did not say."""
        address = self._ctx.client_address
        if not address:
            return ""
        host, _, port = address.rpartition(":")
        return f"ipv6:[{host}]:{port}" if ":" in host else f"ipv4:{host}:{port}"

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        return tuple((key.lower(), value) for key, value in self._ctx.request_headers.allitems())

    async def abort(
        self,
        code: grpc.StatusCode,
        details: str = "",
        trailing_metadata: tuple[tuple[str, str], ...] = (),
    ) -> NoReturn:
        # The error's own code travels as on the native server: in the trailers
        # (`ERROR_CODE_METADATA`; Connect's unary protocol sends them as ``trailer-`` headers).
        for key, value in trailing_metadata:
            self._ctx.response_trailers[key] = value
        raise ConnectError(_CONNECT_CODE[code], details)


class _CallMetadata:
    """Sets `airlane.runtime.callcontext.CALL` from the request headers (refusing a repeated
    one, as the native server does), and reports an unexpected failure as INTERNAL."""

    async def on_start(self, ctx: RequestContext[Any, Any]) -> object:
        headers = ctx.request_headers
        metadata = tuple(
            (key, value)
            for key in ("x-model-id", "x-model-version", "x-request-id")
            for value in headers.getall(key)
        )
        rpc = f"/{ctx.method.service_name}/{ctx.method.name}"
        context = call_context(metadata, rpc, "grpc-web")
        if isinstance(context, AirlaneError):  # said after authentication (`checked_call`)
            context = CallContext(rpc=rpc, wire="grpc-web", refusal=context)
        return CALL.set(context)

    async def on_end(
        self, token: object, ctx: RequestContext[Any, Any], error: Exception | None
    ) -> None:
        # No CALL.reset(token): a streaming call's end may run in another task (see context.py).
        if error is not None and not isinstance(error, ConnectError):
            log.error("gRPC-Web call failed", exc_info=error)
            raise ConnectError(Code.INTERNAL, "internal error") from error


def _endpoint(method: MethodDescriptor, service: AirlaneService) -> Any:
    request_class = message_factory.GetMessageClass(method.input_type)
    response_class = message_factory.GetMessageClass(method.output_type)
    behaviour = getattr(service, method.name)
    stream_type = _STREAM_TYPE[(method.client_streaming, method.server_streaming)]
    info = MethodInfo(
        name=method.name,
        service_name=_SERVICE.full_name,
        input=request_class,
        output=response_class,
        idempotency_level=IdempotencyLevel.UNKNOWN,
        stream_type=stream_type,
    )

    async def single(request: Any, ctx: RequestContext[Any, Any]) -> Any:
        return await behaviour(request, _Context(ctx))

    async def streaming(request: Any, ctx: RequestContext[Any, Any]) -> AsyncIterator[Any]:
        # JSON needs message objects; the binary codec takes the servicer's bytes as they are.
        as_json = ctx.request_headers.get("content-type", "").endswith("json")
        responses = behaviour(request, _Context(ctx))
        async with contextlib.aclosing(responses):
            async for item in responses:
                yield (
                    response_class.FromString(item) if as_json and isinstance(item, bytes) else item
                )

    if stream_type is StreamType.UNARY:
        return Endpoint.unary(method=info, function=single)
    if stream_type is StreamType.CLIENT_STREAM:
        return Endpoint.client_stream(method=info, function=single)
    if stream_type is StreamType.SERVER_STREAM:
        return Endpoint.server_stream(method=info, function=streaming)
    return Endpoint.bidi_stream(method=info, function=streaming)


class _ServiceApp(ConnectASGIApplication[AirlaneService]):
    """connectrpc's ASGI application for the one service (it asks subclasses for a path)."""

    @property
    def path(self) -> str:
        """The service's path prefix, without the trailing slash."""
        return GRPC_WEB_PREFIX.rstrip("/")


def grpc_web_app(
    gateway: Gateway,
    config: GrpcServerConfig | None = None,
    *,
    peer: Callable[[Scope], PeerIdentity | None],
) -> ASGIApp:
    """The gRPC-Web / Connect application for `GRPC_WEB_PREFIX` paths; ``peer`` reads the
    caller's certificate identity from a request's scope (where the HTTP server put it)."""
    config = config or GrpcServerConfig()
    service = _WebService(gateway, config)
    app = _ServiceApp(
        service=service,
        endpoints=lambda svc: {
            f"{GRPC_WEB_PREFIX}{method.name}": _endpoint(method, svc) for method in _SERVICE.methods
        },
        interceptors=[_CallMetadata()],
        read_max_bytes=config.max_message_bytes,
        codecs=[_BinaryCodec(), google_protobuf_json_codec()],
    )
    return _grpc_web_text(_with_peer(app, peer), config.max_message_bytes)


def _with_peer(app: ASGIApp, peer: Callable[[Scope], PeerIdentity | None]) -> ASGIApp:
    """``app`` with each request's certificate identity in `_PEER` (set for every request,
    so a kept-alive connection's next one never sees the last one's)."""

    async def serve(scope: Scope, receive: Receive, send: Send) -> None:
        _PEER.set(peer(scope))
        await app(scope, receive, send)

    return serve


_TEXT = b"application/grpc-web-text"


def _grpc_web_text(app: ASGIApp, max_message_bytes: int) -> ASGIApp:
    """gRPC-Web text (base64) around the binary gRPC-Web of ``app``: the request body is
    decoded whole (browsers send unary requests at once), and each response chunk is encoded
    on its own, padded (as Envoy's filter does). A body longer than one message of
    ``max_message_bytes`` can be, in base64, is refused as it passes that size, before
    anything more of it is read or held."""
    limit = (max_message_bytes + 5 + 2) // 3 * 4  # one framed message, base64-encoded

    async def shim(scope: Scope, receive: Receive, send: Send) -> None:
        headers = scope.get("headers", ())
        content_type = next((v for k, v in headers if k == b"content-type"), b"")
        if scope["type"] != "http" or not content_type.startswith(_TEXT):
            await app(scope, receive, send)
            return
        binary = b"application/grpc-web" + (content_type[len(_TEXT) :] or b"+proto")
        scope = dict(
            scope, headers=[(k, binary if k == b"content-type" else v) for k, v in headers]
        )
        raw = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            raw += message.get("body", b"")
            if len(raw) > limit:
                await _refuse_text(
                    send,
                    content_type,
                    f"the request is larger than {max_message_bytes:,} bytes, the limit",
                )
                return
            if not message.get("more_body"):
                break
        try:
            body = base64.b64decode(bytes(raw))
        except ValueError:
            body = b""  # connectrpc answers "unary request has zero messages"
        delivered = False

        async def receive_decoded() -> Message_:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # then http.disconnect, which cancels the handler

        async def send_encoded(message: Message_) -> None:
            if message["type"] == "http.response.start":
                text = content_type or _TEXT + b"+proto"
                message = dict(
                    message,
                    headers=[
                        (k, text if k == b"content-type" else v) for k, v in message["headers"]
                    ],
                )
            elif message["type"] == "http.response.body" and message.get("body"):
                message = dict(message, body=base64.b64encode(message["body"]))
            await send(message)

        await app(scope, receive_decoded, send_encoded)

    return shim


async def _refuse_text(send: Send, content_type: bytes, message: str) -> None:
    """A gRPC-Web text answer of trailers only: RESOURCE_EXHAUSTED with ``message``."""
    trailer = (
        f"grpc-status: 8\r\ngrpc-message: {quote(message)}\r\n"
        "airlane-error-code: body_too_large\r\n"
    ).encode()
    frame = struct.pack(">BI", 0x80, len(trailer)) + trailer
    headers = [(b"content-type", content_type or _TEXT + b"+proto")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": base64.b64encode(frame)})
