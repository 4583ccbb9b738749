"""Waku relay's messages (11/WAKU2-RELAY): libp2p gossipsub v1.1 RPCs on
``/vac/waku/relay/2.0.0``, under Waku's rules: messages carry no author, sequence number or
signature (``StrictNoSign``), the data is a ``WakuMessage``, the topic a pubsub topic, and a
message's id is its deterministic hash.

An RPC holds subscription changes, published messages and control messages (GRAFT, PRUNE,
IHAVE, IWANT). `RelayRpc.decode` keeps what a relay node acts on and bounds each list.
"""

from __future__ import annotations

from dataclasses import dataclass

from airlane.wire.errors import DecodeError
from airlane.wire.libp2p.protobuf import BYTES, VARINT, Writer, fields, text

__all__ = ["RELAY_PROTOCOL", "RelayMessage", "RelayRpc"]

RELAY_PROTOCOL = "/vac/waku/relay/2.0.0"
MAX_ITEMS = 128
"""Subscriptions, messages or control entries read from one RPC at most."""


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

    def encode(self) -> bytes:
        """The Protobuf."""
        writer = Writer()
        for topic, on in [(t, True) for t in self.subscribe] + [
            (t, False) for t in self.unsubscribe
        ]:
            writer.data(1, Writer().varint(1, int(on)).string(2, topic).finish())
        for message in self.messages:
            writer.data(2, Writer().data(2, message.data).string(4, message.topic).finish())
        if self.graft or self.prune:
            control = Writer()
            for topic in self.graft:
                control.data(3, Writer().string(1, topic).finish())
            for topic in self.prune:
                control.data(4, Writer().string(1, topic).finish())
            writer.data(3, control.finish())
        return writer.finish()

    @classmethod
    def decode(cls, data: bytes) -> RelayRpc:
        """Read an RPC; `DecodeError` when malformed or over `MAX_ITEMS` in a list."""
        subscribe: list[str] = []
        unsubscribe: list[str] = []
        messages: list[RelayMessage] = []
        graft: list[str] = []
        prune: list[str] = []
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
                _control(value, graft, prune)
            if max(len(subscribe) + len(unsubscribe), len(messages), len(graft) + len(prune)) > (
                MAX_ITEMS
            ):
                raise DecodeError(f"a relay RPC with more than {MAX_ITEMS} entries in a list")
        return cls(
            tuple(subscribe), tuple(unsubscribe), tuple(messages), tuple(graft), tuple(prune)
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


def _control(value: bytes, graft: list[str], prune: list[str]) -> None:
    for number, wire_type, item in fields(value):
        if number in (3, 4) and wire_type == BYTES and isinstance(item, bytes):
            for inner, inner_type, topic in fields(item):
                if inner == 1 and inner_type == BYTES:
                    (graft if number == 3 else prune).append(text(topic, "relay topic"))
