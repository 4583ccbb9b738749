"""`WebSocketPump`: writes one subscription's events to a WebSocket, as messages.

Two ways to wait for events, chosen by what the hub and the server offer:

- **direct** (the hub can call back, `Subscription.listen`, and the server offers the
  ``airlane.websocket.write_now`` extension, `airlane.transports.http.ws_protocol`): the hub
  calls the pump from the appending task, and at the end of that loop turn the pump reads what
  is new and writes it at once, with a plain call. No task wakes up per batch: on the paced
  path, a task step per chunk was the largest cost the WebSocket path had over SSE's. When the
  write cannot go at once (flow control has paused the connection, or another writer of the
  socket is waiting, `lock`), the batch goes through the ASGI ``send`` instead, driven in
  place and finished in a task if it must wait, and the pump writes nothing else until it is
  done;
- **tasked** (any hub, any server): the pump's task awaits `Subscription.next_batch` and
  sends each batch.

Either way, a slow reader blocks only its own pump: its cursor falls behind and its next read
is coalesced, and what the gateway holds for it stays bounded by the server's write buffer
plus one batch.

A subscription may also run on credits (`Credits`): the client says how many messages it
will take, the pump writes at most that many and waits for more, which the client grants as
its application reads. The socket's flow control covers the whole connection; credits let a
client hold back one stream (a tab in the background, a slow consumer) while the others go
on, and the stream stays on the gateway, where a reader behind costs nothing but its cursor.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

from airlane.core import TERMINAL_KINDS, Event
from airlane.gateway import Subscription
from airlane.runtime.drains import DrainQueue, drain_queue
from airlane.runtime.eager import start_eagerly
from airlane.transports.http.asgi import Send
from airlane.transports.http.metrics import HttpMetrics
from airlane.transports.http.send_now import send_went_through
from airlane.transports.http.ws_protocol import SEND_MANY_TYPE

__all__ = ["Credits", "Frames", "WebSocketPump", "WriteNow"]

Frames = Callable[[list[Event]], list[bytes]]
"""Turns a batch of events into the messages that carry them (possibly none)."""
WriteNow = Callable[[list[bytes], bool], bool]
"""The server's ``airlane.websocket.write_now`` call-back: (messages, binary) -> written."""

# Reads one call-back may write before it lets the loop run: a reader far behind catches up
# over several loop turns rather than in one long one.
_MAX_DIRECT_READS = 8


class Credits:
    """Messages a subscription's reader will still take (see the module docstring)."""

    MAX = 1_000_000
    """Credits a reader may hold at most: a grant past it is capped."""

    def __init__(self, initial: int) -> None:
        self.available = min(initial, self.MAX)
        """Messages the pump may write before it waits for a grant."""
        self._granted = asyncio.Event()
        if self.available > 0:
            self._granted.set()
        self._wake: Callable[[], None] | None = None

    def grant(self, count: int) -> int:
        """The reader takes ``count`` more messages; the credits available now."""
        self.available = min(self.available + count, self.MAX)
        if self.available > 0:
            self._granted.set()
            if self._wake is not None:
                self._wake()
        return self.available

    def take(self, count: int) -> None:
        """``count`` messages were written."""
        self.available -= count
        if self.available <= 0:
            self._granted.clear()

    async def wait(self) -> None:
        """Until there are credits."""
        await self._granted.wait()

    def on_grant(self, wake: Callable[[], None] | None) -> None:
        """Call ``wake`` when credits are granted (the direct pump's drain)."""
        self._wake = wake


