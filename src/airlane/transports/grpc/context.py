"""The model and request identity a gRPC call carries in its metadata, for backends and logs.

`MetadataInterceptor` reads ``x-model-id``, ``x-model-version`` and ``x-request-id`` from the
call's metadata into `airlane.runtime.callcontext.CALL` for the duration of the handler (the
seed's Go interceptor indexes the metadata with ``[0]`` and panics when a header is missing;
here a missing header is simply absent). A repeated or over-long one refuses the call with
INVALID_ARGUMENT and the code ``invalid_metadata`` in the ``airlane-error-code`` trailer, as
every refusal carries its code (`airlane.transports.grpc.errors`).

It wraps every kind of handler grpcio serves, whatever its shape: a unary behaviour that
returns or awaits its response, and a streaming one that is an async generator, a plain
iterator, or a coroutine that writes its responses with ``context.write`` and returns None
(``grpc.health.v1.Health/Watch`` is one).
"""

from __future__ import annotations

import contextlib
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import grpc
from grpc import aio

from airlane.core.errors import AirlaneError, BadRequest, ErrorCode
from airlane.gateway import RequestFacts
from airlane.runtime.callcontext import CALL, CallContext, new_request_id
from airlane.transports.grpc.errors import abort

__all__ = [
    "MAX_METADATA_CHARS",
    "METADATA_KEYS",
    "Malformed",
    "MetadataInterceptor",
    "bearer_token",
    "checked_call",
    "request_facts",
]

log = logging.getLogger("airlane.grpc")

METADATA_KEYS = ("x-model-id", "x-model-version", "x-request-id")
"""The metadata the interceptor reads (each at most once)."""
MAX_METADATA_CHARS = 256
"""The longest value the interceptor accepts for each of `METADATA_KEYS`."""


def bearer_token(metadata: Iterable[tuple[str, str | bytes]] | None) -> str | None:
    """The token of an ``authorization: Bearer ...`` entry in a call's metadata (the last
    such entry), or None."""
    bearer = None
    for key, value in metadata or ():
        if key == "authorization" and isinstance(value, str):
            scheme, _, token = value.partition(" ")
            bearer = token.strip() if scheme.lower() == "bearer" else None
    return bearer


def call_context(
    metadata: tuple[tuple[str, str | bytes], ...], rpc: str | None = None, wire: str = "grpc"
) -> CallContext | AirlaneError:
    """The context in ``metadata`` of a call to ``rpc``, or the refusal that says how it is
    malformed."""
    seen: dict[str, str] = {}
    for key, value in metadata:
        if key not in METADATA_KEYS:
            continue
        if key in seen:
            return _bad_metadata(f"metadata {key!r} appears more than once", key)
        text = value.decode(errors="replace") if isinstance(value, bytes) else value
        if len(text) > MAX_METADATA_CHARS:
            return _bad_metadata(
                f"metadata {key!r} is longer than {MAX_METADATA_CHARS} characters", key
            )
        seen[key] = text
    return CallContext(
        model_id=seen.get("x-model-id"),
        model_version=seen.get("x-model-version"),
        request_id=seen.get("x-request-id") or new_request_id(),
        rpc=rpc,
        wire=wire,
    )


class MetadataInterceptor(aio.ServerInterceptor):  # type: ignore[misc]
    """Wraps every handler so that it runs with its call's `CallContext` set."""

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None:
            return None
        context = call_context(tuple(details.invocation_metadata or ()), details.method)
        if isinstance(context, AirlaneError):  # said after authentication (`checked_call`)
            context = CallContext(rpc=details.method, refusal=context)
        return _wrap(handler, context)


def checked_call() -> None:
    """Refuse the current call if its metadata was malformed (`CallContext.refusal`): called
    once its caller is authenticated."""
    call = CALL.get()
    if call is not None and call.refusal is not None:
        raise call.refusal


def request_facts(metadata: Iterable[tuple[str, str | bytes]]) -> RequestFacts:
    """What a policy rule can match of the current call: its method (as the path) and its
    text metadata."""
    call = CALL.get()
    pairs = ((key, value) for key, value in metadata if isinstance(value, str))
    if call is None:
        return RequestFacts.of("grpc", pairs)
    return RequestFacts.of(call.wire, pairs, path=call.rpc)


class Malformed:
    """What a request message that does not parse becomes (grpcio would otherwise answer
    UNKNOWN, naming the parser's exception, and log its traceback): the call is refused with
    INVALID_ARGUMENT and ``invalid_message``. In a client stream, reading it raises that."""

    __slots__ = ("type_name",)

    def __init__(self, type_name: str) -> None:
        self.type_name = type_name

    def error(self) -> AirlaneError:
        """The refusal."""
        return BadRequest(
            f"the request is not a valid {self.type_name} message",
            code=ErrorCode.INVALID_MESSAGE,
        )


def _parsing(
    deserialize: Callable[[bytes], Any] | None,
) -> Callable[[bytes], Any] | None:
    """``deserialize``, answering `Malformed` instead of raising on bytes that do not parse."""
    if deserialize is None:
        return None
    owner = getattr(deserialize, "__self__", None)
    descriptor = getattr(owner, "DESCRIPTOR", None)
    type_name = str(getattr(descriptor, "full_name", "request"))

    def parse(data: bytes) -> Any:
        try:
            return deserialize(data)
        except Exception:  # DecodeError, or whatever the parser raises on garbage
            return Malformed(type_name)

    return parse


def _bad_metadata(message: str, key: str) -> AirlaneError:
    return BadRequest(message, code=ErrorCode.INVALID_METADATA, param=key)


def _wrap(handler: grpc.RpcMethodHandler, context: CallContext) -> grpc.RpcMethodHandler:
    """The same handler, each behaviour running under ``context`` (or refusing the call)."""

    def unary(behaviour: Callable[..., Any]) -> Callable[..., Any]:
        async def run(request: Any, servicer_context: aio.ServicerContext) -> Any:
            if isinstance(request, Malformed):
                await abort(servicer_context, request.error())
            token = CALL.set(context)
            try:
                result = behaviour(request, servicer_context)
                return await result if inspect.isawaitable(result) else result
            finally:
                CALL.reset(token)

        return run

    def streaming(behaviour: Callable[..., Any]) -> Callable[..., Any]:
        if inspect.iscoroutinefunction(behaviour):
            # It writes its responses with context.write and returns None: grpcio runs a
            # coroutine handler that way, so the wrapper must be a coroutine too.
            return unary(behaviour)

        async def run(request: Any, servicer_context: aio.ServicerContext) -> Any:
            if isinstance(request, Malformed):
                await abort(servicer_context, request.error())
            # No reset: grpcio may close a cancelled call's response generator later, from
            # another task, where the token would be invalid; each call runs in a task (and
            # context) of its own, so nothing leaks.
            CALL.set(context)
            responses = behaviour(request, servicer_context)
            if hasattr(responses, "__aiter__"):
                async with contextlib.aclosing(responses):
                    async for response in responses:
                        yield response
            else:  # a handler that returns a plain iterator
                for response in responses:
                    yield response

        return run

    handler = handler._replace(request_deserializer=_parsing(handler.request_deserializer))
    if handler.unary_unary:
        return handler._replace(unary_unary=unary(handler.unary_unary))
    if handler.stream_unary:
        return handler._replace(stream_unary=unary(handler.stream_unary))
    if handler.unary_stream:
        return handler._replace(unary_stream=streaming(handler.unary_stream))
    return handler._replace(stream_stream=streaming(handler.stream_stream))
