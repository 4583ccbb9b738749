"""`LightClient`: a Waku light node in Python (light push, filter, store) over this package's
libp2p connection: what the benchmarks and tests drive a node with, and a way for a Python
program to use any Waku service node.

    async with LightClient.connect(Multiaddr.parse("/ip4/127.0.0.1/tcp/8645/ws/p2p/...")) as c:
        await c.subscribe("/waku/2/rs/0/3", ["/app/1/chat/proto"], on_message)
        status = await c.push(WakuMessage(b"hi", "/app/1/chat/proto"))
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator, Callable, Sequence

from airlane.transports.waku.connection import PeerConnection
from airlane.transports.waku.pipe import open_pipe
from airlane.transports.waku.streams import MuxedStream
from airlane.wire.libp2p import Identity, Multiaddr
from airlane.wire.waku import (
    FILTER_PUSH,
    FILTER_SUBSCRIBE,
    LIGHTPUSH_V3,
    STORE,
    FilterRequest,
    FilterResponse,
    LightPushRequest,
    LightPushResponse,
    MessagePush,
    StoreQuery,
    StoreResponse,
    WakuMessage,
)

__all__ = ["LightClient", "RequestFailed"]

MAX_REPLY = 4 << 20
"""The largest reply read (a store page of 100 large messages)."""


class RequestFailed(Exception):
    """The node answered a request with a status other than 200."""

    def __init__(self, status: int, description: str | None) -> None:
        super().__init__(f"{status}: {description or ''}")
        self.status = status
        self.description = description


class LightClient:
    """A connection to one service node, used as a light node. See the module docstring."""

    def __init__(self, connection: PeerConnection, *, max_payload: int = 1 << 20) -> None:
        self.connection = connection
        self.max_payload = max_payload
        self._on_message: Callable[[WakuMessage, str], None] | None = None
        connection.handlers[FILTER_PUSH] = self._pushed

    @classmethod
    @contextlib.asynccontextmanager
    async def connect(
        cls, address: Multiaddr, *, identity: Identity | None = None, handshake_s: float = 10.0
    ) -> AsyncIterator[LightClient]:
        """Dial ``address`` (``/ws`` for WebSocket, else TCP; its ``/p2p/`` id is checked).

        Raises:
            OSError: it cannot be reached.
            ConnectionError: the handshake failed.
            TimeoutError: the handshake took over ``handshake_s``.
        """
        async with asyncio.timeout(handshake_s):
            pipe = await open_pipe(address)
        connection = PeerConnection(
            pipe, identity or Identity(), {}, initiator=True, remote=address.peer_id()
        )
        runner = asyncio.create_task(connection.run())
        try:
            async with asyncio.timeout(handshake_s):
                await asyncio.wait(
                    {asyncio.ensure_future(connection.ready.wait()), runner},
                    return_when=asyncio.FIRST_COMPLETED,
                )
            if not connection.ready.is_set():
                raise ConnectionError(f"the libp2p handshake with {address} failed")
            yield cls(connection)
        finally:
            await connection.close()
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(runner, 10)

    async def _ask(self, protocol: str, request: bytes) -> bytes:
        stream = await self.connection.open_stream(protocol)
        try:
            await stream.write_message(request)
            await stream.close()
            reply = await stream.read_message(MAX_REPLY)
        finally:
            self.connection.release(stream)
        if reply is None:
            raise ConnectionError(f"{protocol}: the node closed the stream without answering")
        return reply

    async def push(self, message: WakuMessage, pubsub_topic: str | None = None) -> int:
        """Light push ``message``; the number of relay peers the node reports.

        Raises:
            RequestFailed: the node refused it.
        """
        request = LightPushRequest(secrets.token_hex(8), message, pubsub_topic)
        reply = LightPushResponse.decode(await self._ask(LIGHTPUSH_V3, request.encode()))
        if reply.status_code != 200:
            raise RequestFailed(reply.status_code, reply.status_desc)
        return reply.relay_peer_count or 0

    async def subscribe(
        self,
        pubsub_topic: str,
        content_topics: Sequence[str],
        on_message: Callable[[WakuMessage, str], None],
    ) -> None:
        """Filter-subscribe; ``on_message(message, pubsub_topic)`` is called for each push.

        Raises:
            RequestFailed: the node refused.
        """
        self._on_message = on_message
        await self._filter(FilterRequest.SUBSCRIBE, pubsub_topic, tuple(content_topics))

    async def ping(self) -> None:
        """Filter ping (keeps the subscription).

        Raises:
            RequestFailed: the node has no subscription for this client.
        """
        await self._filter(FilterRequest.PING, None, ())

    async def _filter(self, kind: int, pubsub: str | None, topics: tuple[str, ...]) -> None:
        request = FilterRequest(secrets.token_hex(8), kind, pubsub, topics)
        reply = FilterResponse.decode(await self._ask(FILTER_SUBSCRIBE, request.encode()))
        if reply.status_code != 200:
            raise RequestFailed(reply.status_code, reply.status_desc)

    async def store(self, query: StoreQuery) -> StoreResponse:
        """One store query (one page).

        Raises:
            RequestFailed: the node refused.
        """
        reply = StoreResponse.decode(
            await self._ask(STORE, query.encode()), max_payload=self.max_payload
        )
        if reply.status_code != 200:
            raise RequestFailed(reply.status_code, reply.status_desc)
        return reply

    async def _pushed(self, connection: PeerConnection, stream: MuxedStream) -> None:
        while (raw := await stream.read_message(self.max_payload + 4096)) is not None:
            push = MessagePush.decode(raw, max_payload=self.max_payload)
            if self._on_message is not None:
                self._on_message(push.message, push.pubsub_topic)
        await stream.close()
