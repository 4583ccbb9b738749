"""mplex (``/mplex/6.7.0``), sans-I/O: many streams over one secured connection.

A frame is ``varint(stream_id << 3 | flag)``, ``varint(length)``, data. Stream ids are numbered
by whoever opened the stream, so a stream is known by its id *and* by which side opened it
(`StreamKey`); the flag says which side sent the frame: ``MessageInitiator`` comes from the
side that opened the stream, ``MessageReceiver`` from the other. Close is a half-close (the
sender writes no more); reset abandons the stream both ways. mplex has no flow control: the
transport bounds what it buffers per stream and resets a stream that overruns it.

Bounds: frames of at most `MAX_FRAME` bytes (js-libp2p's own limit; larger writes are cut),
at most ``max_streams`` streams open at once (a stream opened past it is reset at once).
"""

from __future__ import annotations

from dataclasses import dataclass

from airlane.wire.errors import DecodeError, FrameTooLarge, WireError
from airlane.wire.libp2p.varint import decode_uvarint, encode_uvarint

__all__ = [
    "MPLEX_PROTOCOL",
    "DataReceived",
    "MplexConnection",
    "MplexError",
    "StreamEnded",
    "StreamKey",
    "StreamOpened",
    "StreamReset",
]

MPLEX_PROTOCOL = "/mplex/6.7.0"
MAX_FRAME = 1 << 20
"""The largest frame payload read or written (js-libp2p's mplex refuses larger)."""
_CHUNK = 64 * 1024
"""Writes are cut into frames this size, so one large message does not hold up other streams."""

NEW_STREAM, MESSAGE_RECEIVER, MESSAGE_INITIATOR = 0, 1, 2
CLOSE_RECEIVER, CLOSE_INITIATOR, RESET_RECEIVER, RESET_INITIATOR = 3, 4, 5, 6


class MplexError(DecodeError):
    """The peer broke the mplex framing (the connection ends)."""


@dataclass(frozen=True, slots=True)
class StreamKey:
    """A stream: its number and whether this side opened it."""

    stream_id: int
    ours: bool


@dataclass(frozen=True, slots=True)
class StreamOpened:
    """The peer opened a stream."""

    stream: StreamKey


@dataclass(frozen=True, slots=True)
class DataReceived:
    """Bytes on a stream."""

    stream: StreamKey
    data: bytes


@dataclass(frozen=True, slots=True)
class StreamEnded:
    """The peer closed its side of a stream: it sends nothing more on it."""

    stream: StreamKey


@dataclass(frozen=True, slots=True)
class StreamReset:
    """The peer abandoned a stream (or it was refused for being one too many)."""

    stream: StreamKey


MplexEvent = StreamOpened | DataReceived | StreamEnded | StreamReset


class _State:
    __slots__ = ("local_closed", "remote_closed")

    def __init__(self) -> None:
        self.local_closed = False
        self.remote_closed = False


