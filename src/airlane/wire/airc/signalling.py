"""AIRC signalling messages: the control messages carried on `SIGNALLING_STREAM` (255).

Each message is one AIRC message (the connection may fragment it over several frames). Its
payload is a type byte, then the message's fields in order, in network byte order, with no
padding and nothing after the last field. Integers are unsigned unless marked ``i``; a
``bool`` is a u8 that must be 0 or 1. Variable-length fields carry their length first:

- ``str8``: u8 byte count, then that many bytes of UTF-8;
- ``str16``: u16 byte count, then UTF-8;
- ``blob32``: u32 byte count, then raw bytes.

The messages (``<= n`` is a limit in bytes, enforced on both encode and decode)::

    0x01 GenRequest    request_id u16, requested_stream u16 (0xFFFF: the server picks),
                       sample_rate u32 (0: not media), encoder str8 <= 64,
                       body blob32 <= 1 MiB (an OpenAI chat request as JSON; may be empty)
    0x02 GenAck        request_id u16, stream u16, jitter_buffer_us u32,
                       origin_ts u32 (t1: the GenRequest frame's header timestamp),
                       receive_ts u32 (t2: server clock when the GenRequest arrived),
                       clock_offset_us i32 (server minus client clock; 0 if unknown),
                       airlane_stream str8 <= 200, epoch str8 <= 64
    0x03 Open          request_id u16, requested_stream u16, airlane_stream str8 <= 200,
                       epoch str8 <= 64 (empty: from the start), after_seq u64
    0x04 Opened        request_id u16, stream u16, airlane_stream str8 <= 200,
                       epoch str8 <= 64, from_seq u64, ended bool
    0x05 Close         stream u16, last_seq u64 (either side: detach, not cancel)
    0x06 Cancel        request_id u16, stream u16
    0x07 Cancelled     request_id u16, stream u16, cancelled bool
    0x08 Error         request_id u16, code str8 (e.g. "stream_not_found"),
                       message str16 <= 1024
    0x09 TimeRequest   nonce u32 (t1 is the frame header timestamp)
    0x0A TimeResponse  nonce u32, origin_ts u32 (t1 echo), receive_ts u32 (t2)
    0x0B GoAway        code u16 (an `ErrorCode` value), reason str16
    0x0C Auth          request_id u16, token str16 <= 4096 (a bearer API key; for links that
                       carry no credentials of their own, such as plain TCP)
    0x0D Authenticated request_id u16, principal str8 (who the server now takes us for)
    0x0E RtcOffer      request_id u16, sdp str32 <= 64 KiB (client: a WebRTC offer with a
                       data channel)
    0x0F RtcAnswer     request_id u16, session str8, sdp str32 <= 64 KiB (server: the answer
                       to each Rtc request; to RtcOffer the SDP answer, with every candidate
                       the server gathered; to an RtcCandidates that restarts ICE the server's
                       new credentials and candidates as a fragment; otherwise empty)
    0x10 RtcCandidates request_id u16, session str8, fragment str32 <= 64 KiB (client: its
                       trickled ``a=candidate:`` lines, an ``application/trickle-ice-sdpfrag``)
    0x11 RtcClose      request_id u16, session str8 (client: close that peer connection)
    0x12 SetLane       request_id u16, lane u8 (client: this connection carries lane 0
                       control, 1 interactive or 2 bulk; the server marks its socket)
    0x13 LaneSet       request_id u16, lane u8, marks str8 (server: what it marked, such as
                       ``dscp=40 priority=6``; empty where it could mark nothing)
    0x14 CancelStream  request_id u16, airlane_stream str8 <= 200 (client: cancel the
                       generation of that Airlane stream, whichever connection started it;
                       answered `Cancelled` with stream 0xFFFF)

`SetLane` and `CancelStream` let a client keep its signalling on a connection of its own
beside the one carrying bulk data (``docs/lanes.md``). The four ``Rtc`` messages are the
WebRTC signalling of ``docs/webrtc.md`` for a client that already holds an AIRC connection
(usually AIRC over WebSocket). Each is answered with an `RtcAnswer`, or refused with an
`Error` carrying the request's id.

Decoding never raises anything but `AircProtocolError`: ``UNKNOWN_SIGNAL`` for a type byte not
listed above, ``BAD_SIGNALLING`` for anything else wrong (an empty payload, truncation, bytes
after the last field, invalid UTF-8, a bool other than 0/1, a length over its limit, an
unknown ``GoAway`` code). Every accepted payload re-encodes to exactly the same bytes.
Encoding a field that does not fit raises `ValueError` (or `TypeError` for a value of the
wrong type): that is our bug, never the peer's.

The layout lives in one table, `_LAYOUTS`, which both directions read.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Protocol, TypeAlias

from airlane.wire.airc.errors import AircProtocolError, ErrorCode

__all__ = [
    "MAX_AIRLANE_STREAM",
    "MAX_BODY",
    "MAX_ENCODER",
    "MAX_EPOCH",
    "MAX_MESSAGE",
    "MAX_SDP",
    "MAX_TOKEN",
    "Auth",
    "Authenticated",
    "Cancel",
    "CancelStream",
    "Cancelled",
    "Close",
    "Error",
    "GenAck",
    "GenRequest",
    "GoAway",
    "LaneSet",
    "Open",
    "Opened",
    "RtcAnswer",
    "RtcCandidates",
    "RtcClose",
    "RtcOffer",
    "SetLane",
    "SignalMessage",
    "SignalType",
    "TimeRequest",
    "TimeResponse",
    "decode_signal",
    "encode_signal",
]

MAX_AIRLANE_STREAM = 200
"""Longest ``airlane_stream`` name, in UTF-8 bytes."""
MAX_EPOCH = 64
"""Longest ``epoch``, in UTF-8 bytes."""
MAX_ENCODER = 64
"""Longest ``encoder`` name, in UTF-8 bytes."""
MAX_MESSAGE = 1024
"""Longest `Error` ``message``, in UTF-8 bytes."""
MAX_BODY = 1 << 20
"""Largest `GenRequest` ``body``: 1 MiB."""
MAX_TOKEN = 4096
"""Longest `Auth` ``token``, in UTF-8 bytes."""
MAX_SDP = 64 << 10
"""Longest SDP (`RtcOffer`, `RtcAnswer`) or candidate fragment (`RtcCandidates`): 64 KiB."""


class SignalType(enum.IntEnum):
    """The type byte that starts every signalling message."""

    GEN_REQUEST = 0x01
    GEN_ACK = 0x02
    OPEN = 0x03
    OPENED = 0x04
    CLOSE = 0x05
    CANCEL = 0x06
    CANCELLED = 0x07
    ERROR = 0x08
    TIME_REQUEST = 0x09
    TIME_RESPONSE = 0x0A
    GOAWAY = 0x0B
    AUTH = 0x0C
    AUTHENTICATED = 0x0D
    RTC_OFFER = 0x0E
    RTC_ANSWER = 0x0F
    RTC_CANDIDATES = 0x10
    RTC_CLOSE = 0x11
    SET_LANE = 0x12
    LANE_SET = 0x13
    CANCEL_STREAM = 0x14


@dataclass(frozen=True, slots=True)
class GenRequest:
    """Client: start a generation, streamed back on ``requested_stream``."""

    request_id: int
    requested_stream: int
    sample_rate: int
    encoder: str
    body: bytes


@dataclass(frozen=True, slots=True)
class GenAck:
    """Server: the generation for ``request_id`` runs on ``stream``, with clock data."""

    request_id: int
    stream: int
    jitter_buffer_us: int
    origin_ts: int
    receive_ts: int
    clock_offset_us: int
    airlane_stream: str
    epoch: str


@dataclass(frozen=True, slots=True)
class Open:
    """Client: attach an existing Airlane stream, resuming after ``after_seq``."""

    request_id: int
    requested_stream: int
    airlane_stream: str
    epoch: str
    after_seq: int


@dataclass(frozen=True, slots=True)
class Opened:
    """Server: ``airlane_stream`` is attached to ``stream`` from ``from_seq``."""

    request_id: int
    stream: int
    airlane_stream: str
    epoch: str
    from_seq: int
    ended: bool


@dataclass(frozen=True, slots=True)
class Close:
    """Either side: detach ``stream`` after ``last_seq`` (the generation goes on)."""

    stream: int
    last_seq: int


@dataclass(frozen=True, slots=True)
class Cancel:
    """Client: stop the generation behind ``request_id`` / ``stream``."""

    request_id: int
    stream: int


@dataclass(frozen=True, slots=True)
class Cancelled:
    """Server: the answer to `Cancel`; ``cancelled`` is False if nothing was running."""

    request_id: int
    stream: int
    cancelled: bool


@dataclass(frozen=True, slots=True)
class Error:
    """Server: ``request_id`` failed; ``code`` is machine-readable, ``message`` is not."""

    request_id: int
    code: str
    message: str


@dataclass(frozen=True, slots=True)
class TimeRequest:
    """Either side: ask for the peer's clock (t1 is this frame's header timestamp)."""

    nonce: int


@dataclass(frozen=True, slots=True)
class TimeResponse:
    """The answer to `TimeRequest`: t1 echoed and t2, the receive time on this clock."""

    nonce: int
    origin_ts: int
    receive_ts: int


@dataclass(frozen=True, slots=True)
class GoAway:
    """Either side: the connection is ending, for ``code``."""

    code: ErrorCode
    reason: str


@dataclass(frozen=True, slots=True)
class Auth:
    """Client: present a bearer token (where the link itself carried none)."""

    request_id: int
    token: str


@dataclass(frozen=True, slots=True)
class Authenticated:
    """The answer to `Auth`: the principal the connection now acts as."""

    request_id: int
    principal: str


@dataclass(frozen=True, slots=True)
class RtcOffer:
    """Client: a WebRTC offer (SDP with a data channel) for a peer connection to the server."""

    request_id: int
    sdp: str


@dataclass(frozen=True, slots=True)
class RtcAnswer:
    """Server: the answer to an Rtc request: to `RtcOffer` the SDP answer, ``session`` naming
    the new peer connection; to an `RtcCandidates` that restarts ICE (new credentials) the
    server's new ones and its candidates as a fragment; otherwise an empty ``sdp``."""

    request_id: int
    session: str
    sdp: str


