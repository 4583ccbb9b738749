"""`WsSubscription`: one stream read over a `WsClient`, as an async iterator of events.

The client's single reader task pushes events in; the caller pulls them out. The buffer is
bounded (``max_queue``). When it is full the subscription does not block the reader (which
serves every stream on the socket) and does not grow: it stops buffering and is marked
*lagging*. Once the caller has drained what was buffered, the client re-subscribes from the
last buffered event, and the gateway sends what was missed from its log, coalesced. The log is
the buffer (docs/streams.md, "Slow readers").
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from typing import Protocol

from airlane.client.errors import ClientError
from airlane.client.events import StreamEvent

__all__ = ["DEFAULT_MAX_QUEUE", "WsSubscription"]

DEFAULT_MAX_QUEUE = 1024
"""Events buffered per subscription before it turns lagging: a few seconds of a fast token
stream, and at most a few MiB of memory even for large events."""


class _Owner(Protocol):
    """What a subscription needs from its client."""

    async def catch_up(self, subscription: WsSubscription) -> None: ...

    async def unsubscribe(self, stream_id: str) -> str | None: ...


class WsSubscription:
    """Events of one stream, from a `WsClient`; iterate with ``async for``.

    Iteration ends after the terminal ``done`` / ``error`` event (or `aclose`); it raises the
    client's error if the connection was lost for good.
    """

    def __init__(
        self,
        stream_id: str,
        owner: _Owner,
        *,
        resume: str | None = None,
        max_queue: int = DEFAULT_MAX_QUEUE,
    ) -> None:
        if max_queue < 1:
            raise ValueError("max_queue must be >= 1")
        self.stream_id = stream_id
        """The stream read."""
        self.last_id = resume
        """Resume token of the last event buffered: where a re-subscription continues."""
        self.finished = False
        """True once the terminal event was buffered: the gateway sends nothing more."""
        self.lagging = False
        """True while the buffer overflowed and events are being left in the gateway's log."""
        self._owner = owner
        self._max_queue = max_queue
        self._buffer: deque[StreamEvent] = deque()
        self._wakeup = asyncio.Event()
        self._failure: ClientError | None = None
        self._closed = False
        self._epoch, self._seq = _split(resume)

    # -- the reader's side ------------------------------------------------------------------

    def push(self, event: StreamEvent) -> None:
        """Buffer one event (called by the client's reader); duplicates are ignored."""
        if self.lagging or self.finished or self._closed:
            return
        epoch = _split(event.id)[0]
        if epoch == self._epoch and epoch is not None and event.seq <= self._seq:
            return  # already buffered: a re-subscription overlapped
        if len(self._buffer) >= self._max_queue:
            self.lagging = True
        else:
            self._buffer.append(event)
            self.last_id = event.id or self.last_id
            self._epoch, self._seq = epoch or self._epoch, event.seq
            self.finished = event.terminal
        self._wakeup.set()

    def fail(self, error: ClientError) -> None:
        """End iteration with ``error`` once the buffer is drained."""
        if self._failure is None:
            self._failure = error
        self._wakeup.set()

    # -- the caller's side ------------------------------------------------------------------

    def __aiter__(self) -> WsSubscription:
        return self

    async def __anext__(self) -> StreamEvent:
        while True:
            if self._buffer:
                return self._buffer.popleft()
            if self.finished or self._closed:
                raise StopAsyncIteration
            if self._failure is not None:
                raise self._failure
            if self.lagging:
                await self._owner.catch_up(self)
                continue
            self._wakeup.clear()
            await self._wakeup.wait()

    async def aclose(self) -> None:
        """Unsubscribe (if the stream has not ended) and end iteration."""
        if not (self.finished or self._closed):
            # A client that lost its connection has no cursor left to release.
            with contextlib.suppress(ClientError):
                await self._owner.unsubscribe(self.stream_id)
        self.close()

    def close(self) -> None:
        """End iteration after what is buffered, without telling the gateway."""
        self._closed = True
        self._wakeup.set()

    async def __aenter__(self) -> WsSubscription:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def _split(token: str | None) -> tuple[str | None, int]:
    if not token:
        return None, 0
    epoch, _, seq = token.rpartition(":")
    return epoch, int(seq) if seq.isdigit() else 0
