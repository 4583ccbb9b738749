"""``POST /v1/chat/completions``: the OpenAI-compatible endpoint.

Streaming responses are SSE in OpenAI's format (``chat.completion.chunk`` objects, then
``data: [DONE]``), each event with an ``id:`` resume token; the ``x-airlane-stream-id`` header
names the stream so that a client that lost the connection can resume it through the streams
API. The request is turned into a `GenerationRequest`; the generation runs in the gateway, so
the response is just one subscriber of it.
"""

from __future__ import annotations

import time

import orjson

from airlane.core import Event, Kind
from airlane.core.errors import ErrorCode
from airlane.gateway import Principal
from airlane.transports.http.asgi import HttpError, Receive, Request, Send, read_json, send_json
from airlane.transports.http.context import AppContext
from airlane.wire.openai import DONE_SENTINEL, ChatStreamState, ChunkFactory
from airlane.wire.sse import encode_event, encode_numbered_event, event_id_prefix

__all__ = ["handle_chat_completions"]

# The kinds a chunk carries as they are (the others end the stream or catch a reader up).
_APPENDED_KINDS = frozenset({Kind.DELTA, Kind.TOOL_CALL})


class _OpenAIRenderer:
    """Renders events as OpenAI SSE frames, sharing the per-event encoding across readers."""

    def __init__(self, factory: ChunkFactory, epoch: str, include_usage: bool) -> None:
        self.factory = factory
        self.epoch = epoch
        self.include_usage = include_usage
        self.state = ChatStreamState()
        self.cache_key = "openai-sse"
        self._id_prefix = event_id_prefix(f"{epoch}:")

    def __call__(self, batch: list[Event]) -> bytes:
        out: list[bytes] = []
        for event in batch:
            if event.kind in _APPENDED_KINDS:
                self.state.apply(event)
                out.append(self._frame(event))
            else:
                for caught_up in self.state.apply(event):
                    caught_up.seq = event.seq
                    out.append(self._frame(caught_up))
                out.append(self._terminal(event))
        return b"".join(out)

    def _frame(self, event: Event) -> bytes:
        frame = event.cached(self.cache_key)
        if frame is None:
            chunk = self.factory.event_chunk(event)
            assert chunk is not None
            frame = encode_numbered_event(self._id_prefix, event.seq, chunk)  # JSON: one line
            event.cache(self.cache_key, frame)
        return frame

    def _terminal(self, event: Event) -> bytes:
        if event.kind is Kind.DONE:
            frames = [
                encode_event(
                    self.factory.finish(self.state.finish_reason or "stop"),
                    id=f"{self.epoch}:{event.seq}",
                )
            ]
            if self.include_usage and self.state.usage is not None:
                frames.append(encode_event(self.factory.usage(self.state.usage)))
            frames.append(encode_event(DONE_SENTINEL))
            return b"".join(frames)
        if event.kind is Kind.ERROR:
            error = self.state.error or {}
            body = {
                "error": {
                    "message": error.get("message", "the stream failed"),
                    "type": "server_error",
                    "code": error.get("code"),
                }
            }
            return encode_event(orjson.dumps(body))
        return b""


async def handle_chat_completions(
    app: AppContext,
    principal: Principal,
    request: Request,
    receive: Receive,
    send: Send,
) -> None:
    """Serve one chat completion, streaming or not."""
    if await request.placed_elsewhere():
        return
    gateway, config = app.gateway, app.config
    chat = await gateway.start_chat(principal, await read_json(receive, config.max_body_bytes))
    info, include_usage = chat.info, chat.request.include_usage
    factory = ChunkFactory(info.stream_id, chat.request.generation.model, int(time.time()))
    headers = [(b"x-airlane-stream-id", info.stream_id.encode())]
    async with await gateway.subscribe(principal, info.stream_id) as subscription:
        if not chat.request.stream:
            state = ChatStreamState()
            while batch := await subscription.next_batch(config.batch_limit):
                for event in batch:
                    state.apply(event)
            if state.error is not None:
                raise HttpError(
                    str(state.error.get("message", "the backend failed")),
                    code=_stream_error_code(state.error.get("code")),
                    headers=headers,
                )
            await send_json(send, 200, state.completion(factory), headers)
            return
        pump = app.sse_pump(request, receive, send)
        await pump.start(headers, encode_event(factory.role(), id=f"{info.epoch}:0"))
        renderer = _OpenAIRenderer(factory, info.epoch, include_usage)
        await pump.pump(subscription, renderer)
        await pump.finish()


def _stream_error_code(code: object) -> ErrorCode:
    """The code a stream's ``error`` event ended it with; ``backend_error`` for one this
    gateway does not know (an upstream's own)."""
    try:
        return ErrorCode(str(code))
    except ValueError:
        return ErrorCode.BACKEND_ERROR