@dataclass(frozen=True, slots=True)
class RtcCandidates:
    """Client: candidates it gathered after its offer, for peer connection ``session``."""

    request_id: int
    session: str
    fragment: str


@dataclass(frozen=True, slots=True)
class RtcClose:
    """Client: close peer connection ``session``."""

    request_id: int
    session: str


@dataclass(frozen=True, slots=True)
class SetLane:
    """Client: this connection carries ``lane`` (0 control, 1 interactive, 2 bulk)."""

    request_id: int
    lane: int


@dataclass(frozen=True, slots=True)
class LaneSet:
    """Server: the connection is taken as ``lane``; ``marks`` says what its socket got."""

    request_id: int
    lane: int
    marks: str


@dataclass(frozen=True, slots=True)
class CancelStream:
    """Client: cancel the generation of Airlane stream ``airlane_stream`` (started on this
    connection or another)."""

    request_id: int
    airlane_stream: str


SignalMessage: TypeAlias = (
    GenRequest
    | GenAck
    | Open
    | Opened
    | Close
    | Cancel
    | Cancelled
    | Error
    | TimeRequest
    | TimeResponse
    | GoAway
    | Auth
    | Authenticated
    | RtcOffer
    | RtcAnswer
    | RtcCandidates
    | RtcClose
    | SetLane
    | LaneSet
    | CancelStream
)
"""Any signalling message."""