class MplexConnection:
    """Both directions of one mplex connection. See the module docstring."""

    def __init__(self, *, max_streams: int = 256) -> None:
        self.max_streams = max_streams
        self._streams: dict[StreamKey, _State] = {}
        self._next_id = 0
        self._buffer = bytearray()
        self._out = bytearray()

    @property
    def open_streams(self) -> int:
        """Streams not yet closed both ways or reset."""
        return len(self._streams)

    def data_to_send(self) -> bytes:
        """Frames produced by `receive_data` itself (resets of refused streams)."""
        out = bytes(self._out)
        self._out.clear()
        return out

    def receive_data(self, data: bytes) -> list[MplexEvent]:
        """Take plaintext from the secure channel; return what happened on the streams.

        Raises:
            MplexError: malformed framing or a frame over `MAX_FRAME`.
        """
        buffer = self._buffer
        buffer += data
        events: list[MplexEvent] = []
        offset = 0
        try:
            while True:
                head = decode_uvarint(buffer, offset)
                if head is None:
                    break
                header, start = head
                length_head = decode_uvarint(buffer, start)
                if length_head is None:
                    break
                size, start = length_head
                if size > MAX_FRAME:
                    raise FrameTooLarge(size, MAX_FRAME)
                if len(buffer) - start < size:
                    break
                payload = bytes(buffer[start : start + size])
                offset = start + size
                self._frame(header >> 3, header & 7, payload, events)
        except MplexError:
            raise
        except WireError as exc:  # a bad varint, or FrameTooLarge
            raise MplexError(f"bad mplex frame: {exc}") from None
        del buffer[:offset]
        return events

    def _frame(self, stream_id: int, flag: int, payload: bytes, events: list[MplexEvent]) -> None:
        if flag == NEW_STREAM:
            key = StreamKey(stream_id, ours=False)
            if key in self._streams:
                raise MplexError(f"stream {stream_id} opened twice")
            if len(self._streams) >= self.max_streams:
                self._out += _frame(stream_id, RESET_RECEIVER, b"")
                return
            self._streams[key] = _State()
            events.append(StreamOpened(key))
            return
        if flag > RESET_INITIATOR:
            raise MplexError(f"unknown mplex flag {flag}")
        # Odd flags come from a stream's receiver, so the stream is one this side opened.
        key = StreamKey(stream_id, ours=flag % 2 == 1)
        state = self._streams.get(key)
        if state is None:
            return  # a stream already reset or forgotten: its late frames are dropped
        if flag in (MESSAGE_RECEIVER, MESSAGE_INITIATOR):
            if not state.remote_closed and payload:
                events.append(DataReceived(key, payload))
        elif flag in (CLOSE_RECEIVER, CLOSE_INITIATOR):
            if not state.remote_closed:
                state.remote_closed = True
                events.append(StreamEnded(key))
                if state.local_closed:
                    del self._streams[key]
        else:
            del self._streams[key]
            events.append(StreamReset(key))

    # -- this side's actions ----------------------------------------------------------------

    def open_stream(self) -> tuple[StreamKey, bytes]:
        """A new stream of this side's, and the frame that announces it.

        Raises:
            MplexError: already ``max_streams`` streams open.
        """
        if len(self._streams) >= self.max_streams:
            raise MplexError(f"{self.max_streams} streams are open on this connection")
        stream_id = self._next_id
        self._next_id += 1
        key = StreamKey(stream_id, ours=True)
        self._streams[key] = _State()
        return key, _frame(stream_id, NEW_STREAM, str(stream_id).encode())

    def send(self, stream: StreamKey, data: bytes) -> bytes:
        """Frames carrying ``data`` on ``stream`` (nothing if the stream is gone or closed)."""
        state = self._streams.get(stream)
        if state is None or state.local_closed or not data:
            return b""
        flag = MESSAGE_INITIATOR if stream.ours else MESSAGE_RECEIVER
        if len(data) <= _CHUNK:
            return _frame(stream.stream_id, flag, data)
        view = memoryview(data)
        return b"".join(
            _frame(stream.stream_id, flag, bytes(view[start : start + _CHUNK]))
            for start in range(0, len(data), _CHUNK)
        )

    def close(self, stream: StreamKey) -> bytes:
        """The frame closing this side of ``stream`` (nothing if already closed or gone)."""
        state = self._streams.get(stream)
        if state is None or state.local_closed:
            return b""
        state.local_closed = True
        if state.remote_closed:
            del self._streams[stream]
        flag = CLOSE_INITIATOR if stream.ours else CLOSE_RECEIVER
        return _frame(stream.stream_id, flag, b"")

    def reset(self, stream: StreamKey) -> bytes:
        """The frame abandoning ``stream`` (nothing if it is gone)."""
        if self._streams.pop(stream, None) is None:
            return b""
        flag = RESET_INITIATOR if stream.ours else RESET_RECEIVER
        return _frame(stream.stream_id, flag, b"")


def _frame(stream_id: int, flag: int, payload: bytes) -> bytes:
    return encode_uvarint(stream_id << 3 | flag) + encode_uvarint(len(payload)) + payload
