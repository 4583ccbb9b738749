"""`AgentChannel`: an agent session on one RSocket request-channel (route ``agent.session``).

The client's payloads are commands, each one object (in the connection's data encoding) with an
``op`` and, optionally, an ``id`` echoed in the answer:

- ``{"op": "subscribe", "stream_id": S, "resume": "epoch:seq"?}`` follows a stream;
- ``{"op": "unsubscribe", "stream_id": S}`` stops following it;
- ``{"op": "publish", "stream_id": S, "event": {...}}`` appends an event;
- ``{"op": "generate", "request": {chat request}}`` starts a generation and follows it;
- ``{"op": "cancel", "stream_id": S}`` stops a generation (``{"op": "cancelled", ...}``).

The server's payloads are the followed streams' events, ``{"stream_id": S, "event": {...}}``,
and answers: ``{"op": "subscribed", "stream_id", "epoch", "from_seq"}``, ``{"op": "started",
"stream_id", "epoch"}``, ``{"op": "published", "stream_id", "seq"}``, ``{"op": "ended",
"stream_id", "seq"}`` once a followed stream is over, and ``{"op": "error", "code", "message"}``
for a refused command (the channel stays open).

Commands run one at a time, in order (an agent's publishes land in the order it sent them).
Every payload out, events and answers alike, spends one of the client's ``REQUEST_N`` credits:
followers put events in one bounded queue and wait while it is full, so a client that grants
little is sent little and the server holds at most ``batch_limit`` payloads for it; the hub's
log is the buffer. A client that sends commands faster than they are answered, past
`MAX_PENDING_COMMANDS`, has its channel ended with ``REJECTED``. When the client completes its
side, the channel completes once every followed stream is over.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable
from typing import Any

from airlane.core import TERMINAL_KINDS, Position
from airlane.core.errors import AirlaneError, ErrorCode
from airlane.gateway import Gateway, Principal, Subscription
from airlane.runtime.admission import Admission
from airlane.transports.rsocket.codec import DataCodec
from airlane.transports.rsocket.config import RSocketServerConfig
from airlane.transports.rsocket.routes import field, published_event, resume_position
from airlane.wire.rsocket.connection import RSocketServerConnection

__all__ = ["COMMAND_WINDOW", "MAX_PENDING_COMMANDS", "AgentChannel"]

log = logging.getLogger("airlane.rsocket")

COMMAND_WINDOW = 64
"""Commands the client may send ahead of their answers: granted by ``REQUEST_N``, renewed by
half as they run."""
MAX_PENDING_COMMANDS = COMMAND_WINDOW + 1
"""Commands received and not yet run (the window, and the request's own), past which the
channel ends (``REJECTED``): only a client that ignores ``REQUEST_N`` gets there."""


class _Follower:
    """One followed stream: its cursor and the task feeding its events to the queue."""

    __slots__ = ("subscription", "task")

    def __init__(self, subscription: Subscription) -> None:
        self.subscription = subscription
        self.task: asyncio.Task[None] | None = None


class AgentChannel:
    """One agent session; see the module docstring. Run by `RSocketSession`."""

    def __init__(
        self,
        gateway: Gateway,
        principal: Principal,
        connection: RSocketServerConnection,
        stream_id: int,
        codec: DataCodec,
        config: RSocketServerConfig,
        *,
        flush: Callable[[], None],
        writable: asyncio.Event,
    ) -> None:
        self.gateway = gateway
        self.principal = principal
        self.stream_id = stream_id
        self._connection = connection
        self._codec = codec
        self._config = config
        self._flush = flush
        self._writable = writable
        self._inbox: deque[bytes] = deque()
        self._inbox_ready = asyncio.Event()
        self._input_done = False
        self._out: deque[bytes] = deque()
        self._out_ready = asyncio.Event()
        self._out_room = asyncio.Event()
        self._credit = asyncio.Event()
        self._failure: AirlaneError | None = None
        self._finished = False  # every command ran and every follower ended
        self._followers: dict[str, _Follower] = {}
        self._ran = 0  # commands run since the client's credit was last renewed

    @property
    def following(self) -> int:
        """Streams followed now."""
        return len(self._followers)

    # -- what the session calls -------------------------------------------------------------

    def receive(self, data: bytes | None, *, complete: bool) -> None:
        """A payload from the client (None: a completion without one)."""
        if data is not None:
            if len(self._inbox) >= MAX_PENDING_COMMANDS:
                self._fail(
                    AirlaneError(
                        f"more than {MAX_PENDING_COMMANDS} commands wait for an answer",
                        code=ErrorCode.TOO_MANY_REQUESTS,
                    )
                )
                return
            self._inbox.append(data)
        if complete:
            self._input_done = True
        self._inbox_ready.set()

    def wake(self) -> None:
        """Credit arrived, the link drained, or the connection ended: look again."""
        self._credit.set()

    async def run(self) -> None:
        """Serve the channel until it completes, is cancelled or fails (an `AirlaneError`
        the session turns into the stream's ERROR)."""
        self._connection.request_n(self.stream_id, COMMAND_WINDOW)
        self._flush()
        commands = asyncio.create_task(self._commands(), name=f"rsocket channel {self.stream_id}")
        try:
            await self._send()
        finally:
            commands.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await commands
            await self._release_all()

    # -- sending ----------------------------------------------------------------------------

    async def _send(self) -> None:
        connection, stream_id = self._connection, self.stream_id
        while True:
            while not self._out:
                if self._failure is not None:
                    raise self._failure
                if self._finished:
                    if connection.closed is None and connection.is_open(stream_id):
                        connection.send_complete(stream_id)
                        self._flush()
                    return
                self._out_ready.clear()
                await self._out_ready.wait()
            if not await self._wait_for_credit():
                return
            while self._out and connection.credit(stream_id):
                connection.send_payload(stream_id, self._out.popleft())
            self._out_room.set()
            self._flush()

    async def _wait_for_credit(self) -> bool:
        connection, stream_id = self._connection, self.stream_id
        while connection.closed is None and connection.is_open(stream_id):
            if connection.credit(stream_id) and self._writable.is_set():
                return True
            self._credit.clear()
            if not self._writable.is_set():
                await self._writable.wait()
            else:
                await self._credit.wait()
        return False

    async def _put(self, obj: Any = None, *, raw: bytes | None = None) -> None:
        """Queue one payload, waiting while the queue is full."""
        while len(self._out) >= self._config.batch_limit:
            self._out_room.clear()
            await self._out_room.wait()
        self._out.append(self._codec.reply(obj) if raw is None else raw)
        self._out_ready.set()

    def _fail(self, exc: AirlaneError) -> None:
        if self._failure is None:
            self._failure = exc
        self._out_ready.set()

    # -- commands ---------------------------------------------------------------------------

    async def _commands(self) -> None:
        while True:
            while not self._inbox:
                if self._input_done:
                    await self._drain_followers()
                    self._finished = True
                    self._out_ready.set()
                    return
                self._inbox_ready.clear()
                await self._inbox_ready.wait()
            await self._put(await self._answer(self._inbox.popleft()))
            self._ran += 1
            if self._ran >= COMMAND_WINDOW // 2:  # renew the client's credit by half a window
                self._connection.request_n(self.stream_id, self._ran)
                self._ran = 0
                self._flush()

    async def _answer(self, data: bytes) -> dict[str, Any]:
        """Run one command; its answer, or the error that refused it."""
        ident = None
        try:
            body = self._codec.command(data)
            ident = body.get("id")
            answer = await self._command(body)
        except AirlaneError as exc:
            answer = {"op": "error", "code": exc.code.value, "message": str(exc)[:1000]}
            if exc.param:
                answer["param"] = exc.param
        except Exception:
            log.exception("RSocket agent command failed")
            answer = {"op": "error", "code": "internal_error", "message": "the command failed"}
        if ident is not None:
            answer["id"] = ident
        return answer

    async def _command(self, body: dict[str, Any]) -> dict[str, Any]:
        op = body.get("op")
        answer: dict[str, Any]
        if op == "subscribe":
            answer = await self._subscribe(field(body, "stream_id"), resume_position(body))
        elif op == "unsubscribe":
            stream = field(body, "stream_id")
            await self._release(stream)
            answer = {"op": "unsubscribed", "stream_id": stream}
        elif op == "publish":
            stream = field(body, "stream_id")
            event = await self.gateway.publish(self.principal, stream, published_event(body))
            answer = {"op": "published", "stream_id": stream, "seq": event.seq}
        elif op == "generate":
            answer = await self._generate(body.get("request"))
        elif op == "cancel":
            stream = field(body, "stream_id")
            cancelled = await self.gateway.cancel(self.principal, stream)
            answer = {"op": "cancelled", "stream_id": stream, "cancelled": cancelled}
        else:
            raise AirlaneError(
                f"unknown op {str(op)[:40]!r}: use subscribe, unsubscribe, publish, generate or "
                "cancel",
                code=ErrorCode.UNKNOWN_OP,
                param="op",
            )
        return answer

    async def _subscribe(self, stream: str, resume: Position | None) -> dict[str, Any]:
        self._check_room(stream)
        subscription = await self.gateway.subscribe(self.principal, stream, resume=resume)
        position = subscription.position
        self._follow(stream, subscription)
        return {"op": "subscribed", "stream_id": stream, "epoch": position.epoch,
                "from_seq": position.seq}  # fmt: skip

    async def _generate(self, request: Any) -> dict[str, Any]:
        await Admission.for_loop().admit()
        self._check_room(None)
        info = (await self.gateway.start_chat(self.principal, request)).info
        subscription = await self.gateway.subscribe(self.principal, info.stream_id)
        self._follow(info.stream_id, subscription)
        return {"op": "started", "stream_id": info.stream_id, "epoch": info.epoch}

    def _check_room(self, stream: str | None) -> None:
        if stream is not None and stream in self._followers:
            raise AirlaneError(f"already following {stream!r}", code=ErrorCode.ALREADY_SUBSCRIBED)
        if len(self._followers) >= self._config.max_channel_streams:
            raise AirlaneError(
                f"an agent session follows at most {self._config.max_channel_streams} streams",
                code=ErrorCode.TOO_MANY_SUBSCRIPTIONS,
            )

    # -- followers --------------------------------------------------------------------------

    def _follow(self, stream: str, subscription: Subscription) -> None:
        follower = self._followers[stream] = _Follower(subscription)
        follower.task = asyncio.create_task(
            self._feed(stream, follower), name=f"rsocket follow {stream}"
        )

    async def _feed(self, stream: str, follower: _Follower) -> None:
        """Put ``stream``'s events in the queue as it has room; say when it is over."""
        subscription, envelope = follower.subscription, self._codec.envelope
        epoch = subscription.position.epoch
        limit = self._config.batch_limit
        try:
            while batch := await subscription.next_batch(limit):
                for event in batch:
                    await self._put(raw=envelope(stream, epoch, event))
                    if event.kind in TERMINAL_KINDS:
                        break
        finally:
            if self._followers.get(stream) is follower:
                del self._followers[stream]
                await subscription.aclose()
        await self._put({"op": "ended", "stream_id": stream, "seq": subscription.position.seq})

    async def _drain_followers(self) -> None:
        while self._followers:
            tasks = [f.task for f in self._followers.values() if f.task is not None]
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _release(self, stream: str) -> None:
        follower = self._followers.pop(stream, None)
        if follower is None:
            raise AirlaneError(f"not following {stream!r}", code=ErrorCode.NOT_SUBSCRIBED)
        if follower.task is not None:
            follower.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await follower.task
        await follower.subscription.aclose()

    async def _release_all(self) -> None:
        for stream in list(self._followers):
            with contextlib.suppress(AirlaneError):
                await self._release(stream)