def _bad(reason: str) -> AircProtocolError:
    return AircProtocolError(ErrorCode.BAD_SIGNALLING, reason)


def _take(where: str, data: bytes, offset: int, size: int) -> tuple[bytes, int]:
    end = offset + size
    if end > len(data):
        raise _bad(f"{where}: truncated (needs {size} bytes, {len(data) - offset} left)")
    return data[offset:end], end


class _Codec(Protocol):
    """How one field goes on the wire; ``where`` names it in error messages."""

    def encode(self, where: str, value: object) -> bytes: ...

    def decode(self, where: str, data: bytes, offset: int) -> tuple[Any, int]: ...


@dataclass(frozen=True, slots=True)
class _Int:
    size: int
    signed: bool = False

    def encode(self, where: str, value: object) -> bytes:
        if not isinstance(value, int):
            raise TypeError(f"{where} must be an int, not {type(value).__name__}")
        try:
            return value.to_bytes(self.size, "big", signed=self.signed)
        except OverflowError:
            kind = "i" if self.signed else "u"
            raise ValueError(f"{where}={value} does not fit {kind}{self.size * 8}") from None

    def decode(self, where: str, data: bytes, offset: int) -> tuple[int, int]:
        raw, offset = _take(where, data, offset, self.size)
        return int.from_bytes(raw, "big", signed=self.signed), offset


