"""Fuzz target: MQTT's `PacketReader` and `MQTTClientConnection` on arbitrary bytes.

Invariants, for every input, in MQTT 3.1.1 and 5.0:

1. `PacketReader.packets` raises nothing but `MQTTDecodeError`; fed whole or in two pieces
   (split at an input-derived point) it reaches the same verdict: the same packets, or an
   error; every packet it returns re-encodes to bytes that decode to a packet with the same
   encoding; it never holds ``MAX_PACKET`` bytes or more after a call.
2. `MQTTClientConnection.receive_data`, `handle_timer`, `ack` and `data_to_send` raise nothing,
   whatever the broker sends, before or after a valid CONNACK: a violation becomes one
   `ConnectionClosed`, the last event, and a closed connection returns no events and no timer.
3. The client's bookkeeping holds: `PublishDone` only for a message it published and had not
   settled yet, `Subscribed` only for a SUBSCRIBE it sent, at most once each; it never has
   more QoS 1/2 messages in flight than the broker's receive maximum; every byte it writes
   reads back as well-formed packets.

The connection is fed the raw input (after a CONNACK, and before one), and the same input read
as packet fields and encoded as valid packets after a CONNACK, so that the fuzzer reaches the
state machine: the QoS 1 and 2 flows both ways, SUBACK, UNSUBACK, keep-alive and DISCONNECT.

    .venv/bin/python fuzz/mqtt_client.py -runs=100000
    .venv/bin/python fuzz/mqtt_client.py -max_total_time=600 corpus/mqtt

Importable without atheris (tests/wire/test_mqtt_fuzz_target.py runs `TestOneInput` on a
hypothesis corpus); running it needs ``pip install -e '.[fuzz]'``.
"""

from __future__ import annotations

import contextlib
import sys

try:
    import atheris
except ImportError:  # the target stays importable (and testable) without the fuzzer
    atheris = None

_instrumented = (
    atheris.instrument_imports(include=["airlane.wire.mqtt"])
    if atheris is not None
    else contextlib.nullcontext()
)
with _instrumented:
    from airlane.wire.mqtt.connection import (
        ClientSession,
        ConnectionClosed,
        Event,
        MessageReceived,
        MQTTClientConnection,
        PublishDone,
        Subscribed,
    )
    from airlane.wire.mqtt.packets import (
        MQTT_5,
        MQTT_311,
        Ack,
        Auth,
        ConnAck,
        Connect,
        Disconnect,
        Packet,
        PacketReader,
        PacketType,
        PingReq,
        PingResp,
        Publish,
        SubAck,
        Subscription,
        UnsubAck,
        decode_packet,
        encode_packet,
    )
    from airlane.wire.mqtt.primitives import MQTTDecodeError
    from airlane.wire.mqtt.properties import Properties

# Small limits, so that the fuzzer reaches every one of them with short inputs.
MAX_PACKET = 256
RECEIVE_MAXIMUM = 3
KEEPALIVE = 10
VERSIONS = (MQTT_311, MQTT_5)
_IDS = (1, 2, 3, 4, 5, 50, 65535)
_TOPICS = ("a", "a/b", "$SYS/x", "")
_CODES = (0x00, 0x10, 0x80, 0x92)
_KINDS = (
    PacketType.PUBLISH,
    PacketType.PUBACK,
    PacketType.PUBREC,
    PacketType.PUBREL,
    PacketType.PUBCOMP,
    PacketType.SUBACK,
    PacketType.UNSUBACK,
    PacketType.PINGRESP,
    PacketType.DISCONNECT,
    PacketType.CONNACK,
    PacketType.AUTH,
    PacketType.PINGREQ,
)
_MAX_PACKETS = 48


def TestOneInput(data: bytes) -> None:  # the name atheris and libFuzzer expect
    """Check every invariant of the module docstring on ``data``."""
    split = int.from_bytes(data[:2], "big") % (len(data) + 1) if data else 0
    for version in VERSIONS:
        check_reader(data, split, version)
        check_connection(data, split, version, connack=True)
        check_connection(data, split, version, connack=False)
        framed = structured_packets(data, version)
        check_connection(framed, split % (len(framed) + 1), version, connack=True)


# -- the reader --------------------------------------------------------------------------------


def check_reader(data: bytes, split: int, version: int) -> None:
    """Invariant 1."""
    whole = _read([data], version)
    pieces = _read([data[:split], data[split:]], version)
    assert (whole[1] is None) == (pieces[1] is None), (whole, pieces)
    if whole[1] is None:
        assert whole[0] == pieces[0]
    for packet in whole[0]:
        encoded = encode_packet(packet, version)
        again = _decode(encoded, version)
        assert encode_packet(again, version) == encoded, (packet, again)


def _read(chunks: list[bytes], version: int) -> tuple[list[Packet], str | None]:
    reader = PacketReader(MAX_PACKET, version)
    packets: list[Packet] = []
    for chunk in chunks:
        reader.feed(chunk)
        try:
            packets += reader.packets()
        except MQTTDecodeError as exc:
            return packets, str(exc)
        assert len(reader._buffer) < MAX_PACKET
    return packets, None


def _decode(data: bytes, version: int) -> Packet:
    header = 2
    while data[header - 1] & 0x80:
        header += 1
    return decode_packet(data[0], data[header:], version)


# -- the connection ---------------------------------------------------------------------------


