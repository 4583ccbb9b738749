"""``GET /v1/ws``: many streams multiplexed on one WebSocket.

Subprotocols: ``airlane.v1.json`` (text messages, the default when the client offers none) and
``airlane.v1.msgpack`` (binary messages). Every message is one object with an ``op``.

Client to server (``ref`` is optional and echoed in the reply)::

    {"op": "subscribe", "stream": ID, "from": "<epoch>:<seq>"}    -> subscribed, then events
    {"op": "unsubscribe", "stream": ID}                           -> unsubscribed
    {"op": "generate", "request": {chat request}, "subscribe": true}  -> generated (+ events)
    {"op": "publish", "stream": ID, "event": {...}}               -> published
    {"op": "cancel", "stream": ID}                                -> cancelled
    {"op": "ping"}                                                -> pong
    {"op": "lane", "lane": "control" | "interactive" | "bulk"}   -> lane {"marks": "..."}
    {"op": "credit", "stream": ID, "credits": N}                  -> credit {"credits": ...}

``subscribe`` and ``generate`` take ``"credits": N``: the gateway then writes at most N of the
stream's messages and waits for ``credit`` grants, which the client sends as it reads (the
stream stays on the gateway meanwhile; `airlane.transports.http.ws_pump.Credits`).

``lane`` declares what this socket carries, for a client that keeps its signalling (cancel,
ping, presence) on a socket of its own beside the one its bulk data takes: the gateway marks
its side of the connection (`airlane.runtime.socket_lanes`; docs/lanes.md) and answers with
what it set.

Server to client::

    {"op": "event", "stream": ID, "id": "<epoch>:<seq>", "event": {native event JSON}}
    {"op": "error", "ref": ..., "stream": ..., "code": ..., "message": ...}

Over WebTransport (`airlane.transports.http.h3.webtransport`) the same session runs with the
``airlane.webtransport`` extension: each subscription's events then travel on a stream of
their own (``"datagrams": true`` in ``subscribe`` or ``generate``: as datagrams instead;
``"redundant": true``: on the stream and, ahead of it, as datagrams carrying the
``prev`` seq, which the client puts in order), and an op that came as a datagram is answered
by one.

A request that cannot be honoured gets an ``error`` message with its code
(`airlane.core.errors.ErrorCode`) and the socket stays open. Only a broken protocol or a
refused handshake closes it, with the close code `airlane.transports.http.errors.WS_CLOSE`
gives the refusal: 1003 for a frame of the wrong type, 4401 / 4403 for refused credentials,
1009 for an oversize message (enforced by the server), 1002 for an unsupported subprotocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import orjson

from airlane.core import Event, Kind, Position
from airlane.core.errors import AirlaneError, BadRequest, ErrorCode
from airlane.gateway import Principal, Subscription
from airlane.runtime.socket_lanes import LaneMarker, LanesConfig, lane_marker
from airlane.transports.http.asgi import LANE_EXTENSION, SOCKET_EXTENSION, Receive, Request, Send
from airlane.transports.http.auth import authenticate
from airlane.transports.http.context import AppContext
from airlane.transports.http.errors import close_code, close_reason
from airlane.transports.http.h3.webtransport import WEBTRANSPORT, StreamStopped
from airlane.transports.http.loadtest import loadtest_chunks, loadtest_failure, loadtest_spec
from airlane.transports.http.ws_protocol import SEND_MANY, WRITE_NOW
from airlane.transports.http.ws_pump import Credits, WebSocketPump, WriteNow
from airlane.wire.errors import DecodeError
from airlane.wire.event_json import event_from_dict, event_to_dict, event_to_json
from airlane.wire.limits import MAX_BODY_DEPTH, json_depth

__all__ = [
    "CLOSE_TIMEOUT_S",
    "SUBPROTOCOLS",
    "WebSocketSession",
    "accept",
    "close",
    "close_within",
    "refuse",
    "serve_loadtest_ws",
]

log = logging.getLogger("airlane.ws")

CLOSE_TIMEOUT_S = 5.0
"""How long a close frame may wait on a client that does not read (`close_within`)."""

JSON_PROTOCOL = "airlane.v1.json"
MSGPACK_PROTOCOL = "airlane.v1.msgpack"
SUBPROTOCOLS = (JSON_PROTOCOL, MSGPACK_PROTOCOL)
"""The subprotocols ``/v1/ws`` speaks."""

CLOSE_NORMAL = 1000
_CLOSE_FAILED = 1011  # the stream failed (the server's side): RFC 6455 7.4.1

_msgpack_encoder = msgspec.msgpack.Encoder()
_msgpack_decoder = msgspec.msgpack.Decoder()


async def accept(receive: Receive, send: Send, subprotocol: str | None) -> bool:
    """Complete the handshake; False if the client left before it."""
    message = await receive()
    if message["type"] != "websocket.connect":
        return False
    await send({"type": "websocket.accept", "subprotocol": subprotocol})
    return True


async def close(send: Send, code: int, reason: str) -> None:
    """Close with a code and a human-readable reason (at most 123 bytes, RFC 6455 5.5)."""
    await send({"type": "websocket.close", "code": code, "reason": close_reason(reason)})


async def close_within(send: Send, code: int, reason: str) -> None:
    """`close`, waiting at most `CLOSE_TIMEOUT_S`: for a client too slow to read even the close
    frame (the server drops the connection once the application returns). The caller's
    writer must have stopped: this is then the only write."""
    with contextlib.suppress(TimeoutError, OSError):
        async with asyncio.timeout(CLOSE_TIMEOUT_S):
            await close(send, code, reason)


async def refuse(send: Send, exc: AirlaneError) -> None:
    """Close for ``exc``: its close code (`airlane.transports.http.errors`), its message."""
    await close(send, close_code(exc.code), str(exc))


_TOO_DEEP = f"the message nests deeper than {MAX_BODY_DEPTH} levels"


class WebSocketSession:
    """One client socket: its ops, its subscriptions (one pump task each), one send lock."""

    def __init__(
        self,
        app: AppContext,
        principal: Principal,
        send: Send,
        subprotocol: str,
        *,
        send_many: bool = False,
        write_now: WriteNow | None = None,
        webtransport: Any = None,
        reader: str | None = None,
        mark_lane: LaneMarker | None = None,
    ) -> None:
        self.app = app
        self._mark_lane = mark_lane
        self._reader = reader
        """How the usage ledger names this session's reads (``webrtc host/udp-host``)."""
        self._webtransport = webtransport
        """The session's `WebTransportChannel` when it runs over WebTransport."""
        self.principal = principal
        self._send = send
        self.binary = subprotocol == MSGPACK_PROTOCOL
        # The server offers airlane.websocket.send_many: a batch of frames is one write; and
        # airlane.websocket.write_now: pumps write from the hub's call-back (`WebSocketPump`).
        self._send_many = send_many
        self._write_now = write_now
        self._lock = asyncio.Lock()  # two writers never interleave on one socket
        self._pumps: dict[str, tuple[Subscription, asyncio.Task[None]]] = {}
        self._credits: dict[str, Credits] = {}  # subscriptions on credits (`credit` op)

    # -- the receive loop -------------------------------------------------------------------

    async def run(self, receive: Receive) -> None:
        """Serve messages until the client disconnects; then release every cursor."""
        try:
            while True:
                message = await receive()
                if message["type"] == "websocket.disconnect":
                    return
                if message["type"] != "websocket.receive":
                    continue
                data = message.get("bytes") if self.binary else message.get("text")
                if data is None:
                    kind = "binary" if self.binary else "text"
                    await refuse(
                        self._send,
                        AirlaneError(
                            f"this subprotocol expects {kind} messages",
                            code=ErrorCode.UNSUPPORTED,
                        ),
                    )
                    return
                await self._handle(data, datagram=bool(message.get("airlane.datagram")))
        finally:
            await self.aclose()

    async def aclose(self) -> None:
        """Stop every pump and close every subscription."""
        if self._mark_lane is not None:
            self._mark_lane.release()
        pumps, self._pumps = self._pumps, {}
        tasks = [task for _, task in pumps.values()]
        for task in tasks:
            task.cancel()
        if tasks:
            # Every pump, whatever it ended with (a client gone mid-write is one): one that
            # raised must not keep the others' cursors open.
            await asyncio.wait(tasks)
        for subscription, task in pumps.values():
            failure = None if task.cancelled() else task.exception()
            if failure is not None and not isinstance(failure, OSError):
                log.error("WebSocket pump failed", exc_info=failure)
            await subscription.aclose()

    async def _handle(self, data: str | bytes, *, datagram: bool = False) -> None:
        ref: Any = None
        try:
            obj = self._decode(data)
            ref = obj.get("ref")
            op = obj.get("op")
            handler = _OPS.get(op) if isinstance(op, str) else None
            if handler is None:
                raise BadRequest(
                    f"unknown op {str(obj.get('op'))[:40]!r}; use one of {', '.join(_OPS)}",
                    code=ErrorCode.UNKNOWN_OP,
                )
            reply = await handler(self, obj)
        except AirlaneError as exc:
            reply = {"op": "error", "code": exc.code.value, "message": str(exc)}
        if ref is not None:
            reply["ref"] = ref
        await self._send_obj(reply, datagram=datagram)

    def _decode(self, data: str | bytes) -> dict[str, Any]:
        try:
            if isinstance(data, bytes):
                obj = _msgpack_decoder.decode(data)
            else:
                obj = orjson.loads(data)
        except (orjson.JSONDecodeError, msgspec.DecodeError) as exc:
            raise BadRequest(
                f"cannot decode message: {exc}", code=ErrorCode.INVALID_MESSAGE
            ) from None
        except RecursionError:  # MessagePack nested past the interpreter's stack
            raise BadRequest(_TOO_DEEP, code=ErrorCode.INVALID_MESSAGE) from None
        if json_depth(obj, MAX_BODY_DEPTH) > MAX_BODY_DEPTH:
            raise BadRequest(_TOO_DEEP, code=ErrorCode.INVALID_MESSAGE)
        if not isinstance(obj, dict):
            raise BadRequest(
                "a message must be an object with an 'op'", code=ErrorCode.INVALID_MESSAGE
            )
        return obj

    # -- ops --------------------------------------------------------------------------------

    def _stream_id(self, obj: dict[str, Any]) -> str:
        stream_id = obj.get("stream")
        if not isinstance(stream_id, str):
            raise BadRequest("'stream' must be a stream id string", code=ErrorCode.INVALID_MESSAGE)
        return stream_id

    async def _op_subscribe(self, obj: dict[str, Any]) -> dict[str, Any]:
        stream_id = self._stream_id(obj)
        resume = Position.parse(str(obj["from"])) if obj.get("from") else None
        return await self._subscribe(
            stream_id,
            resume,
            datagrams=obj.get("datagrams") is True,
            redundant=obj.get("redundant") is True,
            credits=_credits(obj),
        )

    async def _subscribe(
        self,
        stream_id: str,
        resume: Position | None,
        *,
        datagrams: bool = False,
        redundant: bool = False,
        credits: int | None = None,
    ) -> dict[str, Any]:
        self._check_room(stream_id)
        subscription = await self.app.gateway.subscribe(
            self.principal, stream_id, resume=resume, subscriber=self._reader
        )
        epoch = subscription.position.epoch
        if subscription.exhausted:
            # Resumed at the very end of a finished stream: nothing will ever come (SSE answers
            # 204 here), so say so instead of leaving the client waiting.
            await subscription.aclose()
            return {
                "op": "subscribed",
                "stream": stream_id,
                "epoch": epoch,
                "from": subscription.position.seq,
                "ended": True,
            }
        mode = "datagrams" if datagrams else "redundant" if redundant else "stream"
        if credits is not None:
            self._credits[stream_id] = Credits(credits)
        task = asyncio.create_task(
            self._pump(stream_id, epoch, subscription, mode), name=f"ws-pump {stream_id}"
        )
        self._pumps[stream_id] = (subscription, task)
        return {
            "op": "subscribed",
            "stream": stream_id,
            "epoch": epoch,
            "from": subscription.position.seq,
        }

    def _check_room(self, stream_id: str | None) -> None:
        """Refuse a subscription this socket cannot take (``stream_id`` None: a generation's,
        checked before it starts, so that a refused one costs no tokens)."""
        if stream_id is not None and stream_id in self._pumps:
            raise AirlaneError(
                f"already subscribed to {stream_id!r}", code=ErrorCode.ALREADY_SUBSCRIBED
            )
        if len(self._pumps) >= self.app.config.max_ws_subscriptions:
            raise AirlaneError(
                f"at most {self.app.config.max_ws_subscriptions} per socket",
                code=ErrorCode.TOO_MANY_SUBSCRIPTIONS,
            )

    async def _op_unsubscribe(self, obj: dict[str, Any]) -> dict[str, Any]:
        stream_id = self._stream_id(obj)
        entry = self._pumps.pop(stream_id, None)
        self._credits.pop(stream_id, None)
        if entry is None:
            raise AirlaneError(f"not subscribed to {stream_id!r}", code=ErrorCode.NOT_SUBSCRIBED)
        subscription, task = entry
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await subscription.aclose()
        return {"op": "unsubscribed", "stream": stream_id, "id": subscription.position.token}

    async def _op_generate(self, obj: dict[str, Any]) -> dict[str, Any]:
        subscribe = obj.get("subscribe", True)
        # What would refuse the subscription refuses the op before the generation starts:
        # after, it would run unread (and bill) until its orphan policy ended it.
        credits = _credits(obj) if subscribe else None
        if subscribe:
            self._check_room(None)
        info = (await self.app.gateway.start_chat(self.principal, obj.get("request"))).info
        reply = {"op": "generated", "stream": info.stream_id, "epoch": info.epoch}
        if subscribe:
            await self._subscribe(
                info.stream_id,
                None,
                datagrams=obj.get("datagrams") is True,
                redundant=obj.get("redundant") is True,
                credits=credits,
            )
        return reply

    async def _op_publish(self, obj: dict[str, Any]) -> dict[str, Any]:
        stream_id = self._stream_id(obj)
        try:
            event = event_from_dict(obj.get("event"))
        except DecodeError as exc:
            raise BadRequest(str(exc), code=ErrorCode.INVALID_EVENT) from None
        published = await self.app.gateway.publish(self.principal, stream_id, event)
        return {"op": "published", "stream": stream_id, "seq": published.seq}

    async def _op_cancel(self, obj: dict[str, Any]) -> dict[str, Any]:
        stream_id = self._stream_id(obj)
        cancelled = await self.app.gateway.cancel(self.principal, stream_id)
        return {"op": "cancelled", "stream": stream_id, "cancelled": cancelled}

    async def _op_credit(self, obj: dict[str, Any]) -> dict[str, Any]:
        stream_id = self._stream_id(obj)
        grant = _credits(obj)
        if grant is None:
            raise BadRequest("'credits' is required", param="credits")
        credits = self._credits.get(stream_id)
        if credits is None:
            if stream_id not in self._pumps:
                raise AirlaneError(
                    f"not subscribed to {stream_id!r}", code=ErrorCode.NOT_SUBSCRIBED
                )
            raise BadRequest(f"{stream_id!r} was subscribed without credits", param="credits")
        return {"op": "credit", "stream": stream_id, "credits": credits.grant(grant)}

    async def _op_ping(self, obj: dict[str, Any]) -> dict[str, Any]:
        return {"op": "pong"}

    async def _op_lane(self, obj: dict[str, Any]) -> dict[str, Any]:
        name = obj.get("lane")
        try:
            lane = LanesConfig.lane(name) if isinstance(name, str) else None
        except ValueError:
            lane = None
        if lane is None:
            raise BadRequest("lane must be control, interactive or bulk", param="lane")
        marks = self._mark_lane(lane) if self._mark_lane is not None else ""
        return {"op": "lane", "lane": name, "marks": marks}

    # -- writing ----------------------------------------------------------------------------

    async def _pump(
        self, stream_id: str, epoch: str, subscription: Subscription, mode: str = "stream"
    ) -> None:
        channel = self._webtransport
        frames = _Frames(self, stream_id, epoch, subscription.position.seq)
        if mode == "redundant" and channel is not None and not self.binary:
            frames.copies = channel
        if channel is not None:
            # WebTransport: a stream of its own (or datagrams), so no lock and no head-of-line
            # blocking behind the other subscriptions.
            sender = channel.datagrams() if mode == "datagrams" else channel.open_stream()
            pump = asyncio.current_task()
            assert pump is not None
            stopped = False

            def stop() -> None:
                # The client stopped the stream (STOP_SENDING): the subscription ends now,
                # not at its next event, which may be long in coming.
                nonlocal stopped
                stopped = True
                pump.cancel()

            sender.on_stopped(stop)
            try:
                await WebSocketPump(
                    subscription,
                    frames,
                    send=sender,
                    binary=self.binary,
                    send_many=True,
                    write_now=None,
                    metrics=self.app.metrics,
                    batch_limit=self.app.config.batch_limit,
                    credits=self._credits.get(stream_id),
                ).run()
            except StreamStopped:
                pass  # the client stopped reading this stream: the subscription ends here
            except asyncio.CancelledError:
                # Ours (`stop`) is absorbed; a cancel from anyone else (the session ending, an
                # unsubscribe) goes on.
                if not stopped or pump.uncancel() > 0:
                    raise
            finally:
                await sender.aclose()
        else:
            await WebSocketPump(
                subscription,
                frames,
                send=self._send,
                binary=self.binary,
                send_many=self._send_many,
                write_now=self._write_now,
                metrics=self.app.metrics,
                batch_limit=self.app.config.batch_limit,
                lock=self._lock,
                credits=self._credits.get(stream_id),
            ).run()
        # The stream ended for this reader: release its cursor now, not at disconnect.
        if self._pumps.get(stream_id, (None,))[0] is subscription:
            del self._pumps[stream_id]
            self._credits.pop(stream_id, None)
            await subscription.aclose()

    def _event_frame(self, stream_id: str, epoch: str, event: Event) -> bytes:
        key = "ws.msgpack" if self.binary else "ws.json"
        frame = event.cached(key)
        if frame is None:
            token = f"{epoch}:{event.seq}"
            if self.binary:
                body = event_to_dict(event)
                if event.kind is Kind.MESSAGE and event.raw is not None:
                    body["payload"] = orjson.loads(event.raw)
                frame = _msgpack_encoder.encode(
                    {"op": "event", "stream": stream_id, "id": token, "event": body}
                )
            else:
                frame = b"".join(
                    (
                        b'{"op":"event","stream":',
                        orjson.dumps(stream_id),
                        b',"id":"',
                        token.encode(),
                        b'","event":',
                        event_to_json(event),
                        b"}",
                    )
                )
            event.cache(key, frame)
        return frame

    async def _send_frame(self, frame: bytes, *, datagram: bool = False) -> None:
        message: dict[str, Any] = (
            {"type": "websocket.send", "bytes": frame}
            if self.binary
            else {"type": "websocket.send", "text": frame.decode()}
        )
        if datagram:
            message["airlane.datagram"] = True
        await self._send(message)
        self.app.metrics.count_sent(len(frame))

    async def _send_obj(self, obj: dict[str, Any], *, datagram: bool = False) -> None:
        frame = _msgpack_encoder.encode(obj) if self.binary else orjson.dumps(obj)
        async with self._lock:
            await self._send_frame(frame, datagram=datagram)


