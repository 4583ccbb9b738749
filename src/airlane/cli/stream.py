"""``airlane stream``: print a completion, or follow an existing stream, resuming by itself.

Text deltas are printed as they arrive (reasoning dimmed); other events of a followed stream
(agent ``message`` events, ``status``) are printed as JSON lines. When the connection drops,
the client resumes from the last event it saw, so the printed text has no gap and no repeat.
A summary (stream id, last resume token, reconnections) goes to stderr at the end.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar
from urllib.parse import urlsplit

import orjson
import typer
from rich.console import Console

from airlane.cli.reach import unreachable

# Each transport's client is imported where it is used: a stream over one transport does not
# load the others' libraries (and other commands load none of them).
from airlane.client.accumulator import TextAccumulator
from airlane.client.errors import ClientError, ConnectFailed, RequestRejected, StreamFailed
from airlane.client.events import StreamEvent
from airlane.server.address import DEFAULT_HOST, DEFAULT_PORT

if TYPE_CHECKING:
    from airlane.client.airc import AircClient
    from airlane.client.rsocket import RSocketClient

__all__ = ["StreamOutcome", "stream_command"]

DEFAULT_URL = f"http://{DEFAULT_HOST}:{DEFAULT_PORT}"
T = TypeVar("T")


@dataclass(slots=True)
class StreamOutcome:
    """How a stream ended, for the summary line."""

    stream_id: str = "?"
    last_id: str | None = None
    finish_reason: str | None = None
    reconnects: int = 0


class _Printer:
    """Writes events to the terminal as they come."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.state = TextAccumulator()

    def text(self, text: str, channel: str = "content") -> None:
        style = "dim" if channel == "reasoning" else None
        self.console.print(text, end="", style=style, soft_wrap=True, markup=False, highlight=False)

    def event(self, event: StreamEvent) -> None:
        if event.kind == "snapshot":
            # A snapshot replaces what a reader had; printing its text continues the output.
            before = self.state.content
            self.state.apply(event)
            after = self.state.content
            self.text(after[len(before) :] if after.startswith(before) else "\n" + after)
            return
        self.state.apply(event)
        if event.kind == "delta":
            self.text(event.text, event.channel)
        elif event.kind in ("message", "status", "tool_call"):
            self.console.print(orjson.dumps(event.data).decode(), markup=False, highlight=False)
        elif event.kind == "error":
            message = event.data.get("message", "the stream failed")
            raise StreamFailed(str(message), code=event.data.get("code"))


async def _follow_sse(
    url: str, api_key: str | None, stream_id: str, resume: str | None, printer: _Printer
) -> StreamOutcome:
    from airlane.client.sse import AirlaneClient

    async with AirlaneClient(url, api_key) as client:
        async for event in client.events(stream_id, resume=resume):
            printer.event(event)
        return StreamOutcome(stream_id, client.last_id, printer.state.finish_reason, client.resumes)


async def _follow_ws(
    url: str, api_key: str | None, stream_id: str, resume: str | None, printer: _Printer
) -> StreamOutcome:
    from airlane.client.ws import WsClient

    async with WsClient(url, api_key) as ws:
        subscription = await ws.subscribe(stream_id, resume)
        async for event in subscription:
            printer.event(event)
        last = subscription.last_id
        return StreamOutcome(stream_id, last, printer.state.finish_reason, ws.reconnects)


async def _chat_sse(
    url: str, api_key: str | None, request: dict[str, Any], printer: _Printer
) -> StreamOutcome:
    from airlane.client.sse import AirlaneClient

    async with AirlaneClient(url, api_key) as client:
        params = dict(request)
        pieces = client.chat_stream(params.pop("model"), params.pop("messages"), **params)
        async for piece in pieces:
            printer.state.apply_delta(piece)
            if piece.replace:
                printer.text("\n")
            printer.text(piece.text, piece.channel)
        outcome = StreamOutcome(client.stream_id or "?", client.last_id)
        outcome.finish_reason, outcome.reconnects = printer.state.finish_reason, client.resumes
        return outcome


async def _chat_ws(
    url: str, api_key: str | None, request: dict[str, Any], printer: _Printer
) -> StreamOutcome:
    from airlane.client.ws import WsClient

    async with WsClient(url, api_key) as ws:
        subscription = await ws.generate(request)
        async for event in subscription:
            printer.event(event)
        last = subscription.last_id
        stream_id = subscription.stream_id
        return StreamOutcome(stream_id, last, printer.state.finish_reason, ws.reconnects)


