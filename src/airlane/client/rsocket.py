"""`RSocketClient`: Airlane's routes over RSocket/TCP, with session resumption.

One TCP connection carries every request, each on its own stream id: `call` (request-response),
`send` (fire-and-forget) and `generate` / `subscribe` (request-streams, read as async iterators
of `StreamEvent`, with a prefetch window: the client asks for ``prefetch`` events and for half
as many again each time half have been read, so the gateway never sends more than the reader
can hold).

Resumption: the client sets up with a random resume token and keeps what it sent until the
gateway's KEEPALIVE answers say they arrived. When the connection drops, it connects again and
sends RESUME with the positions it has: a gateway that still holds the session (the same node,
within its ``resume_keep_s``) answers RESUME_OK, resends what the client had not received and
every request goes on, with nothing lost or repeated. A gateway that cannot (another node, a
restart, a session past its buffer) refuses; the client then sets up a new session and
subscribes each open stream again from the last event it delivered (``resume`` =
``epoch:seq``), which the stream log makes exact on any node. Calls that were waiting for their
answer fail with `ConnectionLost` (whether the gateway acted on them is unknown).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections import deque
from collections.abc import AsyncIterator
from typing import Any

import orjson

from airlane.client.errors import (
    ClientClosed,
    ConnectFailed,
    ConnectionLost,
    ProtocolViolation,
    ResumeFailed,
    StreamFailed,
    rejected,
)
from airlane.client.events import StreamEvent
from airlane.wire.rsocket import (
    Credentials,
    ErrorCode,
    Frame,
    FrameReader,
    FrameType,
    RSocketProtocolError,
    encode_authentication,
    encode_composite,
    encode_frame,
    encode_routing,
    with_length,
)
from airlane.wire.rsocket.frames import FLAG_COMPLETE, FLAG_NEXT, FLAG_RESPOND, resumable
from airlane.wire.rsocket.metadata import AUTHENTICATION, COMPOSITE, ROUTING

__all__ = ["RSocketClient", "RSocketStream"]

log = logging.getLogger("airlane.client.rsocket")

_END = object()
_RECONNECT_DELAYS_S = (0.0, 0.1, 0.25, 0.5, 1.0, 2.0)
MAX_KEPT_BYTES = 4 << 20
"""Sent frames kept for a resume, unacknowledged; past it the client stops keeping them and
falls back (subscribes again) after a drop, as the gateway does past its own bound."""
"""Waits before each reconnection attempt after a drop (then the client gives up)."""


class RSocketStream:
    """A request-stream's events, in order (an async iterator of `StreamEvent`)."""

    def __init__(self, client: RSocketClient, route: str, body: dict[str, Any]) -> None:
        self._client = client
        self.route = route
        self.body = body
        self.rsocket_id = 0
        """The RSocket stream id it is carried on now (it changes after a fallback)."""
        self.stream_id: str | None = body.get("stream_id")
        """The Airlane stream (a generation's arrives with its first payload)."""
        self.epoch: str | None = None
        self.last_seq = 0
        """The seq of the last event read."""
        self.received_seq = 0
        """The seq of the last event received (read or still queued)."""
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._unrequested = 0  # events read since the last REQUEST_N
        self.ended = False

    @property
    def last_id(self) -> str | None:
        """The resume token after the last event read (``epoch:seq``)."""
        return None if self.epoch is None else f"{self.epoch}:{self.last_seq}"

    def __aiter__(self) -> AsyncIterator[StreamEvent]:
        return self._events()

    async def _events(self) -> AsyncIterator[StreamEvent]:
        while True:
            item = await self._queue.get()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            event = StreamEvent.from_dict(item, None if self.epoch is None else
                                          f"{self.epoch}:{item.get('seq', 0)}")  # fmt: skip
            self.last_seq = max(self.last_seq, event.seq)
            self._client._consumed(self)
            yield event
            if event.kind == "error":
                raise StreamFailed(str(item.get("message", "")), code=item.get("code"))

    def _put(self, obj: Any) -> None:
        if not isinstance(obj, dict):
            self._end(ProtocolViolation(f"an event that is not an object: {obj!r:.80}"))
            return
        if obj.get("kind") == "started":
            self.stream_id, self.epoch = obj["stream_id"], obj["epoch"]
            self._client._consumed(self)  # the header spends a credit too
            return
        self.received_seq = max(self.received_seq, int(obj.get("seq", 0)))
        self._queue.put_nowait(obj)

    def _end(self, error: BaseException | None = None) -> None:
        if not self.ended:
            self.ended = True
            self._queue.put_nowait(_END if error is None else error)

    async def cancel(self) -> None:
        """Stop the stream (the gateway releases its cursor)."""
        await self._client._cancel(self)