_Op = Callable[[WebSocketSession, dict[str, Any]], Awaitable[dict[str, Any]]]

# One table for every session (a table of bound methods per session would be nine more
# objects for the garbage collector to walk per connection).
_OPS: dict[str, _Op] = {
    "subscribe": WebSocketSession._op_subscribe,
    "unsubscribe": WebSocketSession._op_unsubscribe,
    "generate": WebSocketSession._op_generate,
    "publish": WebSocketSession._op_publish,
    "cancel": WebSocketSession._op_cancel,
    "ping": WebSocketSession._op_ping,
    "lane": WebSocketSession._op_lane,
    "credit": WebSocketSession._op_credit,
}


class _Frames:
    """A subscription's batches as frames, for its `WebSocketPump`: one object (a closure
    over the same state would be a function, its cells and their tuple, all walked by the
    garbage collector for every idle subscription)."""

    __slots__ = ("_epoch", "_prev", "_session", "_stream_id", "copies")

    def __init__(self, session: WebSocketSession, stream_id: str, epoch: str, prev: int) -> None:
        self._session, self._stream_id, self._epoch = session, stream_id, epoch
        self._prev = prev
        self.copies: Any = None
        """A WebTransport channel that gets a copy of each event as a datagram, or None."""

    def __call__(self, batch: list[Event]) -> list[bytes]:
        frame_of, stream_id, epoch = self._session._event_frame, self._stream_id, self._epoch
        out = [frame_of(stream_id, epoch, event) for event in batch]
        channel = self.copies
        if channel is not None:
            # A copy of each event as a datagram, ahead of the stream's: it arrives without
            # waiting for a resend when the stream's packet is lost. "prev" (the seq sent
            # before it) lets the client put copies in order.
            prev = self._prev
            for event, frame in zip(batch, out, strict=True):
                channel.copy(b'%s,"prev":%d}' % (frame[:-1], prev))
                prev = event.seq
            self._prev = prev
        return out


