"""Python clients for an Airlane gateway.

- `AirlaneClient`: OpenAI-style chat completions and stream events over HTTP + SSE; a dropped
  connection is resumed from the last event seen, so callers get exact text.
- `WsClient`: many streams over one WebSocket, re-subscribed after a reconnect.
- `AircClient`: the same streams over the AIRC binary protocol, on TCP or a WebSocket.
- `GrpcClient`: the same streams over the native gRPC service (``airlane.v1.Airlane``).
- `RSocketClient`: the RSocket transport's routes on one TCP connection, resumed (or
  re-subscribed from the last event) after a drop.
- `H3Client`: any of the HTTP API's requests over HTTP/3 (QUIC), many on one connection.
- `WebTransportClient`: the ``/v1/ws`` multiplex over WebTransport (HTTP/3): a QUIC stream
  per subscription, datagrams with optional parity.
- `TextAccumulator`: a stream's text rebuilt from its events (snapshots replace, deltas append).

Errors are described in `airlane.client.errors`. Each client is imported on first use
(`airlane.runtime.lazy`): a program that speaks SSE loads httpx, not websockets or grpcio.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airlane.client import errors
from airlane.runtime.lazy import lazy_exports

if TYPE_CHECKING:
    from airlane.client.accumulator import TextAccumulator
    from airlane.client.airc import AircClient
    from airlane.client.errors import (
        ClientClosed,
        ClientError,
        ConnectFailed,
        ConnectionLost,
        GatewayOverloaded,
        ProtocolViolation,
        RequestRejected,
        ResumeFailed,
        StreamFailed,
        StreamNotFound,
    )
    from airlane.client.events import ChatDelta, StreamEvent
    from airlane.client.grpc import GrpcClient
    from airlane.client.h3 import H3Client, H3Response
    from airlane.client.retry import RetryPolicy
    from airlane.client.rsocket import RSocketClient, RSocketStream
    from airlane.client.sse import AirlaneClient
    from airlane.client.subscription import WsSubscription
    from airlane.client.webtransport import WebTransportClient
    from airlane.client.ws import WsClient

# Imported on first use: a program that speaks one transport does not load the others'
# libraries (httpx, websockets, grpcio, aioquic).
_HOMES = {
    "airlane.client.accumulator": ("TextAccumulator",),
    "airlane.client.airc": ("AircClient",),
    "airlane.client.errors": tuple(errors.__all__),  # every one of them
    "airlane.client.events": ("ChatDelta", "StreamEvent"),
    "airlane.client.grpc": ("GrpcClient",),
    "airlane.client.h3": ("H3Client", "H3Response"),
    "airlane.client.retry": ("RetryPolicy",),
    "airlane.client.rsocket": ("RSocketClient", "RSocketStream"),
    "airlane.client.sse": ("AirlaneClient",),
    "airlane.client.subscription": ("WsSubscription",),
    "airlane.client.webtransport": ("WebTransportClient",),
    "airlane.client.ws": ("WsClient",),
}

__all__ = [
    "AircClient",
    "AirlaneClient",
    "ChatDelta",
    "ClientClosed",
    "ClientError",
    "ConnectFailed",
    "ConnectionLost",
    "GatewayOverloaded",
    "GrpcClient",
    "H3Client",
    "H3Response",
    "ProtocolViolation",
    "RSocketClient",
    "RSocketStream",
    "RequestRejected",
    "ResumeFailed",
    "RetryPolicy",
    "StreamEvent",
    "StreamFailed",
    "StreamNotFound",
    "TextAccumulator",
    "WebTransportClient",
    "WsClient",
    "WsSubscription",
]

__getattr__, __dir__ = lazy_exports(__name__, _HOMES, __all__)
