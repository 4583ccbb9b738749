"""`FrameReader`: a WebSocket server's frames in, load-test chunks recorded; client frames out.

Sans-I/O: `FrameReader.feed` takes bytes as they arrive and the time they arrived; each text
message is one chunk, recorded into a `StreamTally`. What it reads (RFC 6455 section 5):

- a frame header: FIN, RSV1-3, opcode; MASK and a 7-bit length, or 126 and a 16-bit length,
  or 127 and a 64-bit length (section 5.2). A server never masks (section 5.1) and, with no
  extension negotiated, never sets RSV bits;
- text messages, whole or fragmented into a text frame and continuation frames (section 5.4);
  control frames (close, ping, pong) may come between fragments and are at most 125 bytes;
- ping: answered by a pong with the same payload (section 5.5.2); pong: ignored;
- close: the status code and reason are kept in `FrameReader.close`, the close frame is echoed
  (section 5.5.1), and nothing after it is read.

Text is not checked for UTF-8 (only the chunk's ASCII head is read; checking 1.2 KB per chunk
would cost more than the gateway spends sending it), and a binary message is refused: the load
test sends text. Anything else the reader refuses raises `FrameError`, which carries the close
code to fail the connection with (section 7.4.1).

`BinaryStreamReader` reads the other kind of WebSocket the load client speaks: AIRC over
WebSocket, where binary messages carry a byte stream and their boundaries mean nothing.

Speed: a run of unfragmented text frames with 16-bit lengths, which is how a 1.2 KB chunk is
framed, is read by `_read_chunk_frames` with one struct unpack and one head match per frame
and recorded with one `StreamTally.record` per buffer; a buffer that is exactly one such
frame (a paced stream's read) is recorded by `feed` itself; everything else goes frame by
frame through `_read_frame`.
"""

from __future__ import annotations

import os
import re
import struct
from itertools import repeat

from airlane.bench.chunk import MAX_DIGITS, LoadProtocolError, read_seq_ts
from airlane.bench.tally import StreamTally

__all__ = [
    "CLOSE_MESSAGE_TOO_BIG",
    "CLOSE_NORMAL",
    "CLOSE_NO_STATUS",
    "CLOSE_PROTOCOL_ERROR",
    "CLOSE_UNSUPPORTED_DATA",
    "DEFAULT_MAX_MESSAGE_BYTES",
    "BinaryStreamReader",
    "FrameError",
    "FrameReader",
    "Opcode",
    "client_frame",
    "close_payload",
]

DEFAULT_MAX_MESSAGE_BYTES = 1 << 20
"""A chunk is ~1.2 KB; a larger message is refused (close 1009)."""

CLOSE_NORMAL = 1000
CLOSE_PROTOCOL_ERROR = 1002
CLOSE_UNSUPPORTED_DATA = 1003
CLOSE_NO_STATUS = 1005
"""Reported, never sent: the close frame had no status code (section 7.4.1)."""
CLOSE_MESSAGE_TOO_BIG = 1009


class Opcode:
    """Frame opcodes (RFC 6455 section 5.2)."""

    CONTINUATION = 0x0
    TEXT = 0x1
    BINARY = 0x2
    CLOSE = 0x8
    PING = 0x9
    PONG = 0xA


class FrameError(LoadProtocolError):
    """The server broke the framing; ``code`` is the close code to answer with."""

    def __init__(self, message: str, code: int = CLOSE_PROTOCOL_ERROR) -> None:
        super().__init__(message)
        self.code = code


_MAX_CONTROL_PAYLOAD = 125
_FIN = 0x80
_RSV = 0x70
_MASK = 0x80
# FIN + text opcode, then the 16-bit length marker: how the gateway frames every chunk.
_CHUNK_FRAME = struct.Struct("!BBH")
_CHUNK_FRAME_FIRST = _FIN | Opcode.TEXT
_LENGTH_16 = 126  # then a 16-bit length; 127: a 64-bit one
_CHUNK_HEAD = re.compile(rb'\{"seq":(\d{1,%d}),"ts":(\d{1,%d}),' % (MAX_DIGITS, MAX_DIGITS))
_group = re.Match.group


