"""`LoadConnection`: one load-test WebSocket connection from the client's side, sans I/O.

It stacks the opening handshake (`airlane.bench.ws_handshake`) and the frame reader
(`airlane.bench.ws_frames`) behind one state machine; the asyncio layer only feeds it bytes
(`receive_data`) and writes what it says (`data_to_send`)::

    CONNECTING --101 response--> OPEN --server's close frame, echoed--> CLOSED

A refused handshake or broken framing raises (`HandshakeError`, `FrameError`,
`ChunkFormatError`): the caller records the error and, once OPEN, fails the connection with
`failure_frame`. Bytes after CLOSED are ignored (RFC 6455 section 5.5.1: nothing follows a
close frame).
"""

from __future__ import annotations

import enum

from airlane.bench.chunk import LoadProtocolError
from airlane.bench.tally import StreamTally
from airlane.bench.ws_frames import (
    CLOSE_PROTOCOL_ERROR,
    DEFAULT_MAX_MESSAGE_BYTES,
    FrameError,
    FrameReader,
    Opcode,
    client_frame,
    close_payload,
)
from airlane.bench.ws_handshake import ClientHandshake

__all__ = ["ConnectionState", "LoadConnection"]


class ConnectionState(enum.Enum):
    """Where the connection is (see the module docstring)."""

    CONNECTING = "opening handshake"
    OPEN = "open"
    CLOSED = "closed"


class LoadConnection:
    """Reads one load-test stream into ``tally``; see the module docstring."""

    __slots__ = ("_handshake", "_outgoing", "_reader", "state")

    def __init__(
        self,
        tally: StreamTally,
        authority: str,
        target: str,
        *,
        key: bytes | None = None,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
    ) -> None:
        self._handshake = ClientHandshake(authority, target, key=key)
        self._reader = FrameReader(tally, max_message_bytes=max_message_bytes)
        self._outgoing = [self._handshake.request()]
        self.state = ConnectionState.CONNECTING
        """Where the connection is."""

    @property
    def close(self) -> tuple[int, str] | None:
        """The server's close code and reason, once CLOSED."""
        return self._reader.close

    def receive_data(self, data: bytes, now_ns: int) -> None:
        """Read bytes that arrived at ``now_ns``.

        Raises:
            LoadProtocolError: the server broke the handshake, the framing or a chunk.
        """
        if self.state is ConnectionState.CONNECTING:
            rest = self._handshake.receive_data(data)
            if rest is None:
                return
            self.state, data = ConnectionState.OPEN, rest
        if self.state is ConnectionState.OPEN:
            reader = self._reader
            reader.feed(data, now_ns)
            if reader.outgoing:
                self._outgoing += reader.outgoing
                reader.outgoing.clear()
            if reader.close is not None:
                self.state = ConnectionState.CLOSED

    def data_to_send(self) -> bytes:
        """What to write now (the request, pongs, the close echo); b"" if nothing."""
        if not self._outgoing:
            return b""
        out = b"".join(self._outgoing)
        self._outgoing.clear()
        return out

    def failure_frame(self, error: LoadProtocolError) -> bytes:
        """The close frame that fails the connection after ``error`` (RFC 6455 section 7.1.7);
        b"" before the handshake completed, when there is no WebSocket to close."""
        if self.state is not ConnectionState.OPEN:
            return b""
        self.state = ConnectionState.CLOSED
        code = error.code if isinstance(error, FrameError) else CLOSE_PROTOCOL_ERROR
        return client_frame(Opcode.CLOSE, close_payload(code))
