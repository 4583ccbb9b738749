"""multistream-select 1.0, sans-I/O: how both ends of a connection or stream agree on the
protocol that follows.

Every message is a varint-length-prefixed line ending in ``\\n``. Both sides send the header
``/multistream/1.0.0``; the dialer then proposes protocols one at a time and the listener
echoes the one it accepts or answers ``na``. A dialer may send its first proposal, and even the
protocol's first bytes, without waiting (js-libp2p does): whatever follows the accepted
proposal is handed on as the protocol's data (`Selected.rest`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from airlane.wire.errors import DecodeError
from airlane.wire.libp2p.varint import decode_uvarint, prefixed

__all__ = [
    "HEADER",
    "MultistreamDialer",
    "MultistreamListener",
    "NegotiationFailed",
    "Selected",
    "message",
]

HEADER = "/multistream/1.0.0"
MAX_LINE = 1024
"""The longest negotiation message accepted (protocol ids are short)."""
MAX_PROPOSALS = 16
"""Proposals a listener answers ``na`` to before it gives up on the dialer."""


class NegotiationFailed(DecodeError):
    """The peers found no common protocol, or one broke the negotiation."""


@dataclass(frozen=True, slots=True)
class Selected:
    """Negotiation done: the protocol, and bytes after it that belong to the protocol."""

    protocol: str
    rest: bytes


def message(line: str) -> bytes:
    """One negotiation message: ``line`` with its newline, length-prefixed."""
    return prefixed(line.encode() + b"\n")


def _line(raw: bytes) -> str:
    if not raw.endswith(b"\n"):
        raise NegotiationFailed("multistream message without its newline")
    try:
        return raw[:-1].decode()
    except UnicodeDecodeError:
        raise NegotiationFailed("multistream message is not UTF-8") from None


class MultistreamListener:
    """The accepting side: answers proposals with ``supports(protocol)``."""

    def __init__(self, supports: Callable[[str], bool]) -> None:
        self._supports = supports
        self._messages = _Messages()
        self._header_seen = False
        self._refused = 0

    @staticmethod
    def greeting() -> bytes:
        """What the listener sends first (its header)."""
        return message(HEADER)

    def receive_data(self, data: bytes) -> tuple[bytes, Selected | None]:
        """Take bytes from the dialer; return what to send back, and the selection once a
        proposal is accepted (then stop feeding this object).

        Raises:
            NegotiationFailed: a malformed message, a wrong header, too many proposals.
        """
        out = bytearray()
        messages = self._messages
        messages.feed(data)
        while (line := messages.next()) is not None:
            if not self._header_seen:
                if line != HEADER:
                    raise NegotiationFailed(f"expected {HEADER}, got {line[:80]!r}")
                self._header_seen = True
                continue
            if line != "ls" and self._supports(line):
                out += message(line)
                return bytes(out), Selected(line, messages.rest())
            self._refused += 1
            if self._refused > MAX_PROPOSALS:
                raise NegotiationFailed(f"no protocol agreed after {MAX_PROPOSALS} proposals")
            out += message("na")
        return bytes(out), None


class MultistreamDialer:
    """The proposing side, for one protocol (with the header, sent at once)."""

    def __init__(self, protocol: str) -> None:
        self.protocol = protocol
        self._messages = _Messages()
        self._header_seen = False

    def proposal(self) -> bytes:
        """The header and the proposal: the first bytes to send."""
        return message(HEADER) + message(self.protocol)

    def receive_data(self, data: bytes) -> Selected | None:
        """Take the listener's bytes; the selection once it accepts.

        Raises:
            NegotiationFailed: the listener refused (``na``) or broke the negotiation.
        """
        messages = self._messages
        messages.feed(data)
        while (line := messages.next()) is not None:
            if not self._header_seen:
                if line != HEADER:
                    raise NegotiationFailed(f"expected {HEADER}, got {line[:80]!r}")
                self._header_seen = True
            elif line == self.protocol:
                return Selected(line, messages.rest())
            elif line == "na":
                raise NegotiationFailed(f"the peer does not speak {self.protocol}")
            else:
                raise NegotiationFailed(f"unexpected multistream answer {line[:80]!r}")
        return None


class _Messages:
    """Negotiation messages one at a time: what follows an accepted proposal is not ours."""

    __slots__ = ("_buffer",)

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> None:
        self._buffer += data

    def next(self) -> str | None:
        buffer = self._buffer
        try:
            head = decode_uvarint(buffer)
        except DecodeError as exc:
            raise NegotiationFailed(f"bad multistream message: {exc}") from None
        if head is None:
            return None
        size, start = head
        if size > MAX_LINE:
            raise NegotiationFailed(f"multistream message of {size} bytes (at most {MAX_LINE})")
        if len(buffer) - start < size:
            return None
        raw = bytes(buffer[start : start + size])
        del buffer[: start + size]
        return _line(raw)

    def rest(self) -> bytes:
        rest = bytes(self._buffer)
        self._buffer.clear()
        return rest
