"""`PeerConnection`: one libp2p connection, from the first byte to its streams.

Upgrading follows libp2p: multistream-select chooses ``/noise``, the Noise XX handshake binds
the channel to the peer's id, multistream-select (now encrypted) chooses ``/mplex/6.7.0``, and
from then on every mplex stream negotiates its own protocol and is handed to that protocol's
handler as a task the connection owns. A peer that breaks any layer's rules gets the
connection closed (after a log line), never a traceback; other peers are not affected.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from airlane.transports.waku.pipe import Pipe
from airlane.transports.waku.streams import MuxedStream
from airlane.wire.errors import WireError
from airlane.wire.libp2p import (
    MPLEX_PROTOCOL,
    NOISE_PROTOCOL,
    DataReceived,
    Identity,
    MplexConnection,
    MultistreamDialer,
    MultistreamListener,
    NoiseSession,
    PeerId,
    StreamEnded,
    StreamKey,
    StreamOpened,
    StreamReset,
)

__all__ = ["Handler", "PeerConnection"]

log = logging.getLogger("airlane.waku")

Handler = Callable[["PeerConnection", MuxedStream], Awaitable[None]]
"""A protocol's handler: given an inbound stream that chose the protocol."""


class PeerConnection:
    """A connection to one peer; `run` drives it until either side closes it."""

    def __init__(
        self,
        pipe: Pipe,
        identity: Identity,
        handlers: dict[str, Handler],
        *,
        initiator: bool,
        remote: PeerId | None = None,
        max_streams: int = 64,
        stream_buffer: int = 1 << 20,
        handshake_timeout_s: float = 10.0,
    ) -> None:
        self.pipe = pipe
        self.identity = identity
        self.handlers = handlers
        self.initiator = initiator
        self.handshake_timeout_s = handshake_timeout_s
        self.stream_buffer = stream_buffer
        self.peer: PeerId | None = remote
        """The peer's id (proven once `ready` is set)."""
        self.ready = asyncio.Event()
        """Set once the connection is upgraded and streams may be opened."""
        self.closed = asyncio.Event()
        """Set once the connection is gone."""
        self._noise = NoiseSession(identity, initiator=initiator, remote=remote)
        self._mplex = MplexConnection(max_streams=max_streams)
        self._streams: dict[StreamKey, MuxedStream] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._write_lock = asyncio.Lock()
        self._plain_rest = b""

    @property
    def open_streams(self) -> int:
        """Streams of this connection that mplex still holds (not closed both ways, not
        reset), each counted against ``max_streams``."""
        return self._mplex.open_streams

    # -- running ----------------------------------------------------------------------------

    async def run(self) -> None:
        """Upgrade, then read until the peer or `close` ends the connection."""
        try:
            async with asyncio.timeout(self.handshake_timeout_s):
                await self._upgrade()
            self.ready.set()
            if self._plain_rest:
                await self._mplex_data(self._plain_rest)
            while data := await self.pipe.read():
                for plaintext in self._noise.receive_data(data):
                    await self._mplex_data(plaintext)
        except TimeoutError:
            log.info("waku: %s did not finish the libp2p handshake in time", self._who())
        except WireError as exc:
            log.info("waku: closing the connection to %s: %s", self._who(), exc)
        except (ConnectionError, OSError) as exc:
            log.debug("waku: connection to %s lost: %s", self._who(), exc)
        finally:
            await self._teardown()

    def _who(self) -> str:
        host, port = self.pipe.remote
        return f"{self.peer or 'a peer'} at {host}:{port}"

    async def _upgrade(self) -> None:
        rest = await self._negotiate_raw(NOISE_PROTOCOL)
        noise = self._noise
        if self.initiator:
            await self.pipe.write(noise.initiate())
        plaintext: list[bytes] = noise.receive_data(rest) if rest else []
        while not noise.established:
            out = noise.data_to_send()
            if out:
                await self.pipe.write(out)
            data = await self.pipe.read()
            if not data:
                raise ConnectionError("closed during the Noise handshake")
            plaintext += noise.receive_data(data)
        out = noise.data_to_send()
        if out:
            await self.pipe.write(out)
        self.peer = noise.remote_peer
        self._plain_rest = await self._negotiate_muxer(b"".join(plaintext))

    async def _negotiate_raw(self, protocol: str) -> bytes:
        """multistream-select on the raw pipe; the bytes after it."""
        if self.initiator:
            dialer = MultistreamDialer(protocol)
            await self.pipe.write(dialer.proposal())
            while True:
                data = await self.pipe.read()
                if not data:
                    raise ConnectionError("closed during protocol negotiation")
                selected = dialer.receive_data(data)
                if selected is not None:
                    return selected.rest
        listener = MultistreamListener(lambda name: name == protocol)
        await self.pipe.write(listener.greeting())
        while True:
            data = await self.pipe.read()
            if not data:
                raise ConnectionError("closed during protocol negotiation")
            reply, chosen = listener.receive_data(data)
            if reply:
                await self.pipe.write(reply)
            if chosen is not None:
                return chosen.rest

    async def _negotiate_muxer(self, plaintext: bytes) -> bytes:
        """multistream-select for mplex inside the Noise channel; plaintext after it."""
        noise = self._noise
        if self.initiator:
            dialer = MultistreamDialer(MPLEX_PROTOCOL)
            await self.pipe.write(noise.encrypt(dialer.proposal()))
            data = plaintext
            while True:
                selected = dialer.receive_data(data) if data else None
                if selected is not None:
                    return selected.rest
                raw = await self.pipe.read()
                if not raw:
                    raise ConnectionError("closed while choosing the stream muxer")
                data = b"".join(noise.receive_data(raw))
        listener = MultistreamListener(lambda name: name == MPLEX_PROTOCOL)
        await self.pipe.write(noise.encrypt(listener.greeting()))
        data = plaintext
        while True:
            if data:
                reply, chosen = listener.receive_data(data)
                if reply:
                    await self.pipe.write(noise.encrypt(reply))
                if chosen is not None:
                    return chosen.rest
            raw = await self.pipe.read()
            if not raw:
                raise ConnectionError("closed while choosing the stream muxer")
            data = b"".join(noise.receive_data(raw))

    async def _mplex_data(self, plaintext: bytes) -> None:
        mplex = self._mplex
        events = mplex.receive_data(plaintext)
        refusals = mplex.data_to_send()
        if refusals:
            await self._write_plain(refusals)
        for event in events:
            if isinstance(event, DataReceived):
                stream = self._streams.get(event.stream)
                if stream is not None and not stream.feed(event.data):
                    log.info("waku: %s overran a stream's buffer; reset", self._who())
                    await self._reset(event.stream)
            elif isinstance(event, StreamOpened):
                self._inbound(event.stream)
            elif isinstance(event, StreamEnded):
                stream = self._streams.get(event.stream)
                if stream is not None:
                    stream.end()
            elif isinstance(event, StreamReset):
                stream = self._streams.pop(event.stream, None)
                if stream is not None:
                    stream.abort("reset by the peer")

    def _inbound(self, key: StreamKey) -> None:
        stream = self._new_stream(key)
        self.spawn(self._serve_stream(stream))

    def _new_stream(self, key: StreamKey) -> MuxedStream:
        stream = MuxedStream(
            key, self._send, self._close_stream, self._reset, limit=self.stream_buffer
        )
        self._streams[key] = stream
        return stream

    async def _serve_stream(self, stream: MuxedStream) -> None:
        handlers = self.handlers
        try:
            selected = await stream.accept(lambda name: name in handlers)
            await handlers[selected.protocol](self, stream)
        except WireError as exc:
            log.info("waku: %s: %s; stream reset", self._who(), exc)
            await stream.reset()
        except (ConnectionError, OSError):  # StreamClosed among them: the peer went away
            pass
        except Exception:  # a bug here must not take the connection, or the node, with it
            log.exception("waku: a %s handler failed", stream.protocol or "stream")
            await stream.reset()
        finally:
            self._forget(stream)

    def _forget(self, stream: MuxedStream) -> None:
        # What the peer still sends on a stream nobody reads is dropped; mplex keeps the
        # stream's state until both sides closed it (bounded by max_streams).
        if self._streams.get(stream.key) is stream:
            del self._streams[stream.key]

    def spawn(self, work: Awaitable[None]) -> None:
        """Run ``work`` as a task of this connection (cancelled when it closes)."""
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- writing ----------------------------------------------------------------------------

    async def _write_plain(self, plaintext: bytes) -> None:
        # Encrypting and writing happen under one lock: Noise nonces must reach the peer in
        # the order they were used.
        async with self._write_lock:
            await self.pipe.write(self._noise.encrypt(plaintext))

    async def _send(self, key: StreamKey, data: bytes) -> None:
        frames = self._mplex.send(key, data)
        if frames:
            await self._write_plain(frames)

    async def _close_stream(self, key: StreamKey) -> None:
        frame = self._mplex.close(key)
        if frame:
            await self._write_plain(frame)

    async def _reset(self, key: StreamKey) -> None:
        stream = self._streams.pop(key, None)
        if stream is not None:
            stream.abort("reset")
        frame = self._mplex.reset(key)
        if frame:
            with contextlib.suppress(ConnectionError, OSError):
                await self._write_plain(frame)

    async def open_stream(self, protocol: str) -> MuxedStream:
        """A new stream proposing ``protocol`` (written at once; a refusal shows on the
        first read).

        Raises:
            ConnectionError: the connection is not ready or is gone.
            WireError: too many streams are open.
        """
        if not self.ready.is_set() or self.closed.is_set():
            raise ConnectionError("the connection is not open")
        key, frame = self._mplex.open_stream()
        stream = self._new_stream(key)
        await self._write_plain(frame)
        await stream.propose(protocol)
        return stream

    def release(self, stream: MuxedStream) -> None:
        """Forget a stream this side opened and no longer reads."""
        self._forget(stream)

    async def close(self) -> None:
        """Close the connection (its `run` then returns)."""
        await self.pipe.close()

    async def _teardown(self) -> None:
        self.closed.set()
        for stream in self._streams.values():
            stream.abort("the connection closed")
        self._streams.clear()
        tasks = [task for task in self._tasks if task is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.pipe.close()