async def serve_websocket(app: AppContext, request: Request, receive: Receive, send: Send) -> None:
    """The ``/v1/ws`` endpoint: handshake, authentication, then a `WebSocketSession`."""
    offered = request.scope.get("subprotocols") or []
    known = (*SUBPROTOCOLS, *app.subprotocols)
    chosen = next((p for p in offered if p in known), None)
    if offered and chosen is None:
        if await accept(receive, send, None):
            await refuse(
                send,
                AirlaneError(
                    f"unsupported subprotocol; use {' or '.join(known)}",
                    code=ErrorCode.UNSUPPORTED_SUBPROTOCOL,
                ),
            )
        return
    # Browsers cannot set headers on a WebSocket: a ?ticket= (or, where allowed, the key
    # itself as ?access_token=) stands for them.
    try:
        principal = authenticate(app.gateway, app.config, request)
    except AirlaneError as exc:
        if await accept(receive, send, chosen):
            await refuse(send, exc)
        return
    if not await accept(receive, send, chosen):
        return
    # HTTP/3 (WebTransport) marks the QUIC connection's datagrams; TCP marks the socket.
    mark_lane: LaneMarker | None = request.extension(LANE_EXTENSION) or lane_marker(
        request.extension(SOCKET_EXTENSION), app.lanes, app.lane_flows
    )
    other = app.subprotocols.get(chosen) if chosen else None
    if other is not None:
        app.metrics.connections["ws"] += 1
        try:
            await other(principal, request.peer, request.client_host, receive, send, mark_lane)
        finally:
            app.metrics.connections["ws"] -= 1
        return
    session = WebSocketSession(
        app,
        principal,
        send,
        chosen or JSON_PROTOCOL,
        send_many=request.extension(SEND_MANY) is not None,
        write_now=request.extension(WRITE_NOW),
        webtransport=request.extension(WEBTRANSPORT),
        mark_lane=mark_lane,
    )
    transport = "webtransport" if request.extension(WEBTRANSPORT) is not None else "ws"
    app.metrics.connections[transport] += 1
    try:
        await session.run(receive)
    finally:
        app.metrics.connections[transport] -= 1