@dataclass(frozen=True, slots=True)
class _Bool:
    def encode(self, where: str, value: object) -> bytes:
        if not isinstance(value, bool):
            raise TypeError(f"{where} must be a bool, not {type(value).__name__}")
        return b"\x01" if value else b"\x00"

    def decode(self, where: str, data: bytes, offset: int) -> tuple[bool, int]:
        raw, offset = _take(where, data, offset, 1)
        if raw not in (b"\x00", b"\x01"):
            raise _bad(f"{where}: bool must be 0 or 1, got {raw[0]}")
        return raw == b"\x01", offset


@dataclass(frozen=True, slots=True)
class _Code:
    """An `ErrorCode` as a u16; a value we do not know is the peer's error."""

    def encode(self, where: str, value: object) -> bytes:
        if not isinstance(value, int):
            raise TypeError(f"{where} must be an ErrorCode, not {type(value).__name__}")
        return ErrorCode(value).to_bytes(2, "big")  # ValueError if not an ErrorCode

    def decode(self, where: str, data: bytes, offset: int) -> tuple[ErrorCode, int]:
        raw, offset = _take(where, data, offset, 2)
        value = int.from_bytes(raw, "big")
        try:
            return ErrorCode(value), offset
        except ValueError:
            raise _bad(f"{where}: unknown error code {value}") from None


@dataclass(frozen=True, slots=True)
class _Sized:
    """Length-prefixed bytes (``text=False``) or UTF-8 text, at most ``limit`` bytes."""

    prefix: int
    limit: int
    text: bool = True

    def encode(self, where: str, value: object) -> bytes:
        if self.text:
            if not isinstance(value, str):
                raise TypeError(f"{where} must be a str, not {type(value).__name__}")
            try:
                raw = value.encode()
            except UnicodeEncodeError as exc:
                raise ValueError(f"{where} is not encodable as UTF-8: {exc}") from None
        elif isinstance(value, bytes | bytearray | memoryview):
            raw = bytes(value)
        else:
            raise TypeError(f"{where} must be bytes, not {type(value).__name__}")
        if len(raw) > self.limit:
            raise ValueError(f"{where} is {len(raw)} bytes; the limit is {self.limit}")
        return len(raw).to_bytes(self.prefix, "big") + raw

    def decode(self, where: str, data: bytes, offset: int) -> tuple[str | bytes, int]:
        raw, offset = _take(where, data, offset, self.prefix)
        length = int.from_bytes(raw, "big")
        if length > self.limit:
            raise _bad(f"{where}: {length} bytes exceeds the limit of {self.limit}")
        raw, offset = _take(where, data, offset, length)
        if not self.text:
            return raw, offset
        try:
            return raw.decode(), offset
        except UnicodeDecodeError as exc:
            raise _bad(f"{where}: invalid UTF-8 at byte {exc.start}") from None


_U8 = _Int(1)
_U16 = _Int(2)
_U32 = _Int(4)
_I32 = _Int(4, signed=True)
_U64 = _Int(8)
_BOOL = _Bool()
_AIRLANE_STREAM = _Sized(1, MAX_AIRLANE_STREAM)
_EPOCH = _Sized(1, MAX_EPOCH)
_SESSION = _Sized(1, 0xFF)
_SDP = _Sized(4, MAX_SDP)

_Layout: TypeAlias = tuple[tuple[str, _Codec], ...]