class FrameReader:
    """Reads one connection's frames after the handshake; see the module docstring."""

    __slots__ = (
        "_fragment_bytes",
        "_fragments",
        "_max_message",
        "_tail",
        "_tally",
        "close",
        "outgoing",
    )

    def __init__(
        self, tally: StreamTally, *, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    ) -> None:
        self._tally = tally
        self._max_message = max_message_bytes
        self._tail = b""  # an incomplete frame
        self._fragments: list[bytes] | None = None  # a text message still being received
        self._fragment_bytes = 0
        self.outgoing: list[bytes] = []
        """Frames to send (pongs, the close echo); the caller writes and clears it."""
        self.close: tuple[int, str] | None = None
        """The server's close code and reason, once its close frame arrived."""

    def feed(self, data: bytes, now_ns: int) -> None:
        """Read bytes that arrived at ``now_ns``.

        Raises:
            FrameError: a frame the reader refuses (with the close code to answer).
            ChunkFormatError: a text message that is not a load-test chunk.
        """
        if self.close is not None:
            return  # after a close frame, the server sends nothing more (section 5.5.1)
        if not self._tail and self._fragments is None and len(data) >= 4:
            # A paced stream's read: exactly one whole chunk frame. Recorded at once, not
            # through the loop below (whose steps cost more than the frame's reading).
            first, second, size = _CHUNK_FRAME.unpack_from(data)
            if first == _CHUNK_FRAME_FIRST and second == _LENGTH_16 and size + 4 == len(data):
                head = _CHUNK_HEAD.match(data, 4)
                if head is not None:
                    self._tally.chunk(int(head[1]), int(head[2]), size, now_ns)
                    return
        buf = self._tail + data if self._tail else data
        pos = 0
        while self.close is None:
            pos = self._read_chunk_frames(buf, pos, now_ns)
            after = self._read_frame(buf, pos, now_ns)
            if after is None:
                break
            pos = after
        self._tail = buf[pos:] if self.close is None else b""

    def _read_chunk_frames(self, buf: bytes, pos: int, now_ns: int) -> int:
        """Record the whole unfragmented 16-bit text frames from ``pos`` on; where they stop."""
        if self._fragments is not None:
            return pos
        unpack, match, heads = _CHUNK_FRAME.unpack_from, _CHUNK_HEAD.match, []
        start, end = pos, len(buf)
        while end - pos >= 4:
            first, second, size = unpack(buf, pos)
            stop = pos + 4 + size
            if first != _CHUNK_FRAME_FIRST or second != _LENGTH_16 or stop > end:
                break
            head = match(buf, pos + 4, stop)
            if head is None:
                break  # _read_frame says why
            heads.append(head)
            pos = stop
        if heads:
            seqs = list(map(_group, heads, repeat(1)))
            stamps = list(map(_group, heads, repeat(2)))
            self._tally.record(seqs, stamps, pos - start - 4 * len(heads), now_ns)
        return pos

    def _read_frame(self, buf: bytes, pos: int, now_ns: int) -> int | None:
        """Read the frame at ``pos``: where the next one starts, or None if it is incomplete."""
        header = _parse_header(buf, pos, self._max_message)
        if header is None:
            return None
        opcode, fin, start, size = header
        if len(buf) < start + size:
            return None
        payload = buf[start : start + size]
        if opcode >= Opcode.CLOSE:
            self._control(opcode, payload)
        else:
            self._data(opcode, fin, payload, now_ns)
        return start + size

    def _data(self, opcode: int, fin: bool, payload: bytes, now_ns: int) -> None:
        if opcode == Opcode.BINARY:
            raise FrameError("a binary message; load-test chunks are text", CLOSE_UNSUPPORTED_DATA)
        if opcode == Opcode.TEXT:
            if self._fragments is not None:
                raise FrameError("a new message before the fragmented one ended")
            if fin:
                self._message(payload, now_ns)
                return
            self._fragments, self._fragment_bytes = [], 0
        elif opcode != Opcode.CONTINUATION:
            raise FrameError(f"reserved opcode {opcode:#x}")
        elif self._fragments is None:
            raise FrameError("a continuation frame outside a fragmented message")
        self._add_fragment(payload, fin, now_ns)

    def _add_fragment(self, payload: bytes, fin: bool, now_ns: int) -> None:
        assert self._fragments is not None
        self._fragment_bytes += len(payload)
        if self._fragment_bytes > self._max_message:
            raise FrameError(f"a message over {self._max_message} bytes", CLOSE_MESSAGE_TOO_BIG)
        self._fragments.append(payload)
        if fin:
            message, self._fragments = b"".join(self._fragments), None
            self._message(message, now_ns)

    def _message(self, message: bytes, now_ns: int) -> None:
        seq, ts = read_seq_ts(message)
        self._tally.chunk(seq, ts, len(message), now_ns)

    def _control(self, opcode: int, payload: bytes) -> None:
        self.close = _control(opcode, payload, self.outgoing)