async def serve_loadtest_ws(
    app: AppContext, request: Request, receive: Receive, send: Send
) -> None:
    """``/v1/loadtest/ws``: one stream of benchmark chunks, one text message per chunk."""
    try:
        spec = loadtest_spec(request)
        principal = authenticate(app.gateway, app.config, request)
    except AirlaneError as exc:
        if await accept(receive, send, None):
            await refuse(send, exc)
        return
    if not await accept(receive, send, None):
        return
    failures: list[Event] = []  # the error that ended the stream, if one did

    def render(batch: list[Event]) -> list[bytes]:
        failure = loadtest_failure(batch)
        if failure is not None:
            failures.append(failure)
        return loadtest_chunks(batch)

    async with app.gateway.loadtest(principal, spec) as (_, subscription):
        pump = asyncio.current_task()
        assert pump is not None
        watcher = asyncio.create_task(_watch_disconnect(receive, pump))
        # Under `airlane serve` chunks are written from the hub's call-back, a batch a write;
        # elsewhere, one ASGI message per chunk.
        try:
            await WebSocketPump(
                subscription,
                render,
                send=send,
                binary=False,
                send_many=request.extension(SEND_MANY) is not None,
                write_now=request.extension(WRITE_NOW),
                metrics=app.metrics,
                batch_limit=app.config.batch_limit,
            ).run()
            if failures:
                data = failures[0].data or {}
                reason = f"{data.get('code', 'error')}: {data.get('message', '')}"
                await close(send, _CLOSE_FAILED, reason)
            else:
                await close(send, CLOSE_NORMAL, "done")
        except asyncio.CancelledError:
            if watcher.done() and pump.uncancel() == 0:
                return
            raise
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher


async def _watch_disconnect(receive: Receive, task: asyncio.Task[Any]) -> None:
    while (await receive())["type"] != "websocket.disconnect":
        pass
    task.cancel()


def _credits(obj: dict[str, Any]) -> int | None:
    """An op's ``credits`` (messages the reader will take: 1 to `Credits.MAX`), or None."""
    value = obj.get("credits")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= Credits.MAX:
        raise BadRequest(f"'credits' must be an integer from 1 to {Credits.MAX}", param="credits")
    return value