# The wire layout of every message, in field order (see the module docstring).
# tests/wire/airc/test_signalling.py checks the names against each dataclass's fields.
_LAYOUTS: dict[SignalType, tuple[type[SignalMessage], _Layout]] = {
    SignalType.GEN_REQUEST: (
        GenRequest,
        (
            ("request_id", _U16),
            ("requested_stream", _U16),
            ("sample_rate", _U32),
            ("encoder", _Sized(1, MAX_ENCODER)),
            ("body", _Sized(4, MAX_BODY, text=False)),
        ),
    ),
    SignalType.GEN_ACK: (
        GenAck,
        (
            ("request_id", _U16),
            ("stream", _U16),
            ("jitter_buffer_us", _U32),
            ("origin_ts", _U32),
            ("receive_ts", _U32),
            ("clock_offset_us", _I32),
            ("airlane_stream", _AIRLANE_STREAM),
            ("epoch", _EPOCH),
        ),
    ),
    SignalType.OPEN: (
        Open,
        (
            ("request_id", _U16),
            ("requested_stream", _U16),
            ("airlane_stream", _AIRLANE_STREAM),
            ("epoch", _EPOCH),
            ("after_seq", _U64),
        ),
    ),
    SignalType.OPENED: (
        Opened,
        (
            ("request_id", _U16),
            ("stream", _U16),
            ("airlane_stream", _AIRLANE_STREAM),
            ("epoch", _EPOCH),
            ("from_seq", _U64),
            ("ended", _BOOL),
        ),
    ),
    SignalType.CLOSE: (Close, (("stream", _U16), ("last_seq", _U64))),
    SignalType.CANCEL: (Cancel, (("request_id", _U16), ("stream", _U16))),
    SignalType.CANCELLED: (
        Cancelled,
        (("request_id", _U16), ("stream", _U16), ("cancelled", _BOOL)),
    ),
    SignalType.ERROR: (
        Error,
        (
            ("request_id", _U16),
            ("code", _Sized(1, 0xFF)),
            ("message", _Sized(2, MAX_MESSAGE)),
        ),
    ),
    SignalType.TIME_REQUEST: (TimeRequest, (("nonce", _U32),)),
    SignalType.TIME_RESPONSE: (
        TimeResponse,
        (("nonce", _U32), ("origin_ts", _U32), ("receive_ts", _U32)),
    ),
    SignalType.GOAWAY: (GoAway, (("code", _Code()), ("reason", _Sized(2, 0xFFFF)))),
    SignalType.AUTH: (Auth, (("request_id", _U16), ("token", _Sized(2, MAX_TOKEN)))),
    SignalType.AUTHENTICATED: (
        Authenticated,
        (("request_id", _U16), ("principal", _Sized(1, 0xFF))),
    ),
    SignalType.RTC_OFFER: (RtcOffer, (("request_id", _U16), ("sdp", _SDP))),
    SignalType.RTC_ANSWER: (
        RtcAnswer,
        (("request_id", _U16), ("session", _SESSION), ("sdp", _SDP)),
    ),
    SignalType.RTC_CANDIDATES: (
        RtcCandidates,
        (("request_id", _U16), ("session", _SESSION), ("fragment", _SDP)),
    ),
    SignalType.RTC_CLOSE: (RtcClose, (("request_id", _U16), ("session", _SESSION))),
    SignalType.SET_LANE: (SetLane, (("request_id", _U16), ("lane", _U8))),
    SignalType.LANE_SET: (
        LaneSet,
        (("request_id", _U16), ("lane", _U8), ("marks", _Sized(1, 0xFF))),
    ),
    SignalType.CANCEL_STREAM: (
        CancelStream,
        (("request_id", _U16), ("airlane_stream", _AIRLANE_STREAM)),
    ),
}

_TYPE_OF: dict[type[SignalMessage], SignalType] = {
    cls: signal_type for signal_type, (cls, _) in _LAYOUTS.items()
}


def encode_signal(msg: SignalMessage) -> bytes:
    """The payload for ``msg``: its type byte, then its fields.

    Raises:
        ValueError: a field is out of range or over its length limit, or a string is not
            encodable as UTF-8.
        TypeError: ``msg`` is not a signalling message, or a field has the wrong type.
    """
    signal_type = _TYPE_OF.get(type(msg))
    if signal_type is None:
        raise TypeError(f"not a signalling message: {msg!r}")
    name = type(msg).__name__
    _, layout = _LAYOUTS[signal_type]
    parts = [signal_type.to_bytes(1, "big")]
    parts += [codec.encode(f"{name}.{field}", getattr(msg, field)) for field, codec in layout]
    return b"".join(parts)


def decode_signal(payload: bytes) -> SignalMessage:
    """The message in ``payload`` (one whole, reassembled signalling message).

    Raises:
        AircProtocolError: ``UNKNOWN_SIGNAL`` for an unknown type byte, ``BAD_SIGNALLING``
            for any other malformation. Nothing else is ever raised.
    """
    data = bytes(payload)
    if not data:
        raise _bad("empty signalling message")
    try:
        signal_type = SignalType(data[0])
    except ValueError:
        raise AircProtocolError(
            ErrorCode.UNKNOWN_SIGNAL, f"unknown signal type {data[0]:#04x}"
        ) from None
    cls, layout = _LAYOUTS[signal_type]
    values: list[Any] = []
    offset = 1
    for field, codec in layout:
        value, offset = codec.decode(f"{cls.__name__}.{field}", data, offset)
        values.append(value)
    if offset != len(data):
        raise _bad(f"{cls.__name__}: {len(data) - offset} bytes after the last field")
    return cls(*values)
