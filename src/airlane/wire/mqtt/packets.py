"""MQTT control packets, versions 3.1.1 and 5.0: encode and decode, sans-I/O.

Every packet is a fixed header (a byte of type and flags, then the remaining length as a
variable byte integer) followed by that many bytes::

    | type(4) flags(4) | remaining length (1-4 bytes) | variable header | payload |

Each packet type is a frozen dataclass; `encode_packet(packet, version)` gives its bytes and
`decode_packet(first_byte, body, version)` the packet back. Both directions are implemented
for every type (a client only sends some of them), so the codec round-trips and a test broker
can be built from it. `PacketReader` cuts a byte stream into packets, refusing one longer than
its limit before buffering it. Anything malformed is an `MQTTDecodeError` carrying the MQTT 5
reason code to disconnect with (0x81 malformed packet, 0x82 protocol error, 0x95 packet too
large).
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from airlane.wire.mqtt.primitives import (
    MQTTDecodeError,
    Reader,
    encode_binary,
    encode_string,
    encode_varint,
)
from airlane.wire.mqtt.properties import Properties, decode_properties, encode_properties

__all__ = [
    "MQTT_5",
    "MQTT_311",
    "Ack",
    "Auth",
    "ConnAck",
    "Connect",
    "Disconnect",
    "Packet",
    "PacketReader",
    "PacketTooLarge",
    "PacketType",
    "PingReq",
    "PingResp",
    "Publish",
    "SubAck",
    "Subscribe",
    "Subscription",
    "UnsubAck",
    "Unsubscribe",
    "Will",
    "decode_packet",
    "encode_packet",
]

MQTT_311: Final = 4
"""The protocol level byte of MQTT 3.1.1."""
MQTT_5: Final = 5
"""The protocol level byte of MQTT 5.0."""

_U16 = struct.Struct("!H")


class PacketType(enum.IntEnum):
    """The control packet types (the fixed header's high four bits)."""

    CONNECT = 1
    CONNACK = 2
    PUBLISH = 3
    PUBACK = 4
    PUBREC = 5
    PUBREL = 6
    PUBCOMP = 7
    SUBSCRIBE = 8
    SUBACK = 9
    UNSUBSCRIBE = 10
    UNSUBACK = 11
    PINGREQ = 12
    PINGRESP = 13
    DISCONNECT = 14
    AUTH = 15


# The fixed header flags every type but PUBLISH must carry (section 2.1.3).
_FLAGS: Final[dict[PacketType, int]] = {t: 0 for t in PacketType if t is not PacketType.PUBLISH}
_FLAGS.update({PacketType.PUBREL: 2, PacketType.SUBSCRIBE: 2, PacketType.UNSUBSCRIBE: 2})


class PacketTooLarge(MQTTDecodeError):
    """A packet longer than the reader's limit (MQTT 5 reason 0x95)."""


@dataclass(frozen=True, slots=True)
class Will:
    """The message the broker publishes if the client goes away without DISCONNECT."""

    topic: str
    payload: bytes
    qos: int = 0
    retain: bool = False
    properties: Properties | None = None


@dataclass(frozen=True, slots=True)
class Connect:
    """CONNECT: the first packet a client sends."""

    client_id: str
    keepalive: int = 60
    clean_start: bool = True
    """MQTT 5's Clean Start; MQTT 3.1.1's Clean Session."""
    username: str | None = None
    password: bytes | None = None
    will: Will | None = None
    properties: Properties | None = None
    version: int = MQTT_5


@dataclass(frozen=True, slots=True)
class ConnAck:
    """CONNACK: the broker's answer to CONNECT (reason code 0: accepted)."""

    session_present: bool = False
    reason_code: int = 0
    properties: Properties | None = None


@dataclass(frozen=True, slots=True)
class Publish:
    """PUBLISH: an application message (``packet_id`` is None at QoS 0)."""

    topic: str
    payload: bytes
    qos: int = 0
    retain: bool = False
    dup: bool = False
    packet_id: int | None = None
    properties: Properties | None = None
    oversize: int = 0
    """Not 0: the message was larger than the reader takes, and ``payload`` (empty) and
    ``properties`` were skipped; its payload's size in bytes (see `PacketReader`)."""


@dataclass(frozen=True, slots=True)
class Ack:
    """PUBACK, PUBREC, PUBREL or PUBCOMP (``type``) for ``packet_id``."""

    type: PacketType
    packet_id: int
    reason_code: int = 0
    properties: Properties | None = None


@dataclass(frozen=True, slots=True)
class Subscription:
    """One topic filter of a SUBSCRIBE, with its options."""

    filter: str
    qos: int = 0
    no_local: bool = False
    retain_as_published: bool = False
    retain_handling: int = 0


@dataclass(frozen=True, slots=True)
class Subscribe:
    """SUBSCRIBE: one or more topic filters."""

    packet_id: int
    subscriptions: tuple[Subscription, ...]
    properties: Properties | None = None


@dataclass(frozen=True, slots=True)
class SubAck:
    """SUBACK: a reason code (or granted QoS) per filter, in order."""

    packet_id: int
    reason_codes: tuple[int, ...]
    properties: Properties | None = None


@dataclass(frozen=True, slots=True)
class Unsubscribe:
    """UNSUBSCRIBE: one or more topic filters."""

    packet_id: int
    filters: tuple[str, ...]
    properties: Properties | None = None


@dataclass(frozen=True, slots=True)
class UnsubAck:
    """UNSUBACK (MQTT 3.1.1 carries no reason codes)."""

    packet_id: int
    reason_codes: tuple[int, ...] = ()
    properties: Properties | None = None


@dataclass(frozen=True, slots=True)
class PingReq:
    """PINGREQ."""


@dataclass(frozen=True, slots=True)
class PingResp:
    """PINGRESP."""


@dataclass(frozen=True, slots=True)
class Disconnect:
    """DISCONNECT, from either side in MQTT 5 (0: normal)."""

    reason_code: int = 0
    properties: Properties | None = None


@dataclass(frozen=True, slots=True)
class Auth:
    """AUTH (MQTT 5 enhanced authentication)."""

    reason_code: int = 0
    properties: Properties | None = None


Packet = (
    Connect
    | ConnAck
    | Publish
    | Ack
    | Subscribe
    | SubAck
    | Unsubscribe
    | UnsubAck
    | PingReq
    | PingResp
    | Disconnect
    | Auth
)


# -- encoding ---------------------------------------------------------------------------------


def _frame(kind: PacketType, flags: int, body: bytes) -> bytes:
    return bytes((kind << 4 | flags,)) + encode_varint(len(body)) + body


def _props(properties: Properties | None, version: int) -> bytes:
    return encode_properties(properties) if version == MQTT_5 else b""


def _check_qos(qos: int) -> None:
    if qos not in (0, 1, 2):
        raise ValueError(f"QoS must be 0, 1 or 2, not {qos!r}")


def _encode_connect(p: Connect) -> bytes:
    flags = 0x02 if p.clean_start else 0
    payload = encode_string(p.client_id)
    if p.will is not None:
        _check_qos(p.will.qos)
        flags |= 0x04 | p.will.qos << 3 | (0x20 if p.will.retain else 0)
        payload += _props(p.will.properties, p.version)
        payload += encode_string(p.will.topic) + encode_binary(p.will.payload)
    if p.username is not None:
        flags |= 0x80
        payload += encode_string(p.username)
    if p.password is not None:
        flags |= 0x40
        payload += encode_binary(p.password)
    header = encode_string("MQTT") + bytes((p.version, flags)) + _U16.pack(p.keepalive)
    return _frame(PacketType.CONNECT, 0, header + _props(p.properties, p.version) + payload)


def _encode_reasoned(
    kind: PacketType, head: bytes, code: int, props: Properties | None, version: int
) -> bytes:
    """A packet whose MQTT 5 form may end early when the reason is 0 and there are no
    properties (section 3.4.2.1)."""
    if version != MQTT_5 or (code == 0 and not props):
        return _frame(kind, _FLAGS[kind], head)
    return _frame(kind, _FLAGS[kind], head + bytes((code,)) + encode_properties(props))


def encode_packet(packet: Packet, version: int = MQTT_5) -> bytes:
    """The bytes of ``packet`` in protocol ``version`` (`MQTT_311` or `MQTT_5`)."""
    if isinstance(packet, Publish):
        _check_qos(packet.qos)
        flags = packet.qos << 1 | (8 if packet.dup else 0) | (1 if packet.retain else 0)
        head = encode_string(packet.topic)
        if packet.qos:
            if packet.packet_id is None:
                raise ValueError("a QoS 1 or 2 PUBLISH needs a packet id")
            head += _U16.pack(packet.packet_id)
        body = head + _props(packet.properties, version) + packet.payload
        return _frame(PacketType.PUBLISH, flags, body)
    if isinstance(packet, Ack):
        return _encode_reasoned(
            packet.type, _U16.pack(packet.packet_id), packet.reason_code, packet.properties, version
        )
    if isinstance(packet, Connect):
        return _encode_connect(packet)
    if isinstance(packet, ConnAck):
        head = bytes((1 if packet.session_present else 0, packet.reason_code))
        return _frame(PacketType.CONNACK, 0, head + _props(packet.properties, version))
    if isinstance(packet, Subscribe):
        entries = bytearray(_U16.pack(packet.packet_id) + _props(packet.properties, version))
        for sub in packet.subscriptions:
            _check_qos(sub.qos)
            options = sub.qos
            if version == MQTT_5:
                options |= (4 if sub.no_local else 0) | (8 if sub.retain_as_published else 0)
                options |= sub.retain_handling << 4
            entries += encode_string(sub.filter) + bytes((options,))
        return _frame(PacketType.SUBSCRIBE, 2, bytes(entries))
    if isinstance(packet, SubAck):
        head = _U16.pack(packet.packet_id) + _props(packet.properties, version)
        return _frame(PacketType.SUBACK, 0, head + bytes(packet.reason_codes))
    if isinstance(packet, Unsubscribe):
        body = _U16.pack(packet.packet_id) + _props(packet.properties, version)
        body += b"".join(encode_string(f) for f in packet.filters)
        return _frame(PacketType.UNSUBSCRIBE, 2, body)
    if isinstance(packet, UnsubAck):
        body = _U16.pack(packet.packet_id)
        if version == MQTT_5:
            body += encode_properties(packet.properties) + bytes(packet.reason_codes)
        return _frame(PacketType.UNSUBACK, 0, body)
    if isinstance(packet, PingReq):
        return b"\xc0\x00"
    if isinstance(packet, PingResp):
        return b"\xd0\x00"
    if isinstance(packet, Disconnect):
        return _encode_reasoned(
            PacketType.DISCONNECT, b"", packet.reason_code, packet.properties, version
        )
    return _encode_reasoned(PacketType.AUTH, b"", packet.reason_code, packet.properties, version)


# -- decoding ---------------------------------------------------------------------------------


def _decode_props(reader: Reader, version: int) -> Properties | None:
    return decode_properties(reader) if version == MQTT_5 else None


def _qos(value: int) -> int:
    if value > 2:
        raise MQTTDecodeError("QoS 3 is not a QoS")
    return value


def _decode_connect(r: Reader) -> Connect:
    if r.string() != "MQTT":
        raise MQTTDecodeError("CONNECT does not name the MQTT protocol")
    version = r.u8()
    if version not in (MQTT_311, MQTT_5):
        raise MQTTDecodeError(f"protocol level {version} is neither 3.1.1 nor 5")
    flags = r.u8()
    if flags & 1:
        raise MQTTDecodeError("CONNECT's reserved flag is set")
    keepalive = r.u16()
    properties = _decode_props(r, version)
    client_id = r.string()
    will = None
    if flags & 0x04:
        will_props = _decode_props(r, version)
        will = Will(r.string(), r.binary(), _qos(flags >> 3 & 3), bool(flags & 0x20), will_props)
    username = r.string() if flags & 0x80 else None
    password = r.binary() if flags & 0x40 else None
    return Connect(
        client_id, keepalive, bool(flags & 2), username, password, will, properties, version
    )


def _decode_reasoned(r: Reader, version: int) -> tuple[int, Properties | None]:
    if version != MQTT_5 or not r.remaining:
        return 0, None
    code = r.u8()
    return code, decode_properties(r) if r.remaining else None


def _decode_publish(r: Reader, flags: int, version: int) -> Packet:
    qos = _qos(flags >> 1 & 3)
    topic = r.string()
    packet_id = r.u16() if qos else None
    if packet_id == 0:
        raise MQTTDecodeError("packet id 0")
    props = _decode_props(r, version)
    return Publish(topic, r.rest(), qos, bool(flags & 1), bool(flags & 8), packet_id, props)


def _ack_decoder(kind: PacketType) -> Callable[[Reader, int, int], Packet]:
    def decode(r: Reader, flags: int, version: int) -> Packet:
        packet_id = r.u16()
        code, props = _decode_reasoned(r, version)
        return Ack(kind, packet_id, code, props)

    return decode


def _decode_connack(r: Reader, flags: int, version: int) -> Packet:
    ack_flags = r.u8()
    if ack_flags & 0xFE:
        raise MQTTDecodeError("CONNACK's reserved flags are set")
    return ConnAck(bool(ack_flags & 1), r.u8(), _decode_props(r, version))


def _decode_subscribe(r: Reader, flags: int, version: int) -> Packet:
    packet_id = r.u16()
    props = _decode_props(r, version)
    subs = []
    while r.remaining:
        name = r.string()
        options = r.u8()
        subs.append(
            Subscription(
                name, _qos(options & 3), bool(options & 4), bool(options & 8), options >> 4 & 3
            )
        )
    if not subs:
        raise MQTTDecodeError("SUBSCRIBE without a topic filter")
    return Subscribe(packet_id, tuple(subs), props)


def _decode_suback(r: Reader, flags: int, version: int) -> Packet:
    packet_id = r.u16()
    props = _decode_props(r, version)
    return SubAck(packet_id, tuple(r.rest()), props)


def _decode_unsubscribe(r: Reader, flags: int, version: int) -> Packet:
    packet_id = r.u16()
    props = _decode_props(r, version)
    filters = []
    while r.remaining:
        filters.append(r.string())
    if not filters:
        raise MQTTDecodeError("UNSUBSCRIBE without a topic filter")
    return Unsubscribe(packet_id, tuple(filters), props)


def _decode_unsuback(r: Reader, flags: int, version: int) -> Packet:
    packet_id = r.u16()
    if version != MQTT_5:
        return UnsubAck(packet_id)  # 3.1.1: the packet id only; more is bytes past the end
    props = _decode_props(r, version)
    return UnsubAck(packet_id, tuple(r.rest()), props)


def _decode_disconnect(r: Reader, flags: int, version: int) -> Packet:
    return Disconnect(*_decode_reasoned(r, version))


def _decode_auth(r: Reader, flags: int, version: int) -> Packet:
    if version != MQTT_5:
        raise MQTTDecodeError("AUTH is an MQTT 5 packet")
    return Auth(*_decode_reasoned(r, version))


_DECODERS: Final[dict[PacketType, Callable[[Reader, int, int], Packet]]] = {
    PacketType.CONNECT: lambda r, flags, version: _decode_connect(r),
    PacketType.CONNACK: _decode_connack,
    PacketType.PUBLISH: _decode_publish,
    PacketType.PUBACK: _ack_decoder(PacketType.PUBACK),
    PacketType.PUBREC: _ack_decoder(PacketType.PUBREC),
    PacketType.PUBREL: _ack_decoder(PacketType.PUBREL),
    PacketType.PUBCOMP: _ack_decoder(PacketType.PUBCOMP),
    PacketType.SUBSCRIBE: _decode_subscribe,
    PacketType.SUBACK: _decode_suback,
    PacketType.UNSUBSCRIBE: _decode_unsubscribe,
    PacketType.UNSUBACK: _decode_unsuback,
    PacketType.PINGREQ: lambda r, flags, version: PingReq(),
    PacketType.PINGRESP: lambda r, flags, version: PingResp(),
    PacketType.DISCONNECT: _decode_disconnect,
    PacketType.AUTH: _decode_auth,
}


def decode_packet(first: int, body: bytes, version: int = MQTT_5) -> Packet:
    """The packet whose fixed header's first byte is ``first`` and whose remaining bytes are
    ``body``; `MQTTDecodeError` if it is not well formed."""
    try:
        kind = PacketType(first >> 4)
    except ValueError:
        raise MQTTDecodeError("packet type 0 is reserved") from None
    flags = first & 0x0F
    if kind is not PacketType.PUBLISH and flags != _FLAGS[kind]:
        raise MQTTDecodeError(f"{kind.name} with fixed header flags {flags:#x}")
    r = Reader(body)
    packet = _DECODERS[kind](r, flags, version)
    if r.remaining:
        raise MQTTDecodeError(f"{kind.name} has {r.remaining} bytes past its end")
    return packet


class PacketReader:
    """Cuts a byte stream into packets (`feed`, then `packets`), at most ``max_packet`` bytes
    each (fixed header included): a longer one is refused as soon as its length is read.

    Except an MQTT 3.1.1 PUBLISH: a 3.1.1 broker cannot be told the limit, and a refusal ends
    the connection, after which the broker sends the same message again, forever. Such a
    message comes out as a `Publish` with its topic, QoS and packet id, an empty payload and
    ``oversize`` set, and its remaining bytes are skipped as they arrive, so that the caller
    can refuse it and acknowledge it. (An MQTT 5 broker is told the limit: a larger packet
    from it is a protocol error.)"""

    def __init__(self, max_packet: int, version: int = MQTT_5) -> None:
        self.max_packet = max_packet
        self.version = version
        self._buffer = bytearray()
        self._skip = 0
        """Bytes of an oversized PUBLISH still to come and be dropped."""

    def feed(self, data: bytes) -> None:
        """Add bytes received."""
        if self._skip:
            dropped = min(self._skip, len(data))
            self._skip -= dropped
            data = data[dropped:]
        self._buffer += data

    def packets(self) -> list[Packet]:
        """Every complete packet received so far, in order; `MQTTDecodeError` for a malformed
        one (the stream cannot be read past it)."""
        out: list[Packet] = []
        buf = self._buffer
        pos = 0
        try:
            while True:
                cut = self._cut(pos)
                if cut is None:
                    break
                header, length = cut
                end = pos + header + length
                if header + length > self.max_packet:
                    head = self._oversized(pos, header, length)
                    if head is None:
                        break
                    out.append(head)
                    self._skip = max(0, end - len(buf))
                    pos = min(end, len(buf))
                    continue
                body = bytes(buf[pos + header : end])
                out.append(decode_packet(buf[pos], body, self.version))
                pos = end
        except MQTTDecodeError:
            self._buffer.clear()
            raise
        del buf[:pos]
        return out

    def _oversized(self, pos: int, header: int, length: int) -> Publish | None:
        """The head of the oversized 3.1.1 PUBLISH at ``pos``; None until it has arrived."""
        buf = self._buffer
        first = buf[pos]
        qos = _qos(first >> 1 & 3)
        start = pos + header
        if len(buf) < start + 2:
            return None
        size = 2 + int.from_bytes(buf[start : start + 2], "big") + (2 if qos else 0)
        if size > length:
            raise MQTTDecodeError("a PUBLISH shorter than its topic")
        if len(buf) < start + size:
            return None
        r = Reader(bytes(buf[start : start + size]))
        topic = r.string()
        packet_id = r.u16() if qos else None
        if packet_id == 0:
            raise MQTTDecodeError("packet id 0")
        return Publish(
            topic, b"", qos, bool(first & 1), bool(first & 8), packet_id, oversize=length - size
        )

    def _cut(self, pos: int) -> tuple[int, int] | None:
        """(fixed header length, remaining length) of the whole packet at ``pos``; None while
        it has not all arrived (an oversized 3.1.1 PUBLISH: once its length is read)."""
        buf = self._buffer
        length = 0
        for i in range(4):
            if pos + 1 + i >= len(buf):
                return None
            byte = buf[pos + 1 + i]
            length |= (byte & 0x7F) << (7 * i)
            if not byte & 0x80:
                break
        else:
            raise MQTTDecodeError("a remaining length longer than four bytes")
        header = 2 + i
        if header + length > self.max_packet:
            if self.version != MQTT_5 and buf[pos] >> 4 == PacketType.PUBLISH:
                return header, length
            raise PacketTooLarge(
                f"a packet of {header + length} bytes is larger than the limit ({self.max_packet})"
            )
        if len(buf) - pos < header + length:
            return None
        return header, length