H3_RECONNECTS = 5
"""Reconnections an HTTP/3 stream makes (resuming from its last event) before it gives up."""


async def _follow_h3(
    url: str, api_key: str | None, stream_id: str, resume: str | None, printer: _Printer
) -> StreamOutcome:
    """Follow ``stream_id`` over HTTP/3 (UDP, the URL's port), reconnecting with its last
    event's id when the connection is lost."""
    from airlane.client.errors import ConnectionLost
    from airlane.client.h3 import H3Client

    parts = urlsplit(url)
    host, port = parts.hostname or DEFAULT_HOST, parts.port or DEFAULT_PORT
    headers = [("authorization", f"Bearer {api_key}")] if api_key else []
    outcome = StreamOutcome(stream_id, resume)
    while True:
        try:
            async with await H3Client.connect(host, port, verify=False) as client:
                async for event in client.events(
                    stream_id, resume=outcome.last_id, headers=headers
                ):
                    printer.event(event)
                    outcome.last_id = client.last_id
                outcome.finish_reason = printer.state.finish_reason
                return outcome
        except ConnectionLost:
            outcome.reconnects += 1
            if outcome.reconnects > H3_RECONNECTS:
                raise


async def _chat_h3(
    url: str, api_key: str | None, request: dict[str, Any], printer: _Printer
) -> StreamOutcome:
    """Start a generation over HTTP/3 (the streams API), then follow it."""
    from airlane.client.h3 import H3Client

    parts = urlsplit(url)
    host, port = parts.hostname or DEFAULT_HOST, parts.port or DEFAULT_PORT
    headers = [("authorization", f"Bearer {api_key}")] if api_key else []
    async with await H3Client.connect(host, port, verify=False) as client:
        stream_id = await client.start_stream(request, headers=headers)
    return await _follow_h3(url, api_key, stream_id, None, printer)


async def _follow_wt(
    url: str,
    api_key: str | None,
    stream_id: str,
    resume: str | None,
    printer: _Printer,
    client: Any = None,
) -> StreamOutcome:
    """Follow ``stream_id`` over WebTransport (HTTP/3, the URL's port), each event from the
    subscription's own QUIC stream; a lost session is reopened from the last event's id.
    ``client``: a session already subscribed to it (the one that started the generation)."""
    from airlane.client.errors import ConnectionLost
    from airlane.client.webtransport import WebTransportClient

    parts = urlsplit(url)
    host, port = parts.hostname or DEFAULT_HOST, parts.port or DEFAULT_PORT
    headers = [("authorization", f"Bearer {api_key}")] if api_key else []
    outcome = StreamOutcome(stream_id, resume)
    while True:
        try:
            if client is None:
                client = await WebTransportClient.connect(host, port, verify=False,
                                                          headers=headers)  # fmt: skip
                op = {"op": "subscribe", "stream": stream_id, "from": outcome.last_id}
                reply = await client.call(op)
                if reply.get("op") == "error":
                    raise _rejected(reply)
                if reply.get("ended"):
                    break
            async for message in client.events():
                if message.get("op") != "event" or message.get("stream") != stream_id:
                    continue
                event = StreamEvent.from_dict(message["event"], message.get("id"))
                printer.event(event)
                outcome.last_id = message.get("id") or outcome.last_id
                if event.terminal:
                    break
            else:
                raise ConnectionLost(client.closed or "the session ended")
            break
        except ConnectionLost:
            outcome.reconnects += 1
            if outcome.reconnects > H3_RECONNECTS:
                raise
        finally:
            if client is not None:
                await client.aclose()
                client = None
    outcome.finish_reason = printer.state.finish_reason
    return outcome


async def _chat_wt(
    url: str, api_key: str | None, request: dict[str, Any], printer: _Printer
) -> StreamOutcome:
    """Start a generation over WebTransport and follow it on the same session."""
    from airlane.client.webtransport import WebTransportClient

    parts = urlsplit(url)
    host, port = parts.hostname or DEFAULT_HOST, parts.port or DEFAULT_PORT
    headers = [("authorization", f"Bearer {api_key}")] if api_key else []
    client = await WebTransportClient.connect(host, port, verify=False, headers=headers)
    try:
        reply = await client.call({"op": "generate", "request": request})
    except BaseException:
        await client.aclose()
        raise
    if reply.get("op") == "error":
        await client.aclose()
        raise _rejected(reply)
    return await _follow_wt(url, api_key, str(reply["stream"]), None, printer, client)


