"""Waku relay's messages (11/WAKU2-RELAY): libp2p gossipsub v1.1 RPCs on
``/vac/waku/relay/2.0.0``, under Waku's rules: messages carry no author, sequence number or
signature (``StrictNoSign``), the data is a ``WakuMessage``, the topic a pubsub topic, and a
message's id is its deterministic hash.

An RPC holds subscription changes, published messages and control messages: GRAFT and PRUNE
(join and leave a peer's mesh for a topic), IHAVE (ids of messages seen lately, offered) and
IWANT (ids asked for). `RelayRpc.decode` keeps what a relay node acts on and bounds each list.
"""

from __future__ import annotations

from dataclasses import dataclass

from airlane.wire.errors import DecodeError
from airlane.wire.libp2p.protobuf import BYTES, VARINT, Writer, fields, text

__all__ = ["MAX_IDS", "RELAY_PROTOCOL", "RelayMessage", "RelayRpc"]

RELAY_PROTOCOL = "/vac/waku/relay/2.0.0"
MAX_ITEMS = 128
"""Subscriptions, messages or GRAFT/PRUNE entries read from one RPC at most."""
MAX_IDS = 5000
"""Message ids read from one RPC's IHAVE and IWANT entries at most (gossipsub's own bound)."""


@dataclass(frozen=True, slots=True)
class RelayMessage:
    """A published message: its pubsub topic and data (an encoded ``WakuMessage``)."""

    topic: str
    data: bytes
    signed: bool = False
    """It carried an author, sequence number or signature, which ``StrictNoSign`` forbids."""


@dataclass(frozen=True, slots=True)
class RelayRpc:
    """One gossipsub RPC."""

    subscribe: tuple[str, ...] = ()
    unsubscribe: tuple[str, ...] = ()
    messages: tuple[RelayMessage, ...] = ()
    graft: tuple[str, ...] = ()
    prune: tuple[str, ...] = ()
    ihave: tuple[tuple[str, tuple[bytes, ...]], ...] = ()
    """``(topic, message ids)`` offered."""
    iwant: tuple[bytes, ...] = ()
    """Message ids asked for."""

    def encode(self) -> bytes:
        """The Protobuf."""
        writer = Writer()
        for topic, on in [(t, True) for t in self.subscribe] + [
            (t, False) for t in self.unsubscribe
        ]:
            writer.data(1, Writer().varint(1, int(on)).string(2, topic).finish())
        for message in self.messages:
            writer.data(2, Writer().data(2, message.data).string(4, message.topic).finish())
        if self.graft or self.prune or self.ihave or self.iwant:
            control = Writer()
            for topic, ids in self.ihave:
                entry = Writer().string(1, topic)
                for message_id in ids:
                    entry.data(2, message_id)
                control.data(1, entry.finish())
            if self.iwant:
                entry = Writer()
                for message_id in self.iwant:
                    entry.data(1, message_id)
                control.data(2, entry.finish())
            for topic in self.graft:
                control.data(3, Writer().string(1, topic).finish())
            for topic in self.prune:
                control.data(4, Writer().string(1, topic).finish())
            writer.data(3, control.finish())
        return writer.finish()

    @classmethod
    def decode(cls, data: bytes) -> RelayRpc:
        """Read an RPC; `DecodeError` when malformed or over a bound (`MAX_ITEMS` in a list,
        `MAX_IDS` message ids)."""
        subscribe: list[str] = []
        unsubscribe: list[str] = []
        messages: list[RelayMessage] = []
        control = _Control()
        for number, wire_type, value in fields(data):
            if wire_type != BYTES or not isinstance(value, bytes):
                continue
            if number == 1:
                on, topic = True, None
                for inner, inner_type, item in fields(value):
                    if inner == 1 and inner_type == VARINT:
                        on = bool(item)
                    elif inner == 2 and inner_type == BYTES:
                        topic = text(item, "relay topic")
                if topic is not None:
                    (subscribe if on else unsubscribe).append(topic)
            elif number == 2:
                messages.append(_message(value))
            elif number == 3:
                control.read(value)
            lists = (len(subscribe) + len(unsubscribe), len(messages), control.entries)
            if max(lists) > MAX_ITEMS:
                raise DecodeError(f"a relay RPC with more than {MAX_ITEMS} entries in a list")
        return cls(
            tuple(subscribe),
            tuple(unsubscribe),
            tuple(messages),
            tuple(control.graft),
            tuple(control.prune),
            tuple(control.ihave),
            tuple(control.iwant),
        )


def _message(value: bytes) -> RelayMessage:
    data = b""
    topic: str | None = None
    signed = False
    for number, wire_type, item in fields(value):
        if number == 2 and wire_type == BYTES and isinstance(item, bytes):
            data = item
        elif number == 4 and wire_type == BYTES:
            topic = text(item, "relay topic")
        elif number in (1, 3, 5, 6):
            signed = True
    if topic is None:
        raise DecodeError("a relayed message without its topic")
    return RelayMessage(topic, data, signed)


class _Control:
    """A ControlMessage as it is read, with its bounds."""

    def __init__(self) -> None:
        self.graft: list[str] = []
        self.prune: list[str] = []
        self.ihave: list[tuple[str, tuple[bytes, ...]]] = []
        self.iwant: list[bytes] = []
        self.ids = 0

    @property
    def entries(self) -> int:
        return len(self.graft) + len(self.prune) + len(self.ihave)

    def read(self, value: bytes) -> None:
        for number, wire_type, item in fields(value):
            if wire_type != BYTES or not isinstance(item, bytes):
                continue
            if number in (3, 4):
                for inner, inner_type, topic in fields(item):
                    if inner == 1 and inner_type == BYTES:
                        (self.graft if number == 3 else self.prune).append(text(topic, "topic"))
            elif number == 1:
                topic_name = ""
                ids: list[bytes] = []
                for inner, inner_type, part in fields(item):
                    if inner == 1 and inner_type == BYTES:
                        topic_name = text(part, "topic")
                    elif inner == 2 and inner_type == BYTES and isinstance(part, bytes):
                        ids.append(part)
                self._count(len(ids))
                self.ihave.append((topic_name, tuple(ids)))
            elif number == 2:
                ids = [
                    part
                    for inner, inner_type, part in fields(item)
                    if inner == 1 and inner_type == BYTES and isinstance(part, bytes)
                ]
                self._count(len(ids))
                self.iwant.extend(ids)

    def _count(self, more: int) -> None:
        self.ids += more
        if self.ids > MAX_IDS:
            raise DecodeError(f"a relay RPC offering or asking for over {MAX_IDS} message ids")
