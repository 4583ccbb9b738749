"""`MuxedStream`: one mplex stream as the protocol handlers use it.

What the peer sends is buffered up to ``limit`` bytes (mplex has no flow control: a peer that
sends more than a handler reads has the stream reset, not the node's memory filled). Reads take
varint-length-prefixed messages or raw bytes; writes go out through the connection, in order.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable

from airlane.wire.libp2p import (
    MultistreamDialer,
    MultistreamListener,
    PrefixedReader,
    Selected,
    StreamKey,
    prefixed,
)

__all__ = ["MuxedStream", "StreamClosed"]


class StreamClosed(ConnectionError):
    """The stream was reset, or its connection closed, while it was in use."""


class MuxedStream:
    """A stream of a peer connection. See the module docstring."""

    def __init__(
        self,
        key: StreamKey,
        send: Callable[[StreamKey, bytes], Awaitable[None]],
        close: Callable[[StreamKey], Awaitable[None]],
        reset: Callable[[StreamKey], Awaitable[None]],
        *,
        limit: int,
    ) -> None:
        self.key = key
        self.protocol = ""
        """The protocol agreed on the stream."""
        self.limit = limit
        self._send = send
        self._close = close
        self._reset = reset
        self._chunks: deque[bytes] = deque()
        self._buffered = 0
        self._ended = False
        self._broken: str | None = None
        self._waiter: asyncio.Future[None] | None = None
        self._dialer: MultistreamDialer | None = None
        self._reader: PrefixedReader | None = None
        self._messages: deque[bytes] = deque()

    # -- the connection feeds these ---------------------------------------------------------

    def feed(self, data: bytes) -> bool:
        """Bytes from the peer; False if they overrun ``limit`` (the caller resets)."""
        self._buffered += len(data)
        if self._buffered > self.limit:
            return False
        self._chunks.append(data)
        self._wake()
        return True

    def end(self) -> None:
        """The peer closed its side."""
        self._ended = True
        self._wake()

    def abort(self, reason: str) -> None:
        """Reset, or the connection is gone: readers fail with `StreamClosed`."""
        if self._broken is None:
            self._broken = reason
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    # -- handlers use these -----------------------------------------------------------------

    async def read(self) -> bytes:
        """The next bytes; ``b""`` once the peer closed its side.

        Raises:
            StreamClosed: the stream was reset or the connection closed.
        """
        while not self._chunks:
            if self._broken is not None:
                raise StreamClosed(self._broken)
            if self._ended:
                return b""
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        chunk = self._chunks.popleft()
        self._buffered -= len(chunk)
        if self._dialer is not None:
            return await self._negotiated(chunk)
        return chunk

    async def _negotiated(self, chunk: bytes) -> bytes:
        dialer = self._dialer
        assert dialer is not None
        selected = dialer.receive_data(chunk)
        if selected is None:
            return await self.read()
        self._dialer = None
        return selected.rest or await self.read()

    async def read_message(self, limit: int) -> bytes | None:
        """The next varint-length-prefixed message of at most ``limit`` bytes, or None once
        the peer closed cleanly between messages.

        Raises:
            StreamClosed: reset, or the peer closed in the middle of a message.
            DecodeError: a message longer than ``limit``.
        """
        if self._messages:
            return self._messages.popleft()
        reader = self._reader
        if reader is None:
            reader = self._reader = PrefixedReader(limit)
        reader.limit = limit
        while True:
            data = await self.read()
            if not data:
                if reader.buffered:
                    raise StreamClosed("the peer closed the stream inside a message")
                return None
            messages = reader.feed(data)
            if messages:
                self._messages.extend(messages[1:])
                return messages[0]

    async def accept(self, supports: Callable[[str], bool]) -> Selected:
        """Answer the peer's protocol proposals (an inbound stream's first step).

        Raises:
            DecodeError: the negotiation failed (the caller resets the stream).
            StreamClosed: the peer went away first.
        """
        listener = MultistreamListener(supports)
        await self.write(listener.greeting())
        while True:
            data = await self.read()
            if not data:
                raise StreamClosed("the peer closed the stream before choosing a protocol")
            reply, selected = listener.receive_data(data)
            if reply:
                await self.write(reply)
            if selected is not None:
                self.protocol = selected.protocol
                if selected.rest:
                    self._chunks.appendleft(selected.rest)
                    self._buffered += len(selected.rest)
                return selected

    async def propose(self, protocol: str) -> None:
        """Propose ``protocol`` on a stream this side opened and go on at once (the answer is
        checked on the first read; a refusal then raises `DecodeError`)."""
        self._dialer = MultistreamDialer(protocol)
        self.protocol = protocol
        await self.write(self._dialer.proposal())

    async def write(self, data: bytes) -> None:
        """Send bytes on the stream."""
        if self._broken is not None:
            raise StreamClosed(self._broken)
        await self._send(self.key, data)

    async def write_message(self, message: bytes) -> None:
        """Send one varint-length-prefixed message."""
        await self.write(prefixed(message))

    async def close(self) -> None:
        """Close this side (the peer may still send)."""
        if self._broken is None:
            await self._close(self.key)

    async def reset(self) -> None:
        """Abandon the stream both ways."""
        if self._broken is None:
            self.abort("reset by this side")
            await self._reset(self.key)