def _rejected(reply: dict[str, Any]) -> RequestRejected:
    """The gateway's ``error`` reply as the client's error."""
    return RequestRejected(str(reply.get("message")), code=str(reply.get("code")))


async def _open_airc(url: str, api_key: str | None, transport: str) -> AircClient:
    from airlane.client.airc import AircClient

    if transport == "airc-ws":
        return await AircClient.websocket(url, api_key)
    parts = urlsplit(url)
    if parts.scheme == "tcp":
        host, port = parts.hostname or "127.0.0.1", parts.port or 0
    else:  # the gateway's default: AIRC/TCP on the HTTP port + 1
        host, port = parts.hostname or "127.0.0.1", (parts.port or 80) + 1
    return await AircClient.tcp(host, port, api_key)


async def _follow_airc(
    url: str,
    api_key: str | None,
    transport: str,
    stream_id: str,
    resume: str | None,
    printer: _Printer,
) -> StreamOutcome:
    async with await _open_airc(url, api_key, transport) as client:
        subscription = await client.subscribe(stream_id, resume)
        async for event in subscription:
            printer.event(event)
        return StreamOutcome(stream_id, subscription.last_id, printer.state.finish_reason, 0)


async def _chat_airc(
    url: str, api_key: str | None, transport: str, request: dict[str, Any], printer: _Printer
) -> StreamOutcome:
    async with await _open_airc(url, api_key, transport) as client:
        subscription = await client.generate(request)
        async for event in subscription:
            printer.event(event)
        last, stream_id = subscription.last_id, subscription.stream_id
        return StreamOutcome(stream_id, last, printer.state.finish_reason, 0)


async def _open_rsocket(url: str, api_key: str | None) -> RSocketClient:
    from airlane.client.rsocket import RSocketClient

    parts = urlsplit(url)
    if parts.scheme == "tcp":
        host, port = parts.hostname or "127.0.0.1", parts.port or 0
    else:  # the gateway's default: RSocket/TCP on the HTTP port + 3
        host, port = parts.hostname or "127.0.0.1", (parts.port or 80) + 3
    return await RSocketClient.tcp(host, port, api_key)


async def _follow_rsocket(
    url: str, api_key: str | None, stream_id: str, resume: str | None, printer: _Printer
) -> StreamOutcome:
    async with await _open_rsocket(url, api_key) as client:
        stream = await client.subscribe(stream_id, resume)
        async for event in stream:
            printer.event(event)
        reconnects = client.resumed + client.fell_back
        return StreamOutcome(stream_id, stream.last_id, printer.state.finish_reason, reconnects)


async def _chat_rsocket(
    url: str, api_key: str | None, request: dict[str, Any], printer: _Printer
) -> StreamOutcome:
    async with await _open_rsocket(url, api_key) as client:
        stream = client.generate(request)
        async for event in stream:
            printer.event(event)
        reconnects = client.resumed + client.fell_back
        stream_id = stream.stream_id or "?"
        return StreamOutcome(stream_id, stream.last_id, printer.state.finish_reason, reconnects)


def _grpc_target(url: str) -> str:
    """``host:port`` of the gRPC listener: given as such, or the HTTP URL's port + 2."""
    if "://" not in url:
        return url
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    return f"{f'[{host}]' if ':' in host else host}:{(parts.port or 80) + 2}"


async def _follow_grpc(
    url: str, api_key: str | None, stream_id: str, resume: str | None, printer: _Printer
) -> StreamOutcome:
    from airlane.client.grpc import GrpcClient

    async with GrpcClient(_grpc_target(url), api_key) as client:
        last = resume
        async for event in client.subscribe(stream_id, resume):
            printer.event(event)
            last = event.id
        return StreamOutcome(stream_id, last, printer.state.finish_reason, 0)


async def _chat_grpc(
    url: str, api_key: str | None, request: dict[str, Any], printer: _Printer
) -> StreamOutcome:
    from airlane.client.grpc import GrpcClient

    async with GrpcClient(_grpc_target(url), api_key) as client:
        last = None
        async for event in client.generate(request):
            printer.event(event)
            last = event.id
        stream_id = client.last_stream_id or "?"
        return StreamOutcome(stream_id, last, printer.state.finish_reason, 0)