class _Harness:
    """A client connection and what the layer above it knows: the messages it published and
    the SUBSCRIBEs it sent that are not settled yet, and a reader of the client's output."""

    def __init__(self, version: int, *, connack: bool) -> None:
        connect = Connect("fuzz", KEEPALIVE, False, version=version)
        self.version = version
        self.conn = MQTTClientConnection(connect, ClientSession(), max_packet=MAX_PACKET)
        self.sent = PacketReader(1 << 20, version)
        self.published: set[int] = set()
        self.subscribing: set[int] = set()
        self.events: list[Event] = []
        self.flush()
        if connack:
            props = Properties(receive_maximum=RECEIVE_MAXIMUM) if version == MQTT_5 else None
            self.events += self.conn.receive_data(encode_packet(ConnAck(False, 0, props), version))
            if version != MQTT_5:
                self.conn.receive_maximum = RECEIVE_MAXIMUM  # 3.1.1 has no receive maximum
            self.publish(1)
            self.publish(2)
            self.publish(0)
            self.subscribing.add(self.conn.subscribe([Subscription("a/#", 2)]))
            self.conn.unsubscribe(["x"])
            self.flush()

    def publish(self, qos: int) -> None:
        if qos and not self.conn.can_publish:
            return
        packet_id = self.conn.publish("t", b"p", qos=qos)
        if packet_id is not None:
            assert packet_id not in self.published
            self.published.add(packet_id)

    def flush(self) -> None:
        """Invariant 3: what the client writes is well formed."""
        self.sent.feed(self.conn.data_to_send())
        self.sent.packets()

    def handle(self, events: list[Event]) -> None:
        """Check the events and answer as the layer above would: ack every message, publish
        again when a message is settled."""
        self.events += events
        for event in events:
            if isinstance(event, PublishDone):
                assert event.packet_id in self.published, event
                self.published.discard(event.packet_id)
                if not self.conn.closed:
                    self.publish(event.packet_id % 3)
            elif isinstance(event, Subscribed):
                assert event.packet_id in self.subscribing, event
                self.subscribing.discard(event.packet_id)
            elif isinstance(event, MessageReceived):
                refuse = (event.message.packet_id or 0) % 5 == 4
                self.conn.ack(event.message, 0x80 if refuse else 0)
        self.flush()
        # The connection's private state is what the bounds are about; a harness may look.
        session = self.conn.session
        assert set(session.outgoing) | session.releasing == self.published
        assert self.conn.in_flight <= self.conn.receive_maximum
        assert len(self.conn._reader._buffer) < MAX_PACKET


def check_connection(data: bytes, split: int, version: int, *, connack: bool) -> None:
    """Invariants 2 and 3: ``data`` from the broker in two pieces, timers between."""
    harness = _Harness(version, connack=connack)
    conn = harness.conn
    for now, chunk in ((1.0, data[:split]), (2.0, data[split:])):
        harness.handle(conn.receive_data(chunk, now))
        timer = conn.get_timer()
        if timer is not None:
            harness.handle(conn.handle_timer(max(timer, now)))
    for now in (100.0, 200.0):  # keep-alive: a PINGREQ, then silence closes the connection
        harness.handle(conn.handle_timer(now))
    events = harness.events
    closed = [event for event in events if isinstance(event, ConnectionClosed)]
    assert len(closed) <= 1, events
    if not closed:  # a CONNACK in the input turned the keep-alive off
        assert conn.keepalive == 0 and not conn.closed
        conn.disconnect()
        harness.flush()
    else:
        assert events[-1] is closed[0] and conn.closed
    assert conn.receive_data(data, 300.0) == []
    assert conn.handle_timer(400.0) == []
    assert conn.get_timer() is None


def structured_packets(data: bytes, version: int) -> bytes:
    """``data`` read as packet fields (kind, packet id, code, length: a byte each, then the
    body) and encoded as valid packets for ``version``; at most `_MAX_PACKETS` packets."""
    out: list[bytes] = []
    offset = 0
    while offset + 4 <= len(data) and len(out) < _MAX_PACKETS:
        kind, ident, code, length = data[offset : offset + 4]
        body = data[offset + 4 : offset + 4 + length % 64]
        offset += 4 + length % 64
        packet_id = _IDS[ident % len(_IDS)]
        reason = _CODES[code % len(_CODES)]
        props = None
        if version == MQTT_5:
            props = Properties()
            if code & 4:
                props = Properties(reason_string="r", user_properties=(("k", "v"),))
        packet: Packet
        match _KINDS[kind % len(_KINDS)]:
            case PacketType.PUBLISH:
                qos = code % 3
                packet = Publish(_TOPICS[code >> 6], body, qos, bool(code & 8), bool(code & 16),
                                 packet_id if qos else None, props)  # fmt: skip
            case PacketType.SUBACK:
                packet = SubAck(packet_id, tuple(body[:3]) or (reason,), props)
            case PacketType.UNSUBACK:
                packet = UnsubAck(packet_id, tuple(body[:3]) if version == MQTT_5 else (), props)
            case PacketType.PINGRESP:
                packet = PingResp()
            case PacketType.PINGREQ:
                packet = PingReq()
            case PacketType.DISCONNECT:
                packet = Disconnect(reason, props)
            case PacketType.CONNACK:
                packet = ConnAck(bool(code & 8), reason, props)
            case PacketType.AUTH:
                packet = Auth(0x18, props)
            case ack_type:
                packet = Ack(ack_type, packet_id, reason, props)
        try:
            out.append(encode_packet(packet, version))
        except ValueError:
            continue
    return b"".join(out)


def main() -> None:
    """Run the fuzzer (libFuzzer's flags, e.g. ``-runs=100000``, pass through)."""
    if atheris is None:
        sys.exit("atheris is not installed: pip install -e '.[fuzz]'")
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
