"""A bare RSocket peer over TCP, built on Airlane's own frame codec: for what a well-behaved
client library will not do (grant one payload at a time and count, send garbage, never send
SETUP, ask for what the server does not speak)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import orjson

from airlane.wire.rsocket import (
    Credentials,
    Frame,
    FrameReader,
    FrameType,
    encode_authentication,
    encode_composite,
    encode_routing,
    frame_with_length,
)
from airlane.wire.rsocket.metadata import AUTHENTICATION, COMPOSITE, ROUTING

__all__ = ["RawPeer", "metadata", "raw_peer", "setup_frame"]

FLAG_LEASE = 0x40


def setup_frame(
    *, data_mime: str = "application/json", metadata_mime: str = COMPOSITE, lease: bool = False,
    auth: str | None = None,
) -> Frame:  # fmt: skip
    """A SETUP (keep-alive 60 s, lifetime 120 s)."""
    return Frame(
        FrameType.SETUP, flags=FLAG_LEASE if lease else 0,
        metadata=metadata(None, token=auth) if auth else None,
        keepalive_ms=60_000, lifetime_ms=120_000, metadata_mime=metadata_mime,
        data_mime=data_mime,
    )  # fmt: skip


def metadata(route: str | None, *, token: str | None = None) -> bytes:
    """Composite metadata with a route and, optionally, a bearer token."""
    entries = []
    if route is not None:
        entries.append((ROUTING, encode_routing([route])))
    if token is not None:
        entries.append((AUTHENTICATION, encode_authentication(Credentials("bearer", token=token))))
    return encode_composite(entries)


class RawPeer:
    """Frames over one TCP connection."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self._frames = FrameReader()
        self._ready: list[Frame] = []

    def send(self, *frames: Frame) -> None:
        self.writer.write(b"".join(frame_with_length(frame) for frame in frames))

    def send_bytes(self, data: bytes) -> None:
        self.writer.write(data)

    def request(self, kind: FrameType, stream_id: int, route: str, body: Any = None,
                *, n: int = 0) -> None:  # fmt: skip
        data = b"" if body is None else orjson.dumps(body)
        self.send(Frame(kind, stream_id, metadata=metadata(route), data=data, request_n=n))

    async def next(self, timeout: float = 5.0) -> Frame | None:
        """The next frame; None once the server closed the connection."""
        async with asyncio.timeout(timeout):
            while not self._ready:
                data = await self.reader.read(65536)
                if not data:
                    return None
                self._ready += self._frames.feed(data)
        return self._ready.pop(0)

    async def quiet(self, seconds: float) -> list[Frame]:
        """Whatever arrives within ``seconds``."""
        got: list[Frame] = []
        with contextlib.suppress(TimeoutError):
            while (frame := await self.next(seconds)) is not None:
                got.append(frame)
        return got


@contextlib.asynccontextmanager
async def raw_peer(host: str, port: int, setup: Frame | None = None) -> AsyncIterator[RawPeer]:
    """A connected `RawPeer`, after ``setup`` if given."""
    reader, writer = await asyncio.open_connection(host, port)
    peer = RawPeer(reader, writer)
    if setup is not None:
        peer.send(setup)
    try:
        yield peer
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