class BinaryStreamReader:
    """Reads a WebSocket whose binary messages carry one byte stream (AIRC over WebSocket).

    `feed` returns the data bytes in order, whatever the framing: whole or fragmented binary
    messages (a binary frame, then continuation frames), with control frames between them
    (pings answered with pongs, a close frame kept in ``close``, echoed, and nothing after it
    read). A frame's payload is handed on as it arrives, never buffered whole, so no frame
    size needs a limit; the byte stream's own decoder bounds what it holds. A text message
    raises `FrameError` (1003), broken framing `FrameError` (1002).
    """

    __slots__ = ("_fragmented", "_remaining", "_tail", "close", "outgoing")

    def __init__(self) -> None:
        self._tail = b""  # an incomplete frame header, or a whole incomplete control frame
        self._remaining = 0  # payload bytes of the current data frame still to come
        self._fragmented = False  # inside a binary message whose final frame is still to come
        self.outgoing: list[bytes] = []
        """Frames to send (pongs, the close echo); the caller writes and clears it."""
        self.close: tuple[int, str] | None = None
        """The server's close code and reason, once its close frame arrived."""

    def feed(self, data: bytes) -> bytes:
        """Read ``data``; return the binary payload bytes it completes or continues.

        Raises:
            FrameError: a frame the reader refuses (with the close code to answer).
        """
        if self.close is not None:
            return b""
        buf = self._tail + data if self._tail else data
        out: list[bytes] = []
        pos, end = 0, len(buf)
        while self.close is None:
            if self._remaining:
                take = min(self._remaining, end - pos)
                if not take:
                    break
                out.append(buf[pos : pos + take])
                pos += take
                self._remaining -= take
                continue
            header = _parse_header(buf, pos, _UNLIMITED)
            if header is None:
                break
            opcode, fin, start, size = header
            if opcode >= Opcode.CLOSE:
                if end < start + size:
                    break
                self._control(opcode, buf[start : start + size])
            elif opcode == Opcode.BINARY:
                if self._fragmented:
                    raise FrameError("a new message before the fragmented one ended")
                self._fragmented = not fin
                self._remaining = size
            elif opcode == Opcode.CONTINUATION:
                if not self._fragmented:
                    raise FrameError("a continuation frame outside a fragmented message")
                self._fragmented = not fin
                self._remaining = size
            elif opcode == Opcode.TEXT:
                raise FrameError("a text message; this stream is binary", CLOSE_UNSUPPORTED_DATA)
            else:
                raise FrameError(f"reserved opcode {opcode:#x}")
            pos = start if opcode < Opcode.CLOSE else start + size
        self._tail = buf[pos:] if self.close is None and pos < end else b""
        return b"".join(out)

    def _control(self, opcode: int, payload: bytes) -> None:
        self.close = _control(opcode, payload, self.outgoing)


