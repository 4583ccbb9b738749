"""`WsClient`: many streams over one ``/v1/ws`` WebSocket, resuming after reconnects.

Protocol (`airlane.transports.http.websocket`, subprotocol ``airlane.v1.json``): every message
is one JSON object with an ``op``. Requests carry a ``ref`` that the reply echoes, so replies
are matched to requests by ``ref``, never by order. Events arrive as ``{"op": "event",
"stream", "id", "event"}``, interleaved with replies.

Ownership: one reader task per client reads every message and routes it, replies to the
waiting request, events to the `WsSubscription` of their stream. Only one writer at a time
sends (a lock). When the connection drops, in-flight requests fail with `ConnectionLost`
(their outcome is unknown), the reader reconnects with `RetryPolicy` backoff, and every
unfinished subscription is re-subscribed ``from`` the last id it buffered, so no event is lost
or repeated. If the budget runs out, every subscription and later request fails with
`ResumeFailed`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

import orjson
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, WebSocketException

from airlane.client.errors import (
    ClientClosed,
    ClientError,
    ConnectFailed,
    ConnectionLost,
    ProtocolViolation,
    RequestRejected,
    ResumeFailed,
    rejected,
)
from airlane.client.events import StreamEvent
from airlane.client.retry import RetryPolicy
from airlane.client.subscription import DEFAULT_MAX_QUEUE, WsSubscription

__all__ = [
    "DEFAULT_MAX_EARLY_EVENTS",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "DEFAULT_REQUEST_TIMEOUT_S",
    "SUBPROTOCOL",
    "WsClient",
]

log = logging.getLogger("airlane.client.ws")

SUBPROTOCOL = "airlane.v1.json"
"""The subprotocol this client speaks."""

DEFAULT_REQUEST_TIMEOUT_S = 30.0
"""How long a request waits for its reply (including a reconnection in between)."""

DEFAULT_MAX_MESSAGE_BYTES = 16 << 20
"""Largest message accepted from the gateway: a snapshot of a long stream is one message."""

DEFAULT_MAX_EARLY_EVENTS = 256
"""Events kept for a stream whose ``generated`` reply has not arrived yet."""

_Pending = tuple["asyncio.Future[Any]", Callable[[dict[str, Any]], Any] | None]


class WsClient:
    """A WebSocket client for one gateway; use it as ``async with WsClient(url) as ws:``."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        retry: RetryPolicy | None = None,
        max_queue: int = DEFAULT_MAX_QUEUE,
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        open_timeout_s: float = 10.0,
    ) -> None:
        self.url = _ws_url(base_url)
        """The ``ws://.../v1/ws`` address."""
        self.retry = retry or RetryPolicy()
        """How reconnections are paced and bounded."""
        self.bytes_received = 0
        """Bytes of every message received."""
        self.reconnects = 0
        """How many times the socket was re-established."""
        self.catch_ups = 0
        """How many times a lagging subscription was re-subscribed from its last event."""
        self._headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self._max_queue = max_queue
        self._request_timeout_s = request_timeout_s
        self._open_timeout_s = open_timeout_s
        self._conn: ClientConnection | None = None
        self._connected = asyncio.Event()
        self._reader: asyncio.Task[None] | None = None
        self._send_lock = asyncio.Lock()
        self._refs = itertools.count(1)
        self._pending: dict[int, _Pending] = {}
        self._subs: dict[str, WsSubscription] = {}
        self._early: dict[str, deque[StreamEvent]] = {}
        self._generating = 0
        self._failure: ClientError | None = None

    # -- lifetime ---------------------------------------------------------------------------

    async def __aenter__(self) -> WsClient:
        await self.connect()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def connect(self) -> None:
        """Open the socket and start the reader.

        Raises:
            ConnectFailed: the gateway refused or could not be reached.
        """
        if self._reader is not None:
            raise ClientClosed("this WsClient was already connected")
        self._conn = await self._open()
        self._connected.set()
        self._reader = asyncio.create_task(self._read_loop(), name="airlane-ws-reader")

    async def aclose(self) -> None:
        """Close the socket, stop the reader, end every subscription."""
        self._fail_all(ClientClosed("the WsClient is closed"))
        reader, self._reader = self._reader, None
        if reader is not None:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
        if self._conn is not None:
            await self._conn.close()

    # -- operations -------------------------------------------------------------------------

    async def generate(self, request: Mapping[str, Any]) -> WsSubscription:
        """Start a generation (an OpenAI-style chat request) and subscribe to it."""
        self._generating += 1
        try:
            reply: WsSubscription = await self._request(
                {"op": "generate", "request": dict(request), "subscribe": True},
                lambda msg: self._open_subscription(str(msg.get("stream")), None),
            )
        finally:
            self._generating -= 1
            if not self._generating:
                self._early.clear()
        return reply

    async def subscribe(self, stream_id: str, resume: str | None = None) -> WsSubscription:
        """Read ``stream_id`` from after ``resume`` (a resume token; None: the start)."""
        if stream_id in self._subs:
            raise ValueError(f"already subscribed to {stream_id!r} on this client")
        subscription = self._open_subscription(stream_id, resume)
        try:
            await self.request("subscribe", stream=stream_id, **_from(resume))
        except BaseException:
            if self._subs.get(stream_id) is subscription:
                del self._subs[stream_id]
            raise
        return subscription

    async def unsubscribe(self, stream_id: str) -> str | None:
        """Stop reading ``stream_id``; return the gateway's resume token for it."""
        subscription = self._subs.pop(stream_id, None)
        if subscription is not None:
            subscription.close()
        reply = await self.request("unsubscribe", stream=stream_id)
        token = reply.get("id")
        return token if isinstance(token, str) else None

    async def publish(self, stream_id: str, event: Mapping[str, Any]) -> int:
        """Append one event (native JSON form) to a named stream; return its seq."""
        reply = await self.request("publish", stream=stream_id, event=dict(event))
        return int(reply.get("seq", 0))

    async def cancel(self, stream_id: str) -> bool:
        """Stop a stream's producer; True if it was still running."""
        reply = await self.request("cancel", stream=stream_id)
        return bool(reply.get("cancelled"))

    async def ping(self) -> None:
        """An application-level round trip."""
        await self.request("ping")

    async def request(self, op: str, **fields: Any) -> dict[str, Any]:
        """Send ``{"op": op, "ref": ..., **fields}`` and return the reply.

        Raises:
            RequestRejected: the gateway answered with an ``error``.
            ConnectionLost: the connection dropped before the reply.
            TimeoutError: no reply within the request timeout.
        """
        reply: dict[str, Any] = await self._request({"op": op, **fields})
        return reply

    async def _request(
        self, message: dict[str, Any], on_reply: Callable[[dict[str, Any]], Any] | None = None
    ) -> Any:
        # ``on_reply`` runs in the reader, before any later message is routed; the request
        # returns what it makes of the reply.
        ref = next(self._refs)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[ref] = (future, on_reply)
        try:
            async with asyncio.timeout(self._request_timeout_s):
                await self._send({**message, "ref": ref})
                return await future
        finally:
            self._pending.pop(ref, None)

    async def catch_up(self, subscription: WsSubscription) -> None:
        """Re-subscribe a lagging subscription from the last event it buffered."""
        stream_id = subscription.stream_id
        self.catch_ups += 1
        with contextlib.suppress(RequestRejected):  # the gateway may have released it already
            await self.request("unsubscribe", stream=stream_id)
        subscription.lagging = False
        self._subs[stream_id] = subscription
        try:
            await self.request("subscribe", stream=stream_id, **_from(subscription.last_id))
        except RequestRejected as exc:
            if exc.code != "already_subscribed":  # a reconnection re-subscribed it first
                subscription.fail(exc)
        except ConnectionLost:
            pass  # the reader re-subscribes it after reconnecting

    # -- the reader -------------------------------------------------------------------------

    async def _read_loop(self) -> None:
        while self._conn is not None:
            try:
                while True:
                    raw = await self._conn.recv(decode=False)
                    self.bytes_received += len(raw)
                    self._dispatch(raw)
            except ConnectionClosed:
                log.info("connection to %s lost; reconnecting", self.url)
            except ProtocolViolation as exc:
                self._fail_all(exc)
                await self._conn.close(1002, "protocol error")
                return
            self._connected.clear()
            self._fail_pending(ConnectionLost("the connection dropped before the reply"))
            if not await self._reconnect():
                return
            await self._resubscribe_all()

    async def _reconnect(self) -> bool:
        failures = 0
        while True:
            await asyncio.sleep(self.retry.delay(failures))
            try:
                self._conn = await self._open()
            except ConnectFailed as exc:
                failures += 1
                if self.retry.exhausted(failures):
                    self._fail_all(ResumeFailed(f"gave up reconnecting to {self.url}"), exc)
                    return False
                continue
            self.reconnects += 1
            self._connected.set()
            return True

    async def _resubscribe_all(self) -> None:
        for subscription in list(self._subs.values()):
            subscription.lagging = False
            ref = next(self._refs)
            future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            future.add_done_callback(_failing(subscription))
            self._pending[ref] = (future, None)
            message = {"op": "subscribe", "ref": ref, "stream": subscription.stream_id}
            with contextlib.suppress(ConnectionLost):  # the reader will notice and retry
                await self._send({**message, **_from(subscription.last_id)})

    def _dispatch(self, raw: bytes) -> None:
        try:
            message = orjson.loads(raw)
        except orjson.JSONDecodeError:
            raise ProtocolViolation("the gateway sent a message that is not JSON") from None
        if not isinstance(message, dict):
            raise ProtocolViolation("the gateway sent a message that is not an object")
        if message.get("op") == "event":
            self._route(message)
            return
        ref = message.get("ref")
        pending = self._pending.pop(ref, None) if isinstance(ref, int) else None
        if pending is None:
            log.debug("unsolicited %s message: %s", message.get("op"), raw[:200])
            return
        future, on_reply = pending
        if future.done():
            return
        if message.get("op") == "error":
            text, code = str(message.get("message")), message.get("code")
            future.set_exception(rejected(text, code=str(code) if code else None))
        else:
            future.set_result(on_reply(message) if on_reply else message)

    def _route(self, message: dict[str, Any]) -> None:
        stream_id = message.get("stream")
        event = StreamEvent.from_dict(message.get("event"), message.get("id"))
        if not isinstance(stream_id, str):
            raise ProtocolViolation("an event message without a 'stream'")
        subscription = self._subs.get(stream_id)
        if subscription is None:
            if self._generating and sum(map(len, self._early.values())) < DEFAULT_MAX_EARLY_EVENTS:
                self._early.setdefault(stream_id, deque()).append(event)
            return
        subscription.push(event)
        if subscription.finished:
            del self._subs[stream_id]  # the gateway released this cursor after the terminal

    def _open_subscription(self, stream_id: str, resume: str | None) -> WsSubscription:
        subscription = WsSubscription(stream_id, self, resume=resume, max_queue=self._max_queue)
        self._subs[stream_id] = subscription
        for event in self._early.pop(stream_id, ()):
            subscription.push(event)
        if subscription.finished:
            del self._subs[stream_id]
        return subscription

    # -- plumbing ---------------------------------------------------------------------------

    async def _open(self) -> ClientConnection:
        try:
            return await connect(
                self.url,
                subprotocols=[SUBPROTOCOL],  # type: ignore[list-item]
                additional_headers=self._headers,
                compression=None,  # token frames are small; deflate costs more than it saves
                proxy=None,
                open_timeout=self._open_timeout_s,
                max_size=DEFAULT_MAX_MESSAGE_BYTES,
            )
        except (OSError, TimeoutError, WebSocketException) as exc:
            raise ConnectFailed(f"cannot open {self.url}: {exc}") from exc

    async def _send(self, message: dict[str, Any]) -> None:
        if self._failure is not None:
            raise self._failure
        await self._connected.wait()
        conn = self._conn
        if conn is None or self._failure is not None:
            raise self._failure or ClientClosed("the WsClient is not connected")
        async with self._send_lock:
            try:
                await conn.send(orjson.dumps(message).decode(), text=True)
            except ConnectionClosed as exc:
                raise ConnectionLost("the connection dropped while sending") from exc

    def _fail_pending(self, error: ClientError) -> None:
        pending, self._pending = self._pending, {}
        for future, _ in pending.values():
            if not future.done():
                future.set_exception(error)
                future.exception()  # mark retrieved: its requester may be gone

    def _fail_all(self, error: ClientError, cause: BaseException | None = None) -> None:
        if cause is not None:
            error.__cause__ = cause
        self._failure = self._failure or error
        self._connected.set()  # wake senders: they see the failure
        self._fail_pending(error)
        subscriptions, self._subs = self._subs, {}
        for subscription in subscriptions.values():
            subscription.fail(error)


def _ws_url(base_url: str) -> str:
    base = base_url.rstrip("/")
    if base.startswith("http://"):
        base = "ws://" + base[len("http://") :]
    elif base.startswith("https://"):
        base = "wss://" + base[len("https://") :]
    return base if base.endswith("/v1/ws") else base + "/v1/ws"


def _from(resume: str | None) -> dict[str, str]:
    return {"from": resume} if resume else {}


def _failing(subscription: WsSubscription) -> Callable[[asyncio.Future[Any]], None]:
    def done(future: asyncio.Future[Any]) -> None:
        if not future.cancelled() and future.exception() is not None:
            error = future.exception()
            if isinstance(error, RequestRejected):
                subscription.fail(error)

    return done
