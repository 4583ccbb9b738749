"""`YPeer`: one connected client as a room sees it, with a bounded send queue.

A room never writes to a socket: it hands each peer the messages meant for it with `YPeer.send`,
which never blocks, and the transport's single writer drains them with `YPeer.next_messages`.
When the queue is over its bounds the peer is too slow: it is closed with ``too_slow``
rather than buffered without limit (a reconnect resyncs it from step 1, so it loses nothing).
"""

from __future__ import annotations

import asyncio
import collections
import itertools
from collections.abc import Callable

from airlane.core.errors import ErrorCode
from airlane.sync.yjs.config import DEFAULT_MAX_QUEUED_BYTES, DEFAULT_MAX_QUEUED_MESSAGES

__all__ = ["YPeer"]

_ids = itertools.count(1)


class YPeer:
    """A client in a room: what it may do, its queue, its awareness client ids."""

    def __init__(
        self,
        name: str = "",
        *,
        can_write: bool = True,
        max_queued_messages: int = DEFAULT_MAX_QUEUED_MESSAGES,
        max_queued_bytes: int = DEFAULT_MAX_QUEUED_BYTES,
    ) -> None:
        self.id = next(_ids)
        """Unique in this process (for logs)."""
        self.name = name or f"peer-{self.id}"
        """Who it is (the principal's name)."""
        self.can_write = can_write
        """False for a read-only peer: its changes are refused (`ReadOnlyPeer`)."""
        self.awareness_ids: set[int] = set()
        """Awareness client ids this peer announced; removed from the room when it leaves."""
        self.close_code: ErrorCode | None = None
        """Set once the peer is to be closed: why (the endpoint turns it into its close
        code) ..."""
        self.close_reason = ""
        """... and its reason."""
        self.on_close: Callable[[], object] | None = None
        """Called once by `close`: the transport stops a writer that is stuck sending to a
        peer that does not read."""
        self._max_messages = max_queued_messages
        self._max_bytes = max_queued_bytes
        self._queue: collections.deque[bytes] = collections.deque()
        self._queued_bytes = 0
        self._wakeup = asyncio.Event()

    def __repr__(self) -> str:
        return f"<YPeer {self.name} #{self.id}>"

    @property
    def closed(self) -> bool:
        """True once `close` was called: nothing more is queued or handed out."""
        return self.close_code is not None

    @property
    def queued(self) -> int:
        """Messages waiting for the writer."""
        return len(self._queue)

    def send(self, message: bytes) -> None:
        """Queue ``message`` for the socket; never blocks. Over the bounds, close the peer as
        too slow instead."""
        if self.close_code is not None:
            return
        queue = self._queue
        if queue and (
            len(queue) >= self._max_messages or self._queued_bytes + len(message) > self._max_bytes
        ):
            self.close(
                ErrorCode.TOO_SLOW,
                f"too slow: {len(queue)} messages ({self._queued_bytes} bytes) not yet read",
            )
            return
        queue.append(message)
        self._queued_bytes += len(message)
        self._wakeup.set()

    def close(self, code: ErrorCode, reason: str) -> None:
        """Ask the transport to close the socket with ``code`` and ``reason``; the first call
        wins, queued messages are dropped."""
        if self.close_code is not None:
            return
        self.close_code, self.close_reason = code, reason
        self._queue.clear()
        self._queued_bytes = 0
        self._wakeup.set()
        if self.on_close is not None:
            self.on_close()

    async def next_messages(self) -> list[bytes]:
        """Wait for queued messages and take them all; ``[]`` once the peer is closed."""
        while not self._queue:
            if self.close_code is not None:
                return []
            self._wakeup.clear()
            await self._wakeup.wait()
        if self.close_code is not None:
            return []
        messages = list(self._queue)
        self._queue.clear()
        self._queued_bytes = 0
        return messages
