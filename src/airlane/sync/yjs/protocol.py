"""The y-websocket wire protocol, sans I/O: one binary WebSocket message is one y-protocols
message. `parse_message` turns bytes into a message object (or raises a `YProtocolError` that
says what is wrong); `encode` turns a message object into bytes.

Layout, in lib0's encoding (``varUint``: unsigned LEB128; ``varUint8Array``: a varUint length,
then that many bytes; ``varString``: a varUint8Array of UTF-8), as y-websocket 1.x, 2.x and 3.x
and y-protocols write it::

    message            = varUint type, body
    0 sync             = varUint step, varUint8Array payload
        step 0: SyncStep1   payload is a state vector ("what I have")
        step 1: SyncStep2   payload is an update ("what you lack"), the answer to a step 1
        step 2: SyncUpdate  payload is an update made since
    1 awareness        = varUint8Array awareness update (see `parse_awareness_update`)
    2 auth             = varUint 0 (permission denied), varString reason; server to client only
    3 query awareness  = (no body): "send me every awareness state you know"

    awareness update   = varUint count, count x (varUint client, varUint clock, varString JSON)

Every message is exactly one WebSocket message: bytes after the body are an error, not a second
message (y-websocket never sends two in one frame).

The encoders are pycrdt's (`pycrdt.create_update_message` and friends), so the bytes are the
ones every pycrdt-based server writes; only the reader is ours, because pycrdt's ``Decoder``
trusts its input (a truncated message reads short or raises ``IndexError``) and a server must
not.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from typing import Any

from pycrdt import (
    YMessageType,
    YSyncMessageType,
    create_awareness_message,
    create_update_message,
    write_message,
    write_var_uint,
)

from airlane.sync.yjs.errors import InvalidUpdate, MalformedMessage, UnknownMessage

__all__ = [
    "EMPTY_UPDATE",
    "MAX_SAFE_INTEGER",
    "AuthDenied",
    "AwarenessEntry",
    "AwarenessMessage",
    "MessageType",
    "QueryAwareness",
    "SyncStep",
    "SyncStep1",
    "SyncStep2",
    "SyncUpdate",
    "YMessage",
    "check_state_vector",
    "check_update",
    "encode",
    "encode_awareness_update",
    "parse_awareness_update",
    "parse_message",
]

MAX_SAFE_INTEGER = 2**53 - 1
"""The largest varUint lib0 reads into a JavaScript number exactly; larger ones are refused."""
_MAX_VARUINT_BYTES = 8  # 8 x 7 bits covers 2**53; a ninth byte can only be an overlong number

EMPTY_UPDATE = b"\x00\x00"
"""An update with no structs and no deletions: what a peer with nothing new sends in step 2."""


class MessageType(enum.IntEnum):
    """The first varUint of every message (y-websocket's ``messageSync`` and friends)."""

    SYNC = int(YMessageType.SYNC)
    AWARENESS = int(YMessageType.AWARENESS)
    AUTH = 2
    QUERY_AWARENESS = 3


class SyncStep(enum.IntEnum):
    """The second varUint of a sync message (y-protocols ``messageYjsSyncStep1`` ...)."""

    STEP1 = int(YSyncMessageType.SYNC_STEP1)
    STEP2 = int(YSyncMessageType.SYNC_STEP2)
    UPDATE = int(YSyncMessageType.SYNC_UPDATE)


@dataclass(frozen=True, slots=True)
class SyncStep1:
    """ "This is what I have": a state vector; the answer is a `SyncStep2`."""

    state_vector: bytes


@dataclass(frozen=True, slots=True)
class SyncStep2:
    """The update the other side lacks, in answer to its `SyncStep1`."""

    update: bytes


@dataclass(frozen=True, slots=True)
class SyncUpdate:
    """An update made since the sync."""

    update: bytes


@dataclass(frozen=True, slots=True)
class AwarenessMessage:
    """An awareness update (presence, cursors): see `parse_awareness_update`."""

    update: bytes


@dataclass(frozen=True, slots=True)
class QueryAwareness:
    """A request for every awareness state the other side knows."""


@dataclass(frozen=True, slots=True)
class AuthDenied:
    """y-protocols' auth message: the server refuses the peer. Server to client only."""

    reason: str


YMessage = SyncStep1 | SyncStep2 | SyncUpdate | AwarenessMessage | QueryAwareness | AuthDenied
"""Every message of the protocol."""


@dataclass(frozen=True, slots=True)
class AwarenessEntry:
    """One client's awareness state in an awareness update."""

    client_id: int
    """The Yjs client id (``doc.clientID``) the state belongs to."""
    clock: int
    """Increases with every change of that client's state; the higher clock wins."""
    state: Any
    """The state as JSON-compatible data; None means the client is gone."""
    size: int = field(default=0, compare=False)
    """The state's length in bytes as it was read (its JSON); 0 for an entry made here."""


# -- reading -----------------------------------------------------------------------------------


class _Reader:
    """A cursor over one message that refuses to read past its end."""

    __slots__ = ("data", "offset")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.offset = 0

    @property
    def remaining(self) -> int:
        return len(self.data) - self.offset

    def var_uint(self, what: str) -> int:
        value = shift = 0
        for count in range(1, _MAX_VARUINT_BYTES + 1):
            if self.offset >= len(self.data):
                raise MalformedMessage(f"message ends inside the {what}")
            byte = self.data[self.offset]
            self.offset += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                if value > MAX_SAFE_INTEGER or (byte == 0 and count > 1):
                    raise MalformedMessage(f"the {what} is not a minimal varUint below 2**53")
                return value
        raise MalformedMessage(f"the {what} is longer than {_MAX_VARUINT_BYTES} bytes")

    def var_bytes(self, what: str) -> bytes:
        length = self.var_uint(f"length of the {what}")
        if length > self.remaining:
            raise MalformedMessage(
                f"the {what} claims {length} bytes but only {self.remaining} follow"
            )
        start = self.offset
        self.offset += length
        return self.data[start : self.offset]

    def var_string(self, what: str) -> str:
        raw = self.var_bytes(what)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise MalformedMessage(f"the {what} is not UTF-8") from None

    def end(self, what: str) -> None:
        if self.remaining:
            raise MalformedMessage(f"{self.remaining} unexpected bytes after the {what}")


def parse_message(data: bytes) -> YMessage:
    """The message ``data`` holds; raises `MalformedMessage` or `UnknownMessage`, never
    anything else, whatever the bytes."""
    reader = _Reader(data)
    kind = reader.var_uint("message type")
    message: YMessage
    if kind == MessageType.SYNC:
        message = _parse_sync(reader)
    elif kind == MessageType.AWARENESS:
        message = AwarenessMessage(reader.var_bytes("awareness update"))
        reader.end("awareness message")
    elif kind == MessageType.QUERY_AWARENESS:
        message = QueryAwareness()
        reader.end("query awareness message")
    elif kind == MessageType.AUTH:
        reason = "permission denied"
        if reader.var_uint("auth type") == 0:
            reason = reader.var_string("auth reason")
        message = AuthDenied(reason)
        reader.end("auth message")
    else:
        raise UnknownMessage(f"unknown message type {kind}; y-websocket uses 0-3")
    return message


def _parse_sync(reader: _Reader) -> YMessage:
    step = reader.var_uint("sync step")
    if step > SyncStep.UPDATE:
        raise UnknownMessage(f"unknown sync step {step}; y-protocols uses 0, 1 and 2")
    payload = reader.var_bytes("sync payload")
    reader.end("sync message")
    if step == SyncStep.STEP1:
        return SyncStep1(payload)
    if step == SyncStep.STEP2:
        return SyncStep2(payload)
    return SyncUpdate(payload)


def parse_awareness_update(update: bytes) -> tuple[AwarenessEntry, ...]:
    """The entries of an awareness update (the body of an `AwarenessMessage`); raises
    `MalformedMessage` if it is not one, states that are not JSON included."""
    reader = _Reader(update)
    count = reader.var_uint("awareness entry count")
    # Each entry takes at least three bytes: a count beyond that is a lie, refused up front.
    if count * 3 > reader.remaining:
        raise MalformedMessage(f"the awareness update claims {count} entries in too few bytes")
    entries = []
    for _ in range(count):
        client_id = reader.var_uint("awareness client id")
        clock = reader.var_uint("awareness clock")
        raw = reader.var_bytes("awareness state")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise MalformedMessage("the awareness state is not UTF-8") from None
        try:
            # json, not orjson: the states are applied by pycrdt's Awareness, which uses json,
            # and JSON.stringify may write lone surrogates (\ud800) that orjson refuses.
            state = json.loads(text) if text else None
        except ValueError:
            raise MalformedMessage(
                f"the awareness state of client {client_id} is not JSON"
            ) from None
        entries.append(AwarenessEntry(client_id, clock, state, len(raw)))
    reader.end("awareness update")
    return tuple(entries)


# Yrs (under pycrdt) reserves memory for the count that opens an update (client groups) or a
# state vector (entries) before it reads them: four bytes claiming 2**28 entries cost half a
# gigabyte and half a second of the event loop, whatever follows. A count that cannot fit in
# the bytes after it is refused here first; with that check, fuzzed updates decode (or fail) in
# well under a millisecond.


def check_update(update: bytes) -> None:
    """Raise `InvalidUpdate` if ``update`` (v1 encoding) claims more client groups than it
    has bytes for (each takes at least three: struct count, client, clock)."""
    _check_count(update, 3, "update")


def check_state_vector(state_vector: bytes) -> None:
    """Raise `InvalidUpdate` if ``state_vector`` claims more entries than it has bytes for
    (each takes at least two: client, clock)."""
    _check_count(state_vector, 2, "state vector")


def _check_count(data: bytes, min_entry_bytes: int, what: str) -> None:
    reader = _Reader(data)
    try:
        count = reader.var_uint(f"{what} entry count")
    except MalformedMessage as exc:
        raise InvalidUpdate(str(exc)) from None
    if count * min_entry_bytes > reader.remaining:
        raise InvalidUpdate(f"the {what} claims {count} entries in {reader.remaining} bytes")


# -- writing -----------------------------------------------------------------------------------


def encode(message: YMessage) -> bytes:
    """The bytes of ``message``, as y-websocket writes them."""
    if isinstance(message, SyncUpdate):
        return create_update_message(message.update)
    if isinstance(message, SyncStep1):
        return bytes((MessageType.SYNC, SyncStep.STEP1)) + write_message(message.state_vector)
    if isinstance(message, SyncStep2):
        return bytes((MessageType.SYNC, SyncStep.STEP2)) + write_message(message.update)
    if isinstance(message, AwarenessMessage):
        return create_awareness_message(message.update)
    if isinstance(message, QueryAwareness):
        return write_var_uint(MessageType.QUERY_AWARENESS)
    reason = message.reason.encode()
    return bytes((MessageType.AUTH, 0)) + write_message(reason)


def encode_awareness_update(entries: tuple[AwarenessEntry, ...] | list[AwarenessEntry]) -> bytes:
    """An awareness update carrying ``entries`` (y-protocols ``encodeAwarenessUpdate``)."""
    parts = [write_var_uint(len(entries))]
    for entry in entries:
        state = json.dumps(entry.state, separators=(",", ":")).encode()
        parts += (write_var_uint(entry.client_id), write_var_uint(entry.clock))
        parts.append(write_message(state))
    return b"".join(parts)