def stream_command(
    url: Annotated[
        str,
        typer.Option(help="The gateway (for airc: tcp://host:port, or its HTTP URL: port + 1)."),
    ] = DEFAULT_URL,
    transport: Annotated[
        Literal["sse", "ws", "airc", "airc-ws", "grpc", "h3", "wt", "rsocket"],
        typer.Option(
            help="sse (HTTP), ws (WebSocket), airc (AIRC/TCP), airc-ws (AIRC over WebSocket), "
            "grpc (host:port, or the HTTP URL: port + 2), h3 (HTTP/3 on the URL's port, UDP), "
            "wt (WebTransport, likewise) or rsocket (tcp://host:port, or the HTTP URL: "
            "port + 3)."
        ),
    ] = "sse",
    prompt: Annotated[str, typer.Option(help="The user message.")] = "Tell me a short story.",
    model: Annotated[str, typer.Option(help="Model name.")] = "airlane-synthetic",
    max_tokens: Annotated[int | None, typer.Option(help="Completion length.", min=1)] = None,
    stream_id: Annotated[
        str | None, typer.Option("--stream-id", help="Follow this existing stream instead.")
    ] = None,
    resume: Annotated[
        str | None, typer.Option("--from", help="Resume token <epoch>:<seq> to start after.")
    ] = None,
    api_key: Annotated[
        str | None, typer.Option(envvar="AIRLANE_API_KEY", help="Bearer key for the gateway.")
    ] = None,
) -> None:
    """Print a completion (or follow --stream-id), resuming after dropped connections."""
    if resume is not None and stream_id is None:
        raise typer.BadParameter("--from needs --stream-id", param_hint="--from")
    console, notes = Console(), Console(stderr=True)
    printer = _Printer(console)
    try:
        outcome = _run(_stream(url, api_key, transport, stream_id, resume, printer, prompt, model,
                               max_tokens))  # fmt: skip
    except ClientError as exc:
        console.print()
        # Following a stream retries connecting before it gives up (ResumeFailed): a gateway
        # that never answered is still the unreachable one.
        refused = exc if isinstance(exc, ConnectFailed) else exc.__cause__
        reason = unreachable(url, refused) if isinstance(refused, ConnectFailed) else exc
        notes.print(
            f"[red]stream failed:[/red] {type(exc).__name__}: {reason}",
            soft_wrap=True,  # one line, however narrow the terminal
            highlight=False,
        )
        raise typer.Exit(1) from None
    console.print()
    finish = outcome.finish_reason or "-"
    notes.print(
        f"stream {outcome.stream_id}  last id {outcome.last_id}  finish {finish}  "
        f"reconnections {outcome.reconnects}",
        markup=False,
        highlight=False,
    )


async def _stream(
    url: str,
    api_key: str | None,
    transport: str,
    stream_id: str | None,
    resume: str | None,
    printer: _Printer,
    prompt: str,
    model: str,
    max_tokens: int | None,
) -> StreamOutcome:
    if stream_id is not None:
        if transport == "grpc":
            return await _follow_grpc(url, api_key, stream_id, resume, printer)
        if transport.startswith("airc"):
            return await _follow_airc(url, api_key, transport, stream_id, resume, printer)
        if transport == "h3":
            return await _follow_h3(url, api_key, stream_id, resume, printer)
        if transport == "wt":
            return await _follow_wt(url, api_key, stream_id, resume, printer)
        if transport == "rsocket":
            return await _follow_rsocket(url, api_key, stream_id, resume, printer)
        follow = _follow_ws if transport == "ws" else _follow_sse
        return await follow(url, api_key, stream_id, resume, printer)
    request: dict[str, Any] = {"model": model, "messages": [{"role": "user", "content": prompt}]}
    if max_tokens is not None:
        request["max_tokens"] = max_tokens
    if transport == "grpc":
        return await _chat_grpc(url, api_key, request, printer)
    if transport.startswith("airc"):
        return await _chat_airc(url, api_key, transport, request, printer)
    if transport == "h3":
        return await _chat_h3(url, api_key, request, printer)
    if transport == "wt":
        return await _chat_wt(url, api_key, request, printer)
    if transport == "rsocket":
        return await _chat_rsocket(url, api_key, request, printer)
    chat = _chat_ws if transport == "ws" else _chat_sse
    return await chat(url, api_key, request, printer)


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on uvloop where available."""
    if sys.platform != "win32":
        import uvloop

        return uvloop.run(coro)
    return asyncio.run(coro)  # pragma: no cover
