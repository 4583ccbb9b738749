"""`SSEPump`: streams a subscription as an SSE response (heartbeats, disconnects, flow control).

Two ways to wait for events, chosen by what the hub offers:

- **direct** (the hub can call back, `Subscription.listen`): the hub calls the pump from the
  appending task right after an append, and the pump renders and sends the new frames at
  once: through the server's ``airlane.http.write_body`` extension when it offers one (a plain
  call, `airlane.transports.http.http_protocol`), else driving its ``send`` in place
  (`send_now`). No task wakes up per batch,
  which on the paced path was a third of a chunk's cost. When the server applies
  backpressure (``send`` would wait), the rest of that send runs in a task and the pump
  writes nothing else until it is done, then catches up with one coalesced read. The pump's
  own task meanwhile waits in ``receive`` for the client to leave, and is woken from there
  when the run ends: no second task per connection;
- **tasked** (any hub): the pump's task awaits `Subscription.next_batch` and sends, and a
  watcher task waits in ``receive``.

Either way, a slow reader blocks only its own pump: its cursor falls behind, its next read is
coalesced, and memory per connection stays bounded by the server's write buffer plus one
batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable
from typing import Any

from airlane.core import TERMINAL_KINDS, Event
from airlane.gateway import Subscription
from airlane.runtime.drains import DrainQueue, drain_queue
from airlane.runtime.heartbeats import heartbeats
from airlane.runtime.plain import plain_context
from airlane.transports.http.asgi import Receive, Send
from airlane.transports.http.metrics import HttpMetrics
from airlane.transports.http.send_now import send_now, send_went_through
from airlane.wire.compression import Compression, CompressionChoice, make_compressor

__all__ = ["SSE_HEADERS", "SSEPump"]

SSE_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    # Tell nginx-style proxies not to buffer the stream.
    (b"x-accel-buffering", b"no"),
]

# uvloop's timers have millisecond resolution and may fire up to that much early.
_TIMER_SLACK_S = 0.001

# Reads one call-back may write before it lets the loop run: a reader far behind catches up
# over several loop turns rather than in one long one.
_MAX_DIRECT_READS = 8

_PING = b": ping\n\n"

Render = Callable[[list[Event]], bytes]


class SSEPump:
    """Streams a subscription as an SSE response until it ends or the client leaves.

    ``render`` turns a batch of events into SSE bytes (from the events' encode caches).
    Heartbeat comments keep idle connections alive through proxies: one goes out once the
    stream has been idle for ``ping_s``, kept by one timer per ping period (re-armed only when
    it fires), not a timeout per wait; ahead of a pause the process sees coming (a full
    garbage-collector pass), a direct pump whose ping would fall due meanwhile sends it first
    (`beat_before`, `airlane.runtime.heartbeats`). ASGI servers drop writes after a
    disconnect without telling the sender, so the pump reads ``receive`` (in its own task in
    direct mode, in a watcher task in tasked mode) and stops when ``http.disconnect``
    arrives. ``write_body`` is the server's ``airlane.http.write_body`` extension, if it has
    one: direct mode writes body parts through it whenever it takes them.
    """

    __slots__ = (
        "__weakref__",
        "_budget",
        "_compressor",
        "_done",
        "_drains",
        "_idle_since",
        "_in_receive",
        "_inflight",
        "_limit",
        "_ping_due",
        "_pumping",
        "_render",
        "_scheduled",
        "_subscription",
        "_ticking",
        "_timer",
        "_woken",
        "_write_body",
        "batch_limit",
        "compression",
        "disconnected",
        "metrics",
        "ping_s",
        "receive",
        "send",
    )

    def __init__(
        self,
        send: Send,
        receive: Receive,
        *,
        ping_s: float,
        batch_limit: int,
        metrics: HttpMetrics,
        compression: CompressionChoice | None = None,
        write_body: Callable[[bytes], bool] | None = None,
    ) -> None:
        self.send = send
        self.receive = receive
        self._write_body = write_body
        self.compression = compression or CompressionChoice(Compression.NONE)
        self._compressor = (
            None
            if self.compression.method is Compression.NONE
            else make_compressor(self.compression)
        )
        self.ping_s = ping_s
        self.batch_limit = batch_limit
        self.metrics = metrics
        self.disconnected = False
        # Loop time since which the stream has been idle (nothing written, nothing in
        # flight); None while the pump is not waiting for events.
        self._idle_since: float | None = None
        self._ping_due = False
        self._timer: asyncio.TimerHandle | None = None
        # The task the ping timer is for (here, not in the timer's arguments: one object
        # fewer for every idle reader).
        self._ticking: asyncio.Task[Any] | None = None
        # Direct mode: the outcome of `pump`, a send the server made wait, and the run's state.
        self._done: asyncio.Future[bool] | None = None
        self._pumping: asyncio.Task[Any] | None = None  # the task running the direct pump
        self._in_receive = False  # it waits in `receive` (for the client to leave)
        self._woken = False  # `_on_done` cancelled that wait
        self._inflight: asyncio.Task[None] | None = None
        self._subscription: Subscription | None = None
        self._render: Render | None = None
        self._scheduled = False  # a drain is due (in the loop's `DrainQueue`)
        self._drains: DrainQueue | None = None
        self._budget = -1
        self._limit = batch_limit

    async def start(
        self, headers: Iterable[tuple[bytes, bytes]] = (), prelude: bytes = b""
    ) -> None:
        """Send the response head (and ``prelude``, e.g. a ``retry:`` field)."""
        extra = list(headers)
        if self._compressor is not None:
            extra.append((b"content-encoding", self.compression.method.value.encode()))
            extra.append((b"vary", b"accept-encoding"))
        await self.send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [*SSE_HEADERS, *extra],
            }
        )
        if prelude:
            await self.write(prelude)

    async def write(self, body: bytes) -> None:
        """Send part of the body (compressed and flushed, if compression was negotiated)."""
        await self.send(self._message(body))

    async def finish(self, body: bytes = b"") -> None:
        """End the response."""
        if self._compressor is not None:
            body = self._compressor.compress(body) + self._compressor.finish()
        if not self.disconnected:
            await self.send({"type": "http.response.body", "body": body, "more_body": False})
            self.metrics.count_sent(len(body))

    async def pump(
        self, subscription: Subscription, render: Render, *, max_events: int | None = None
    ) -> bool:
        """Write the subscription's frames until it ends (True), the client leaves (False) or
        ``max_events`` frames were written (False; the client is expected to resume)."""
        self._budget = max_events if max_events is not None else -1
        self._limit = self.batch_limit if self._budget < 0 else min(self._budget, self.batch_limit)
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        self._ticking = task
        self._timer = loop.call_at(
            loop.time() + self.ping_s, self._on_ping_timer, context=plain_context()
        )
        watcher: asyncio.Task[None] | None = None
        try:
            if subscription.listen(self._on_ready):
                return await self._pump_direct(loop, subscription, render, task)
            # Tasked: this task waits in next_batch, so another one watches for a disconnect.
            watcher = asyncio.create_task(self._watch(task), name="sse-disconnect-watch")
            return await self._pump_tasked(loop, subscription, render, task)
        except asyncio.CancelledError:
            if self.disconnected and task.uncancel() == 0:
                return False
            raise
        finally:
            subscription.listen(None)
            await self._disarm(watcher)

    # -- direct mode ------------------------------------------------------------------------

    async def _pump_direct(
        self,
        loop: asyncio.AbstractEventLoop,
        subscription: Subscription,
        render: Render,
        task: asyncio.Task[Any],
    ) -> bool:
        # The hub's call-backs do the writing, so this task is free to watch for the client
        # leaving itself (no watcher task per connection): it waits in `receive`, and the
        # run's end (`done`) interrupts that wait by cancelling it (`_on_done`).
        done: asyncio.Future[bool] = loop.create_future()
        self._done = done
        self._drains = drain_queue(loop)
        self._subscription, self._render = subscription, render
        self._idle_since = loop.time()
        self._pumping = task
        done.add_done_callback(self._on_done, context=plain_context())
        beats = heartbeats(loop)
        beats.add(self)
        self._drain()  # what is already there
        try:
            self._in_receive = True
            try:
                while (await self.receive())["type"] != "http.disconnect":
                    pass
            finally:
                self._in_receive = False
            self.disconnected = True
            return False
        except asyncio.CancelledError:
            if self._woken and task.uncancel() == 0:
                return done.result()  # True, False, or the run's exception
            raise
        finally:
            beats.discard(self)
            self._idle_since = None
            self._done = self._pumping = self._drains = None
            self._woken = False
            self._subscription = self._render = None
            if self._inflight is not None:
                self._inflight.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await self._inflight
                self._inflight = None

    def _on_done(self, done: asyncio.Future[bool]) -> None:
        """The direct run has its outcome: wake the pump's task from its `receive` wait. Only
        while it is there: a cancel that arrived after the wait would hit whatever it awaits
        next."""
        task = self._pumping
        if done is self._done and task is not None and self._in_receive:
            self._woken = True
            task.cancel()

    def _on_ready(self) -> None:
        """The hub's call-back: the subscription may have something new. The drain runs as a
        plain call-back at the end of this loop turn, or sooner when many are due
        (`airlane.runtime.drains`), so that what the producers of this turn append goes out
        in one write (a reader that is behind gets one coalesced read), and costs no task
        switch."""
        drains = self._drains  # set while a direct run is on (as `_done` is)
        if not self._scheduled and drains is not None:
            self._scheduled = True
            drains.add(self._drain)

    def _drain(self) -> None:
        """Write what the subscription has, in place, while the server takes writes."""
        self._scheduled = False
        done, subscription, render = self._done, self._subscription, self._render
        if done is None or done.done() or self._inflight is not None:
            return
        assert subscription is not None and render is not None
        try:
            if self._budget == 0:  # reached with its last write in flight, now done
                done.set_result(False)
                return
            for round_ in range(_MAX_DIRECT_READS):
                limit = self._limit
                batch = subscription.poll(limit)
                if not batch:
                    # Woken with nothing to read: the stream, or the hub, may have closed.
                    if round_ == 0 and subscription.over:
                        done.set_result(True)
                    return
                body = render(batch)
                if self._compressor is not None:
                    body = self._compressor.compress(body)
                write_body = self._write_body
                if write_body is not None and write_body(body):
                    inflight = None
                    self.metrics.count_sent(len(body))
                else:
                    inflight = send_now(self.send, self._message_raw(body))
                self._written(subscription, batch, len(body))
                if inflight is not None:
                    # The server is applying backpressure: write nothing more until it is done,
                    # and end the run (the stream's end, the budget spent) only then, or the
                    # run's end would cancel this last write (`_on_inflight_done` drains again).
                    self._idle_since = None
                    self._inflight = inflight
                    inflight.add_done_callback(self._on_inflight_done)
                    return
                if batch[-1].kind in TERMINAL_KINDS:
                    done.set_result(True)
                    return
                if self._budget == 0:
                    done.set_result(False)
                    return
                if len(batch) < limit:
                    return  # a short read took everything there was
            # Far behind: let the loop run, then go on.
            self._on_ready()
        except Exception as exc:
            if not done.done():
                done.set_exception(exc)
        finally:
            if self._inflight is None and not done.done():
                self._idle_since = done.get_loop().time()

    def _on_inflight_done(self, task: asyncio.Task[None]) -> None:
        self._inflight = None
        if self._done is not None and send_went_through(task, self._done):
            self._drain()

    # -- tasked mode ------------------------------------------------------------------------

    async def _pump_tasked(
        self,
        loop: asyncio.AbstractEventLoop,
        subscription: Subscription,
        render: Render,
        task: asyncio.Task[Any],
    ) -> bool:
        # Bound once: the loop below runs once per batch, and each lookup is paid per batch.
        poll, next_batch, limit = subscription.poll, subscription.next_batch, self._limit
        send, compressor = self.send, self._compressor
        while True:
            # What is ready goes out at once; only an idle stream can be due a heartbeat.
            batch = poll(limit)
            if not batch:
                self._idle_since = loop.time()
                try:
                    batch = await next_batch(limit)
                except asyncio.CancelledError:
                    if not self._ping_due:
                        raise
                    self._ping_due = False
                    if task.uncancel() > 0:
                        raise  # also cancelled by someone else
                    await self.write(_PING)
                    continue
                finally:
                    self._idle_since = None
                if not batch:
                    return True
            body = render(batch)
            if compressor is not None:
                body = compressor.compress(body)
            await send(self._message_raw(body))
            self._written(subscription, batch, len(body))
            if self._budget == 0:
                return False
            limit = self._limit

    # -- shared -----------------------------------------------------------------------------

    def _message(self, body: bytes) -> dict[str, Any]:
        if self._compressor is not None:
            body = self._compressor.compress(body)
        return self._message_raw(body)

    def _message_raw(self, body: bytes) -> dict[str, Any]:
        self.metrics.count_sent(len(body))
        return {"type": "http.response.body", "body": body, "more_body": True}

    def _written(self, subscription: Subscription, batch: list[Event], size: int) -> None:
        """Bookkeeping after a batch was handed to the server."""
        now_ns = time.monotonic_ns()
        subscription.mark_written(batch, now_ns)  # the subscriber's gateway latency
        self.metrics.observe_written(batch, now_ns, 0, subscription.live_from)  # delivery lag
        if self._budget > 0:
            self._budget = max(0, self._budget - len(batch))
            self._limit = min(self._budget, self._limit) if self._budget else self._limit

    async def _disarm(self, watcher: asyncio.Task[None] | None) -> None:
        """Stop the ping timer and the disconnect watcher, if there is one."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._ticking = None
        if watcher is not None:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher

    def _on_ping_timer(self) -> None:
        """Ping a stream idle for ``ping_s`` (direct mode: here; tasked: by interrupting the
        pump's wait); then re-arm for when the stream can next be due."""
        pumping = self._ticking
        assert pumping is not None
        loop = pumping.get_loop()
        now = loop.time()
        since = self._idle_since
        if since is not None and now >= since + self.ping_s - _TIMER_SLACK_S:
            if self._done is not None:
                self._ping_direct(now)
            elif not self._ping_due:
                self._ping_due = True
                pumping.cancel()
            since = None  # the idle time starts over
        due = (now if since is None else since) + self.ping_s
        self._timer = loop.call_at(due, self._on_ping_timer, context=plain_context())

    def beat_before(self, deadline: float) -> bool:
        """Ping now if the stream is idle and its ping would fall due before ``deadline``
        (loop time; `airlane.runtime.heartbeats`): direct mode only, where the pump is
        registered."""
        since, done = self._idle_since, self._done
        if done is None or since is None or since + self.ping_s > deadline:
            return False
        return self._ping_direct(done.get_loop().time())

    def _ping_direct(self, now: float) -> bool:
        done = self._done
        if done is None or done.done() or self._inflight is not None:
            return False
        try:
            inflight = send_now(self.send, self._message(_PING))
        except Exception as exc:
            done.set_exception(exc)
            return False
        if inflight is not None:
            self._idle_since = None
            self._inflight = inflight
            inflight.add_done_callback(self._on_inflight_done)
        else:
            self._idle_since = now
        return True

    async def _watch(self, pumping: asyncio.Task[Any]) -> None:
        while (await self.receive())["type"] != "http.disconnect":
            pass
        self.disconnected = True
        pumping.cancel()