class RSocketClient:
    """See the module docstring. Open with `tcp`; close with `aclose` (or ``async with``)."""

    def __init__(
        self,
        host: str,
        port: int,
        api_key: str | None = None,
        *,
        resume: bool = True,
        prefetch: int = 256,
        keepalive_s: float = 60.0,
        lifetime_s: float = 60.0 / 0.7,
    ) -> None:
        self.host, self.port = host, port
        self._api_key = api_key
        self._resume = resume
        self.prefetch = max(2, prefetch)
        self.keepalive_s = keepalive_s
        self.lifetime_s = lifetime_s
        self._writer: asyncio.StreamWriter | None = None
        self._reader_task: asyncio.Task[None] | None = None
        self._keepalive_task: asyncio.Task[None] | None = None
        self._next_id = 1
        self._answers: dict[int, asyncio.Future[Frame]] = {}
        self._streams: dict[int, RSocketStream] = {}
        self._token = b""
        self._sent = 0  # bytes of resumable frames sent on this session
        self._received = 0  # bytes of resumable frames received
        self._kept: deque[tuple[int, bytes]] = deque()  # (end position, frame) not yet acked
        self._kept_bytes = 0
        self._closed = False
        self.resumed = 0
        """Times the session was resumed on a new connection (RESUME_OK)."""
        self.fell_back = 0
        """Times the session could not be resumed and its streams were subscribed again."""

    # -- opening and closing ------------------------------------------------------------------

    @classmethod
    async def tcp(cls, host: str, port: int, api_key: str | None = None, **options: Any
                  ) -> RSocketClient:  # fmt: skip
        """Connect to an RSocket/TCP listener (``airlane serve`` prints it as ``tcp://...``).

        Raises:
            ConnectFailed: the listener could not be reached or refused the set-up.
        """
        client = cls(host, port, api_key, **options)
        try:
            await client._setup()
        except OSError as exc:
            raise ConnectFailed(f"cannot connect to RSocket at {host}:{port}: {exc}") from exc
        return client

    async def __aenter__(self) -> RSocketClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection; open streams and waiting calls end with `ClientClosed`."""
        self._closed = True
        for task in (self._reader_task, self._keepalive_task):
            if task is not None and task is not asyncio.current_task():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        if self._writer is not None:
            self._writer.close()
        self._fail_all(ClientClosed("the client was closed"))

    def drop_connection(self) -> None:
        """Cut the TCP connection now, as a network fault would (the client resumes)."""
        if self._writer is not None:
            self._writer.transport.abort()

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        reader, writer = await asyncio.open_connection(self.host, self.port)
        self._writer = writer
        return reader, writer

    async def _setup(self) -> None:
        """A new session on a new connection."""
        reader, writer = await self._connect()
        self._token = secrets.token_bytes(16) if self._resume else b""
        self._sent = self._received = self._kept_bytes = 0
        self._kept.clear()
        metadata = None
        if self._api_key is not None:
            credentials = encode_authentication(Credentials("bearer", token=self._api_key))
            metadata = encode_composite([(AUTHENTICATION, credentials)])
        setup = Frame(
            FrameType.SETUP, keepalive_ms=round(self.keepalive_s * 1000),
            lifetime_ms=round(self.lifetime_s * 1000), resume_token=self._token or None,
            metadata_mime=COMPOSITE, data_mime="application/json", metadata=metadata,
        )  # fmt: skip
        writer.write(with_length(encode_frame(setup)))
        self._start(reader)

    def _start(self, reader: asyncio.StreamReader) -> None:
        self._reader_task = asyncio.create_task(self._read(reader), name="rsocket-client read")
        if self._keepalive_task is None:
            self._keepalive_task = asyncio.create_task(self._keepalive(), name="rsocket-client ka")

    # -- requests -----------------------------------------------------------------------------

    async def call(self, route: str, body: dict[str, Any]) -> Any:
        """A request-response; its answer decoded. `RequestRejected` with the gateway's code
        if refused, `ConnectionLost` if the connection dropped before the answer."""
        stream_id = self._new_id()
        answer = self._answers[stream_id] = asyncio.get_running_loop().create_future()
        self._send(Frame(FrameType.REQUEST_RESPONSE, stream_id, metadata=_route(route),
                         data=orjson.dumps(body)))  # fmt: skip
        frame = await answer
        return orjson.loads(frame.data) if frame.data else None

    async def send(self, route: str, body: dict[str, Any]) -> None:
        """A fire-and-forget (no answer: a refusal is only in the gateway's log)."""
        self._check_open()
        self._send(Frame(FrameType.REQUEST_FNF, self._new_id(), metadata=_route(route),
                         data=orjson.dumps(body)))  # fmt: skip
        if self._writer is not None:
            await self._writer.drain()

    def generate(self, request: dict[str, Any]) -> RSocketStream:
        """Start a chat completion (an OpenAI request); its events."""
        return self._open_stream("chat.completions", request)

    async def subscribe(self, stream_id: str, resume: str | None = None) -> RSocketStream:
        """Follow ``stream_id``, after the resume token ``resume`` if given (without one, the
        stream's epoch is asked first: a subscription must be able to continue elsewhere)."""
        body: dict[str, Any] = {"stream_id": stream_id}
        if resume is not None:
            body["resume"] = resume
            epoch = resume.rpartition(":")[0]
        else:
            epoch = (await self.call("streams.info", {"stream_id": stream_id}))["epoch"]
        stream = self._open_stream("streams.subscribe", body)
        stream.epoch = epoch
        return stream

    def _open_stream(self, route: str, body: dict[str, Any]) -> RSocketStream:
        self._check_open()
        stream = RSocketStream(self, route, body)
        self._request_stream(stream, route, body)
        return stream

    def _request_stream(self, stream: RSocketStream, route: str, body: dict[str, Any]) -> None:
        stream.rsocket_id = self._new_id()
        stream._unrequested = 0
        self._streams[stream.rsocket_id] = stream
        self._send(Frame(FrameType.REQUEST_STREAM, stream.rsocket_id, metadata=_route(route),
                         data=orjson.dumps(body), request_n=self.prefetch))  # fmt: skip

    def _consumed(self, stream: RSocketStream) -> None:
        """One of ``stream``'s events was read: ask for more every half window."""
        stream._unrequested += 1
        if stream._unrequested >= self.prefetch // 2 and not stream.ended:
            n, stream._unrequested = stream._unrequested, 0
            self._send(Frame(FrameType.REQUEST_N, stream.rsocket_id, request_n=n))

    async def _cancel(self, stream: RSocketStream) -> None:
        if self._streams.pop(stream.rsocket_id, None) is not None:
            self._send(Frame(FrameType.CANCEL, stream.rsocket_id))
        stream._end()

    def _new_id(self) -> int:
        stream_id, self._next_id = self._next_id, self._next_id + 2
        return stream_id

    def _check_open(self) -> None:
        if self._closed:
            raise ClientClosed("the client was closed")

    # -- the wire -----------------------------------------------------------------------------

    def _send(self, frame: Frame) -> None:
        encoded = encode_frame(frame)
        if self._token and resumable(frame.type, frame.stream_id):
            self._sent += len(encoded)
            self._kept.append((self._sent, encoded))
            self._kept_bytes += len(encoded)
            if self._kept_bytes > MAX_KEPT_BYTES:  # the gateway acknowledges too little
                self._token = b""  # no resuming this session: a drop falls back
                self._kept.clear()
                self._kept_bytes = 0
        if self._writer is not None and not self._writer.is_closing():
            self._writer.write(with_length(encoded))

    async def _keepalive(self) -> None:
        while not self._closed:
            await asyncio.sleep(self.keepalive_s)
            if self._writer is not None and not self._writer.is_closing():
                self._writer.write(with_length(encode_frame(
                    Frame(FrameType.KEEPALIVE, flags=FLAG_RESPOND, position=self._received)
                )))  # fmt: skip

    async def _read(self, reader: asyncio.StreamReader, frames: FrameReader | None = None
                    ) -> None:  # fmt: skip
        """Hand every frame to `_receive` until the connection drops, then recover."""
        frames = frames or FrameReader()
        try:
            while data := await reader.read(1 << 16):
                for frame in frames.feed(data):
                    self._receive(frame)
        except (OSError, RSocketProtocolError) as exc:
            log.debug("RSocket connection lost: %s", exc)
        except _Refused as exc:
            self._fail_all(exc.error)
            return
        if not self._closed:
            await self._recover()

    def _receive(self, frame: Frame) -> None:
        if self._token and resumable(frame.type, frame.stream_id):
            self._received += frame.size
        kind = frame.type
        if kind is FrameType.PAYLOAD:
            stream = self._streams.get(frame.stream_id)
            if stream is not None:
                if frame.has(FLAG_NEXT):
                    stream._put(orjson.loads(frame.data))
                if frame.has(FLAG_COMPLETE):
                    del self._streams[frame.stream_id]
                    stream._end()
            answer = self._answers.pop(frame.stream_id, None)
            if answer is not None and not answer.done():
                answer.set_result(frame)
        elif kind is FrameType.ERROR:
            self._error(frame)
        elif kind is FrameType.KEEPALIVE:
            self._acknowledged(frame.position)
            if frame.has(FLAG_RESPOND) and self._writer is not None:
                echo = Frame(FrameType.KEEPALIVE, position=self._received, data=frame.data)
                self._writer.write(with_length(encode_frame(echo)))

    def _error(self, frame: Frame) -> None:
        message = frame.data.decode("utf-8", "replace")
        if frame.stream_id == 0:
            raise _Refused(ConnectFailed(f"the gateway closed the connection: {message}"),
                           frame.error_code)  # fmt: skip
        code, _, text = message.partition(": ")
        error = rejected(text or message, code=code or None)
        answer = self._answers.pop(frame.stream_id, None)
        if answer is not None and not answer.done():
            answer.set_exception(error)
        stream = self._streams.pop(frame.stream_id, None)
        if stream is not None:
            stream._end(error)

    def _acknowledged(self, position: int) -> None:
        kept = self._kept
        while kept and kept[0][0] <= position:
            self._kept_bytes -= len(kept.popleft()[1])

    def _fail_all(self, error: BaseException) -> None:
        for answer in self._answers.values():
            if not answer.done():
                answer.set_exception(error)
        self._answers.clear()
        for stream in self._streams.values():
            stream._end(error)
        self._streams.clear()

    # -- recovery -----------------------------------------------------------------------------

    async def _recover(self) -> None:
        """The connection dropped: resume the session, else set up anew and subscribe every
        stream again from its last event; `ResumeFailed` for all if the gateway stays away."""
        for delay in _RECONNECT_DELAYS_S:
            await asyncio.sleep(delay)
            try:
                if self._token and await self._try_resume():
                    self.resumed += 1
                    return
                await self._fall_back()
                self.fell_back += 1
                return
            except (OSError, asyncio.IncompleteReadError, RSocketProtocolError, TimeoutError):
                continue
            except _Refused as exc:  # the gateway refused the new set-up: nothing to retry
                self._fail_all(exc.error)
                return
        self._fail_all(ResumeFailed("the connection dropped and the gateway stayed away"))

    async def _try_resume(self) -> bool:
        reader, writer = await self._connect()
        oldest = self._kept[0][0] - len(self._kept[0][1]) if self._kept else self._sent
        resume = Frame(FrameType.RESUME, resume_token=self._token, position=self._received,
                       first_position=oldest)  # fmt: skip
        writer.write(with_length(encode_frame(resume)))
        async with asyncio.timeout(5):
            frames = FrameReader()
            first: list[Frame] = []
            while not first:
                data = await reader.read(1 << 16)
                if not data:
                    raise asyncio.IncompleteReadError(b"", None)
                first = frames.feed(data)
        answer, rest = first[0], first[1:]
        if answer.type is not FrameType.RESUME_OK:
            writer.close()
            if answer.type is FrameType.ERROR and answer.error_code == ErrorCode.REJECTED_RESUME:
                return False
            raise ProtocolViolation(f"RESUME answered with {answer.type.name}")
        self._acknowledged(answer.position)
        for _, encoded in self._kept:  # what the gateway had not received
            writer.write(with_length(encoded))
        for frame in rest:
            self._receive(frame)
        self._reader_task = asyncio.create_task(
            self._read(reader, frames), name="rsocket-client read"
        )
        return True

    async def _fall_back(self) -> None:
        """A new session; every stream that can continue from the log subscribes again."""
        streams = list(self._streams.values())
        self._streams.clear()
        for answer in self._answers.values():
            if not answer.done():
                answer.set_exception(ConnectionLost("the connection dropped before the answer"))
        self._answers.clear()
        await self._setup()
        for stream in streams:
            if stream.stream_id is None or not stream.epoch:
                stream._end(ConnectionLost("the stream was lost before it was named"))
                continue
            # Events received but not read yet stay queued: ask for what follows them.
            resume = f"{stream.epoch}:{stream.received_seq}"
            self._request_stream(stream, "streams.subscribe",
                                 {"stream_id": stream.stream_id, "resume": resume})  # fmt: skip


class _Refused(Exception):
    """The gateway ended the connection with an ERROR on stream 0."""

    def __init__(self, error: Exception, code: int) -> None:
        super().__init__(str(error))
        self.error = error
        self.code = code


def _route(name: str) -> bytes:
    return encode_composite([(ROUTING, encode_routing([name]))])