def _control(opcode: int, payload: bytes, outgoing: list[bytes]) -> tuple[int, str] | None:
    """Answer a control frame into ``outgoing``: a ping with a pong, a close with its echo.
    The close code and reason of a close frame, else None."""
    if opcode == Opcode.PING:
        outgoing.append(client_frame(Opcode.PONG, payload))
    elif opcode == Opcode.CLOSE:
        close = _parse_close(payload)
        echo = b"" if close[0] == CLOSE_NO_STATUS else close_payload(close[0])
        outgoing.append(client_frame(Opcode.CLOSE, echo))
        return close
    elif opcode != Opcode.PONG:
        raise FrameError(f"reserved opcode {opcode:#x}")
    return None


_UNLIMITED = 1 << 63  # BinaryStreamReader streams payloads through: no frame size limit


def _parse_header(buf: bytes, pos: int, max_size: int) -> tuple[int, bool, int, int] | None:
    """``(opcode, fin, payload start, payload size)`` of the frame at ``pos``; None if its
    header is incomplete.

    Raises:
        FrameError: a header no server may send here.
    """
    if len(buf) - pos < 2:
        return None
    first, second = buf[pos], buf[pos + 1]
    opcode, size = first & 0x0F, second & 0x7F
    if first & _RSV:
        raise FrameError("RSV bits set, but no extension was negotiated")
    if second & _MASK:
        raise FrameError("a masked frame from the server")
    start = pos + 2
    if size >= _LENGTH_16:
        width = 2 if size == _LENGTH_16 else 8
        if len(buf) < start + width:
            return None
        size = int.from_bytes(buf[start : start + width], "big")
        start += width
        if size >> 63:
            raise FrameError("a 64-bit length with its top bit set")
    if opcode >= Opcode.CLOSE and (size > _MAX_CONTROL_PAYLOAD or not first & _FIN):
        raise FrameError("a control frame that is fragmented or over 125 bytes")
    if size > max_size:
        raise FrameError(f"a frame over {max_size} bytes", CLOSE_MESSAGE_TOO_BIG)
    return opcode, bool(first & _FIN), start, size


def _parse_close(payload: bytes) -> tuple[int, str]:
    """``(code, reason)`` of a close frame's payload (section 5.5.1)."""
    if not payload:
        return CLOSE_NO_STATUS, ""
    if len(payload) < 2:
        raise FrameError("a close frame with a 1-byte payload")
    code = int.from_bytes(payload[:2], "big")
    if not _sendable_close_code(code):
        raise FrameError(f"a close frame with code {code}, which no endpoint may send")
    return code, payload[2:].decode("utf-8", "replace")


def _sendable_close_code(code: int) -> bool:
    """Codes defined for close frames (section 7.4.1, and the IANA registry's 1012-1014);
    3000-4999 are for libraries and applications."""
    return 1000 <= code <= 1003 or 1007 <= code <= 1014 or 3000 <= code <= 4999


def close_payload(code: int, reason: str = "") -> bytes:
    """The payload of a close frame: the status code, then the reason in UTF-8."""
    return code.to_bytes(2, "big") + reason.encode()[: _MAX_CONTROL_PAYLOAD - 2]


def client_frame(opcode: int, payload: bytes) -> bytes:
    """A final, masked frame, as a client must send every frame (section 5.3); control and
    small payloads only (under 126 bytes)."""
    if len(payload) > _MAX_CONTROL_PAYLOAD:
        raise ValueError("client_frame only builds frames of up to 125 bytes")
    key = os.urandom(4)
    # XOR with the repeated key as one big-integer operation instead of a loop over bytes.
    repeated = (key * (len(payload) // 4 + 1))[: len(payload)]
    masked = (int.from_bytes(payload, "big") ^ int.from_bytes(repeated, "big")).to_bytes(
        len(payload), "big"
    )
    return bytes((_FIN | opcode, _MASK | len(payload))) + key + masked