class WebSocketPump:
    """Writes ``subscription``'s events to a WebSocket until the stream ends for this reader.

    ``frames`` renders a batch; ``send`` is the connection's ASGI send, used with the
    ``websocket.send_many`` message when ``send_many`` (the server offers it) and message by
    message otherwise; ``write_now`` is the server's ``airlane.websocket.write_now``, if it has
    one. ``lock``, if given, is held around every ASGI send and is free for a direct write:
    the socket's other writers (a session's replies) take it too, so writes never interleave
    and a reply waiting to be written is not overtaken.
    """

    __slots__ = (
        "__weakref__",
        "_binary",
        "_credits",
        "_done",
        "_drains",
        "_frames",
        "_inflight",
        "_limit",
        "_lock",
        "_metrics",
        "_scheduled",
        "_send",
        "_send_many",
        "_subscription",
        "_write_now",
    )

    def __init__(
        self,
        subscription: Subscription,
        frames: Frames,
        *,
        send: Send,
        binary: bool,
        send_many: bool,
        write_now: WriteNow | None,
        metrics: HttpMetrics,
        batch_limit: int,
        lock: asyncio.Lock | None = None,
        credits: Credits | None = None,
    ) -> None:
        self._subscription = subscription
        self._frames = frames
        self._send = send
        self._binary = binary
        self._send_many = send_many
        self._write_now = write_now
        self._metrics = metrics
        self._limit = batch_limit
        self._lock = lock
        self._credits = credits
        # Direct mode: the run's outcome, a send the server made wait, the loop's drains.
        self._done: asyncio.Future[None] | None = None
        self._inflight: asyncio.Task[None] | None = None
        self._drains: DrainQueue | None = None  # set while a direct run is on
        self._scheduled = False  # a drain is due (in the loop's `DrainQueue`)

    async def run(self) -> None:
        """Write until the stream ends for this reader (its terminal event written) or the
        subscription is over (the stream deleted, the hub closing); cancel it to stop sooner.
        Raises what sending raised (a connection that is closing or gone: the server's
        ``ClientDisconnected``, an ``OSError``)."""
        subscription = self._subscription
        if self._write_now is None or not subscription.listen(self._on_ready):
            await self._run_tasked()
            return
        loop = asyncio.get_running_loop()
        done = self._done = loop.create_future()
        self._drains = drain_queue(loop)
        if self._credits is not None:
            self._credits.on_grant(self._on_ready)
        try:
            self._drain()  # what is already there
            await done
        finally:
            subscription.listen(None)
            if self._credits is not None:
                self._credits.on_grant(None)
            self._done = self._drains = None
            inflight = self._inflight
            if inflight is not None:  # stopped mid-send: that send stops too
                inflight.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await inflight
                self._inflight = None

    # -- direct mode ------------------------------------------------------------------------

    def _on_ready(self) -> None:
        """The hub's call-back: the subscription may have something new. The drain runs as a
        plain call-back at the end of this loop turn, or sooner when many are due
        (`airlane.runtime.drains`), so what the producers of this turn append goes out in
        one write."""
        drains = self._drains
        if not self._scheduled and drains is not None:
            self._scheduled = True
            drains.add(self._drain)

    def _drain(self) -> None:
        """Write what the subscription has, in place, while the connection takes writes."""
        self._scheduled = False
        done = self._done
        if done is None or done.done() or self._inflight is not None:
            return
        subscription, lock, credits = self._subscription, self._lock, self._credits
        write_now = self._write_now
        assert write_now is not None  # direct mode has one
        try:
            for _ in range(_MAX_DIRECT_READS):
                limit = self._limit
                if credits is not None:
                    if credits.available <= 0:
                        return  # a grant drains again (`Credits.on_grant`)
                    limit = min(limit, credits.available)
                batch = subscription.poll(limit)
                if not batch:
                    # Woken with nothing to read: the stream, or the hub, may have closed.
                    if subscription.over:
                        done.set_result(None)
                    return
                frames = self._frames(batch)
                if credits is not None:
                    credits.take(len(frames))
                inflight = None
                if frames and (
                    (lock is not None and lock.locked()) or not write_now(frames, self._binary)
                ):
                    inflight = start_eagerly(self._send_frames(frames))
                self._written(batch, frames)
                if inflight is not None:
                    # Write nothing more until the server has taken this, and end the run (at
                    # the stream's end) only then: `_on_inflight_done` drains again.
                    self._inflight = inflight
                    inflight.add_done_callback(self._on_inflight_done)
                    return
                if batch[-1].kind in TERMINAL_KINDS:
                    done.set_result(None)
                    return
                if len(batch) < limit:
                    return  # a short read took everything there was
            # Far behind: let the loop run, then go on.
            self._on_ready()
        except Exception as exc:
            if not done.done():
                done.set_exception(exc)

    def _on_inflight_done(self, task: asyncio.Task[None]) -> None:
        self._inflight = None
        if self._done is not None and send_went_through(task, self._done):
            self._drain()

    # -- tasked mode ------------------------------------------------------------------------

    async def _run_tasked(self) -> None:
        next_batch, frames_of, credits = self._subscription.next_batch, self._frames, self._credits
        while True:
            limit = self._limit
            if credits is not None:
                await credits.wait()
                limit = min(limit, credits.available)
            batch = await next_batch(limit)
            if not batch:
                return
            frames = frames_of(batch)
            if credits is not None:
                credits.take(len(frames))
            if frames:
                await self._send_frames(frames)
            self._written(batch, frames)

    # -- shared -----------------------------------------------------------------------------

    async def _send_frames(self, frames: list[bytes]) -> None:
        """``frames`` through the ASGI ``send``, holding the lock if there is one."""
        async with self._lock if self._lock is not None else contextlib.nullcontext():
            send = self._send
            if self._send_many:
                key = "bytes" if self._binary else "texts"
                await send({"type": SEND_MANY_TYPE, key: frames})
            elif self._binary:
                for frame in frames:
                    await send({"type": "websocket.send", "bytes": frame})
            else:
                for frame in frames:
                    await send({"type": "websocket.send", "text": frame.decode()})

    def _written(self, batch: list[Event], frames: list[bytes]) -> None:
        """Bookkeeping after a batch was handed to the server."""
        now_ns = time.monotonic_ns()
        subscription = self._subscription
        subscription.mark_written(batch, now_ns)  # the subscriber's gateway latency
        size = sum(map(len, frames))
        self._metrics.observe_written(batch, now_ns, size, subscription.live_from)  # lag, bytes
