"""The MQTT codec (`airlane.wire.mqtt.packets`, `properties`, `primitives`), without sockets.

Every packet type round-trips in MQTT 3.1.1 and 5.0 (AUTH and properties are 5 only); byte
fixtures worked out by hand from the OASIS specifications (MQTT 3.1.1 and 5.0, chapters 1-3)
pin the encoding; `PacketReader` cuts the same packets out of a stream however it is split;
anything malformed is an `MQTTDecodeError` and never another exception.
"""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

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
    PacketTooLarge,
    PacketType,
    PingReq,
    PingResp,
    Publish,
    SubAck,
    Subscribe,
    Subscription,
    UnsubAck,
    Unsubscribe,
    Will,
    decode_packet,
    encode_packet,
)
from airlane.wire.mqtt.primitives import (
    MAX_VARINT,
    MQTTDecodeError,
    Reader,
    encode_binary,
    encode_string,
    encode_varint,
)
from airlane.wire.mqtt.properties import Properties, decode_properties, encode_properties

from .chunking import PROPERTY, bytewise, split_at

VERSIONS = [MQTT_311, MQTT_5]


def decode_one(data: bytes, version: int) -> Packet:
    """The single packet ``data`` holds, read by a `PacketReader` (which checks the fixed
    header) and cross-checked with `decode_packet` on the body."""
    reader = PacketReader(1 << 24, version)
    reader.feed(data)
    packets = reader.packets()
    assert len(packets) == 1, packets
    header = 2
    while data[header - 1] & 0x80:
        header += 1
    assert decode_packet(data[0], data[header:], version) == packets[0]
    return packets[0]


def roundtrip(packet: Packet, version: int) -> Packet:
    data = encode_packet(packet, version)
    again = decode_one(data, version)
    assert encode_packet(again, version) == data
    return again


def props(version: int, properties: Properties) -> Properties | None:
    """``properties`` under MQTT 5; None (no properties) under 3.1.1."""
    return properties if version == MQTT_5 else None


# -- round trips: every packet type ------------------------------------------------------------

EVERY_PROPERTY = Properties(
    payload_format_indicator=1,
    message_expiry_interval=0xFFFF_FFFF,
    content_type="application/json",
    response_topic="reply/here",
    correlation_data=b"\x00\x01\xff",
    subscription_identifiers=(1, 268_435_455),
    session_expiry_interval=3600,
    assigned_client_identifier="auto-1",
    server_keep_alive=30,
    authentication_method="SCRAM-SHA-1",
    authentication_data=b"\x01\x02",
    request_problem_information=0,
    will_delay_interval=5,
    request_response_information=1,
    response_information="resp",
    server_reference="other:1883",
    reason_string="why",
    receive_maximum=20,
    topic_alias_maximum=10,
    topic_alias=3,
    maximum_qos=1,
    retain_available=0,
    user_properties=(("k", "v"), ("k", "v2"), ("é", "")),
    maximum_packet_size=1 << 20,
    wildcard_subscription_available=1,
    subscription_identifier_available=0,
    shared_subscription_available=1,
)


def every_packet(version: int) -> list[Packet]:
    p5 = props(version, Properties(reason_string="r", user_properties=(("a", "b"),)))
    empty = props(version, Properties())
    will = Will("last/will", b"gone", 1, True, props(version, Properties(will_delay_interval=9)))
    packets: list[Packet] = [
        Connect("a", 60, True, version=version, properties=empty),
        Connect(
            "client-é",
            0,
            False,
            "user",
            b"\x00pass",
            will,
            props(version, Properties(session_expiry_interval=60)),
            version,
        ),
        Connect("", 65535, True, None, b"", Will("w", b"", 2, False, empty), empty, version),
        ConnAck(False, 0, empty),
        ConnAck(True, 0, props(version, Properties(receive_maximum=5, maximum_qos=1))),
        ConnAck(False, 0x87 if version == MQTT_5 else 5, empty),
        Publish("a/b", b"", properties=empty),
        Publish("a/b", b"\x00" * 300, 1, True, True, 1, p5),
        Publish("t/é", b"payload", 2, False, False, 65535, empty),
        SubAck(1, (0, 1, 2, 0x80), empty),
        Subscribe(7, (Subscription("a/+", 1), Subscription("#", 2)), empty),
        Unsubscribe(8, ("a/+", "$share/g/b/#"), p5),
        UnsubAck(8, (0, 0x11) if version == MQTT_5 else (), empty),
        PingReq(),
        PingResp(),
        Disconnect(),
    ]
    for kind in (PacketType.PUBACK, PacketType.PUBREC, PacketType.PUBREL, PacketType.PUBCOMP):
        packets.append(Ack(kind, 1))
        packets.append(Ack(kind, 65535))
    if version == MQTT_5:
        packets += [
            Publish("", b"x", 1, packet_id=2, properties=EVERY_PROPERTY),
            Subscribe(9, (Subscription("a", 2, True, True, 2),), Properties(user_properties=())),
            Ack(PacketType.PUBACK, 3, 0x10, Properties()),
            Ack(PacketType.PUBREC, 4, 0x80, Properties(reason_string="no")),
            Ack(PacketType.PUBCOMP, 5, 0x92, Properties()),
            Disconnect(0x8D, Properties(reason_string="keep alive")),
            Disconnect(0x04, Properties()),
            Auth(),
            Auth(0x18, Properties(authentication_method="m", authentication_data=b"d")),
        ]
    return packets


@pytest.mark.parametrize("version", VERSIONS)
def test_every_packet_type_round_trips(version: int) -> None:
    packets = every_packet(version)
    kinds = {type(p) for p in packets}
    wanted = {Connect, ConnAck, Publish, Ack, Subscribe, SubAck, Unsubscribe, UnsubAck}
    wanted |= {PingReq, PingResp, Disconnect}
    assert kinds >= wanted
    for packet in packets:
        assert roundtrip(packet, version) == packet, packet


def test_ack_without_reason_or_properties_has_the_short_form() -> None:
    # MQTT 5 section 3.4.2.1: reason 0 and no properties may end after the packet id.
    assert encode_packet(Ack(PacketType.PUBACK, 1), MQTT_5) == b"\x40\x02\x00\x01"
    # A 3.1.1 packet never carries the reason code or properties.
    assert encode_packet(Ack(PacketType.PUBACK, 1, 0x10, EVERY_PROPERTY), MQTT_311) == (
        b"\x40\x02\x00\x01"
    )


def test_properties_round_trip_alone() -> None:
    data = encode_properties(EVERY_PROPERTY)
    reader = Reader(data)
    assert decode_properties(reader) == EVERY_PROPERTY
    assert reader.remaining == 0
    assert encode_properties(None) == encode_properties(Properties()) == b"\x00"
    assert EVERY_PROPERTY.user("k") == "v"
    assert EVERY_PROPERTY.user("missing") is None


# -- byte-exact fixtures (worked out from the specification) -----------------------------------

# (version, packet, bytes). Remaining lengths counted by hand: see the comments.
FIXTURES: list[tuple[int, Packet, bytes]] = [
    # 3.1.1 section 3.12 / 3.13: PINGREQ and PINGRESP are two bytes.
    (MQTT_311, PingReq(), b"\xc0\x00"),
    (MQTT_5, PingReq(), b"\xc0\x00"),
    (MQTT_311, PingResp(), b"\xd0\x00"),
    # CONNECT, 3.1.1: "MQTT"(6) level(1) flags 0x02 clean(1) keepalive(2) id "a"(3) = 13.
    (
        MQTT_311,
        Connect("a", 60, True, version=MQTT_311),
        b"\x10\x0d\x00\x04MQTT\x04\x02\x00\x3c\x00\x01a",
    ),
    # CONNECT, 5: the same plus a property length 0 after the keepalive = 14.
    (
        MQTT_5,
        Connect("a", 60, True, version=MQTT_5, properties=Properties()),
        b"\x10\x0e\x00\x04MQTT\x05\x02\x00\x3c\x00\x00\x01a",
    ),
    # CONNECT, 3.1.1, flags: user 0x80 | password 0x40 | will retain 0x20 | will QoS 1 0x08 |
    # will 0x04 | clean 0x02 = 0xEE; payload: id, will topic, will message, user, password.
    (
        MQTT_311,
        Connect("a", 10, True, "u", b"p", Will("w", b"x", 1, True), version=MQTT_311),
        b"\x10\x19\x00\x04MQTT\x04\xee\x00\x0a\x00\x01a\x00\x01w\x00\x01x\x00\x01u\x00\x01p",
    ),
    # CONNECT, 5, will with properties (will delay 0x18 = 5: 5 bytes) before the will topic;
    # clean start 0, keepalive 0, session expiry 0x11 = 10 (5 bytes) in the header.
    (
        MQTT_5,
        Connect(
            "a",
            0,
            False,
            will=Will("w", b"", 0, False, Properties(will_delay_interval=5)),
            properties=Properties(session_expiry_interval=10),
        ),
        b"\x10\x1e\x00\x04MQTT\x05\x04\x00\x00\x05\x11\x00\x00\x00\x0a"
        b"\x00\x01a\x05\x18\x00\x00\x00\x05\x00\x01w\x00\x00",
    ),
    # CONNACK 3.1.1: session present, return code 0.
    (MQTT_311, ConnAck(True, 0), b"\x20\x02\x01\x00"),
    # CONNACK 5: no properties (length 0); refusal 0x87 "not authorized".
    (MQTT_5, ConnAck(False, 0, Properties()), b"\x20\x03\x00\x00\x00"),
    (MQTT_5, ConnAck(False, 0x87, Properties()), b"\x20\x03\x00\x87\x00"),
    # CONNACK 5: receive maximum (0x21, u16) 10 and maximum QoS (0x24) 1: 5 bytes of properties.
    (
        MQTT_5,
        ConnAck(False, 0, Properties(receive_maximum=10, maximum_qos=1)),
        b"\x20\x08\x00\x00\x05\x21\x00\x0a\x24\x01",
    ),
    # PUBLISH 3.1.1, QoS 0: topic "a/b"(5) payload "hi"(2) = 7.
    (MQTT_311, Publish("a/b", b"hi"), b"\x30\x07\x00\x03a/bhi"),
    # PUBLISH 3.1.1: 0x30 | DUP 0x08 | QoS 1 0x02 | RETAIN 0x01 = 0x3B; topic(3) id(2) "x" = 6.
    (MQTT_311, Publish("t", b"x", 1, True, True, 10), b"\x3b\x06\x00\x01t\x00\x0ax"),
    # PUBLISH 5, QoS 2 (0x34), id 1, content type (0x03) "c": 4 bytes of properties.
    (
        MQTT_5,
        Publish("t", b"", 2, packet_id=1, properties=Properties(content_type="c")),
        b"\x34\x0a\x00\x01t\x00\x01\x04\x03\x00\x01c",
    ),
    # PUBLISH 5, user property (0x26) k=v: 7 bytes of properties; QoS 0 has no packet id.
    (
        MQTT_5,
        Publish("t", b"p", properties=Properties(user_properties=(("k", "v"),))),
        b"\x30\x0c\x00\x01t\x07\x26\x00\x01k\x00\x01vp",
    ),
    # PUBLISH 5 with two subscription identifiers (0x0B, variable byte integers 1 and 128).
    (
        MQTT_5,
        Publish("t", b"", properties=Properties(subscription_identifiers=(1, 128))),
        b"\x30\x09\x00\x01t\x05\x0b\x01\x0b\x80\x01",
    ),
    # PUBACK, PUBREC, PUBREL (flags 0010), PUBCOMP: the packet id alone.
    (MQTT_311, Ack(PacketType.PUBACK, 1), b"\x40\x02\x00\x01"),
    (MQTT_311, Ack(PacketType.PUBREC, 258), b"\x50\x02\x01\x02"),
    (MQTT_311, Ack(PacketType.PUBREL, 1), b"\x62\x02\x00\x01"),
    (MQTT_311, Ack(PacketType.PUBCOMP, 1), b"\x70\x02\x00\x01"),
    (MQTT_5, Ack(PacketType.PUBREL, 1), b"\x62\x02\x00\x01"),
    # PUBACK 5 with reason 0x10 "no matching subscribers" and no properties: the property
    # length may be left out when the remaining length is 3 (section 3.4.2.2.1).
    (MQTT_5, Ack(PacketType.PUBACK, 1, 0x10), b"\x40\x03\x00\x01\x10"),
    (MQTT_5, Ack(PacketType.PUBREC, 1, 0x80, Properties()), b"\x50\x04\x00\x01\x80\x00"),
    # SUBSCRIBE (flags 0010) 3.1.1: id(2) "a/b"(5) QoS 1(1) = 8.
    (MQTT_311, Subscribe(1, (Subscription("a/b", 1),)), b"\x82\x08\x00\x01\x00\x03a/b\x01"),
    # SUBSCRIBE 5: options QoS 2 | no local 0x04 | RAP 0x08 | retain handling 2 << 4 = 0x2E.
    (
        MQTT_5,
        Subscribe(1, (Subscription("a", 2, True, True, 2),), Properties()),
        b"\x82\x07\x00\x01\x00\x00\x01a\x2e",
    ),
    # SUBACK: granted QoS 1, and failure 0x80.
    (MQTT_311, SubAck(1, (1, 0x80)), b"\x90\x04\x00\x01\x01\x80"),
    (MQTT_5, SubAck(1, (1, 0x80), Properties()), b"\x90\x05\x00\x01\x00\x01\x80"),
    # UNSUBSCRIBE (flags 0010) and UNSUBACK (3.1.1: the packet id only).
    (MQTT_311, Unsubscribe(2, ("a/b",)), b"\xa2\x07\x00\x02\x00\x03a/b"),
    (MQTT_5, Unsubscribe(2, ("a",), Properties()), b"\xa2\x06\x00\x02\x00\x00\x01a"),
    (MQTT_311, UnsubAck(2), b"\xb0\x02\x00\x02"),
    (MQTT_5, UnsubAck(2, (0,), Properties()), b"\xb0\x04\x00\x02\x00\x00"),
    # DISCONNECT: 3.1.1 has no body; 5 normal may be empty; 0x8D with no property length.
    (MQTT_311, Disconnect(), b"\xe0\x00"),
    (MQTT_5, Disconnect(), b"\xe0\x00"),
    (MQTT_5, Disconnect(0x8D, Properties()), b"\xe0\x02\x8d\x00"),
    # AUTH 5: continue authentication 0x18, method (0x15) "m": 4 bytes of properties.
    (
        MQTT_5,
        Auth(0x18, Properties(authentication_method="m")),
        b"\xf0\x06\x18\x04\x15\x00\x01m",
    ),
]


@pytest.mark.parametrize(("version", "packet", "data"), FIXTURES)
def test_fixture_decodes(version: int, packet: Packet, data: bytes) -> None:
    assert decode_one(data, version) == packet


@pytest.mark.parametrize(
    ("version", "packet", "data"),
    # The fixture without a property length is valid input, not what is sent.
    [f for f in FIXTURES if f[2] not in (b"\x40\x03\x00\x01\x10",)],
)
def test_fixture_encodes(version: int, packet: Packet, data: bytes) -> None:
    assert encode_packet(packet, version) == data


def test_short_reason_forms_encode_with_a_property_length() -> None:
    assert encode_packet(Ack(PacketType.PUBACK, 1, 0x10), MQTT_5) == b"\x40\x04\x00\x01\x10\x00"
    assert encode_packet(Disconnect(0x8D), MQTT_5) == b"\xe0\x02\x8d\x00"


def test_remaining_length_of_two_bytes() -> None:
    # topic "t" (3 bytes) + 125 bytes of payload = 128 = 0x80 0x01 (3.1.1: no properties)
    data = encode_packet(Publish("t", b"x" * 125), MQTT_311)
    assert data[:3] == b"\x30\x80\x01"
    assert len(data) == 3 + 128
    assert decode_one(data, MQTT_311) == Publish("t", b"x" * 125)
    data = encode_packet(Publish("t", b"x" * 16381), MQTT_311)  # 16384: three bytes
    assert data[:4] == b"\x30\x80\x80\x01"


# -- PacketReader --------------------------------------------------------------------------------


def stream(version: int) -> tuple[list[Packet], bytes]:
    packets = [p for v, p, _ in FIXTURES if v == version]
    return packets, b"".join(d for v, _, d in FIXTURES if v == version)


@pytest.mark.parametrize(("version", "packet", "data"), FIXTURES)
def test_reader_whole_and_bytewise(version: int, packet: Packet, data: bytes) -> None:
    reader = PacketReader(4096, version)
    reader.feed(data)
    assert reader.packets() == [packet]
    got: list[Packet] = []
    for i, byte in enumerate(bytewise(data)):
        reader.feed(byte)
        new = reader.packets()
        assert new == ([] if i < len(data) - 1 else [packet])
        got += new
    assert got == [packet]
    assert reader.packets() == []


@pytest.mark.parametrize("version", VERSIONS)
def test_reader_concatenated_with_a_partial_tail(version: int) -> None:
    packets, data = stream(version)
    tail = encode_packet(Publish("t/u", b"z" * 200, 1, packet_id=9), version)
    for cut in (1, 2, 3, 10, len(tail) - 1):
        reader = PacketReader(4096, version)
        reader.feed(data + tail[:cut])
        assert reader.packets() == packets
        assert reader.packets() == []
        reader.feed(tail[cut:])
        assert reader.packets() == [decode_one(tail, version)]


@pytest.mark.parametrize("version", VERSIONS)
def test_reader_any_split(version: int) -> None:
    packets, data = stream(version)
    for cuts in ([0], [len(data)], [5, 6, 7, 100], list(range(0, len(data), 7))):
        reader = PacketReader(4096, version)
        got: list[Packet] = []
        for chunk in split_at(data, cuts):
            reader.feed(chunk)
            got += reader.packets()
        assert got == packets


@pytest.mark.parametrize("qos", [0, 1, 2])
def test_an_oversized_311_publish_is_skipped_with_its_head_kept(qos: int) -> None:
    # A 3.1.1 broker cannot be told the limit and sends the message again after every
    # refusal: the reader hands over its head (to be refused and acknowledged) and drops the
    # rest as it arrives, however the bytes are split.
    big = encode_packet(
        Publish("plant/7/dump", b"x" * 5000, qos, dup=True, packet_id=7 if qos else None),
        MQTT_311,
    )
    after = encode_packet(Publish("t", b"small", 1, packet_id=8), MQTT_311)
    head = Publish("plant/7/dump", b"", qos, False, True, 7 if qos else None, oversize=5000)
    data = big + after
    for cuts in ([], [3], [17], [20, 21, 22], list(range(0, len(data), 97)), [len(big)]):
        reader = PacketReader(1000, MQTT_311)
        got: list[Packet] = []
        for chunk in split_at(data, cuts):
            reader.feed(chunk)
            got += reader.packets()
        assert got == [head, Publish("t", b"small", 1, packet_id=8)]
    # Byte by byte as well.
    reader = PacketReader(1000, MQTT_311)
    got = []
    for byte in bytewise(data):
        reader.feed(byte)
        got += reader.packets()
    assert got == [head, Publish("t", b"small", 1, packet_id=8)]


def test_an_oversized_packet_of_another_kind_or_over_mqtt_5_is_refused() -> None:
    big5 = encode_packet(Publish("t", b"x" * 5000, 1, packet_id=1), MQTT_5)
    reader = PacketReader(1000, MQTT_5)
    reader.feed(big5)
    with pytest.raises(PacketTooLarge):
        reader.packets()
    suback = encode_packet(SubAck(1, tuple([0] * 2000)), MQTT_311)
    reader = PacketReader(1000, MQTT_311)
    reader.feed(suback)
    with pytest.raises(PacketTooLarge):
        reader.packets()
    # A topic longer than the packet that claims it is malformed, not skipped.
    reader = PacketReader(10, MQTT_311)
    reader.feed(b"\x30\x14\xff\xff" + b"a" * 18)
    with pytest.raises(MQTTDecodeError):
        reader.packets()


def test_packet_too_large_from_the_length_alone() -> None:
    reader = PacketReader(100)
    # PUBLISH with remaining length 99: 2 + 99 = 101 bytes > 100; no body sent at all.
    reader.feed(b"\x30\x63")
    with pytest.raises(PacketTooLarge):
        reader.packets()
    # The largest remaining length, four bytes, and nothing after it.
    reader.feed(b"\x30\xff\xff\xff\x7f")
    with pytest.raises(PacketTooLarge) as info:
        reader.packets()
    assert isinstance(info.value, MQTTDecodeError)
    # Exactly at the limit is fine: 2 + topic 3 + property length 1 + 94 = 100.
    data = encode_packet(Publish("t", b"x" * 94), MQTT_5)
    assert len(data) == 100
    reader.feed(data)
    assert reader.packets() == [Publish("t", b"x" * 94, properties=Properties())]


def test_reader_forgets_a_bad_stream() -> None:
    reader = PacketReader(4096)
    reader.feed(b"\x00\x00\xc0\x00")  # reserved type 0, then a PINGREQ
    with pytest.raises(MQTTDecodeError):
        reader.packets()
    assert reader.packets() == []
    reader.feed(b"\xc0\x00")
    assert reader.packets() == [PingReq()]


# -- malformed input ---------------------------------------------------------------------------

MALFORMED: list[tuple[str, int, bytes]] = [
    ("reserved type 0", MQTT_5, b"\x00\x00"),
    ("PUBREL without its 0010 flags", MQTT_5, b"\x60\x02\x00\x01"),
    ("PUBACK with flags", MQTT_311, b"\x42\x02\x00\x01"),
    ("SUBSCRIBE without its 0010 flags", MQTT_311, b"\x80\x08\x00\x01\x00\x03a/b\x01"),
    ("UNSUBSCRIBE without its 0010 flags", MQTT_311, b"\xa0\x07\x00\x02\x00\x03a/b"),
    ("PINGREQ with flags", MQTT_5, b"\xc1\x00"),
    ("CONNACK with flags", MQTT_5, b"\x28\x03\x00\x00\x00"),
    ("DISCONNECT with flags", MQTT_5, b"\xe1\x00"),
    ("PUBLISH QoS 3", MQTT_311, b"\x36\x05\x00\x01t\x00\x01"),
    ("PUBLISH QoS 3 with DUP", MQTT_5, b"\x3e\x06\x00\x01t\x00\x01\x00"),
    ("SUBSCRIBE asking QoS 3", MQTT_311, b"\x82\x06\x00\x01\x00\x01a\x03"),
    ("will QoS 3", MQTT_311, b"\x10\x12\x00\x04MQTT\x04\x1e\x00\x00\x00\x01a\x00\x01w\x00\x00"),
    ("PUBLISH QoS 1 packet id 0", MQTT_311, b"\x32\x05\x00\x01t\x00\x00"),
    ("PUBLISH QoS 2 packet id 0", MQTT_5, b"\x34\x06\x00\x01t\x00\x00\x00"),
    ("topic longer than the packet", MQTT_311, b"\x30\x03\x00\x05t"),
    ("topic length cut", MQTT_311, b"\x30\x01\x00"),
    ("PUBLISH QoS 1 without packet id", MQTT_311, b"\x32\x03\x00\x01t"),
    ("protocol name cut", MQTT_311, b"\x10\x04\x00\x04MQ"),
    ("client id cut", MQTT_311, b"\x10\x0d\x00\x04MQTT\x04\x02\x00\x3c\x00\x02a"),
    ("will message cut", MQTT_311, b"\x10\x11\x00\x04MQTT\x04\x06\x00\x00\x00\x01a\x00\x01w\x00"),
    ("password cut", MQTT_311, b"\x10\x0e\x00\x04MQTT\x04\x42\x00\x00\x00\x01a\x00"),
    ("user name missing", MQTT_311, b"\x10\x0d\x00\x04MQTT\x04\x82\x00\x00\x00\x01a"),
    ("PUBACK id cut", MQTT_311, b"\x40\x01\x00"),
    ("CONNACK cut", MQTT_5, b"\x20\x01\x00"),
    ("invalid UTF-8", MQTT_311, b"\x30\x04\x00\x02\xc3\x28"),
    ("UTF-8 surrogate", MQTT_311, b"\x30\x05\x00\x03\xed\xa0\x80"),
    ("overlong UTF-8", MQTT_311, b"\x30\x04\x00\x02\xc0\xaf"),
    ("invalid UTF-8 in a property", MQTT_5, b"\x30\x08\x00\x01t\x04\x03\x00\x01\xff"),
    ("invalid UTF-8 in a filter", MQTT_311, b"\x82\x06\x00\x01\x00\x01\xfe\x00"),
    ("U+0000 in a topic", MQTT_311, b"\x30\x03\x00\x01\x00"),
    ("U+0000 in a client id", MQTT_311, b"\x10\x0d\x00\x04MQTT\x04\x02\x00\x3c\x00\x01\x00"),
    ("U+0000 in a user property", MQTT_5, b"\x30\x0b\x00\x01t\x07\x26\x00\x01k\x00\x01\x00"),
    ("five-byte remaining length", MQTT_5, b"\x30\x80\x80\x80\x80\x01"),
    ("five-byte property length", MQTT_5, b"\x30\x08\x00\x01t\x80\x80\x80\x80\x01"),
    ("five-byte subscription id", MQTT_5, b"\x30\x0a\x00\x01t\x06\x0b\x80\x80\x80\x80\x01"),
    ("unknown property 0x04", MQTT_5, b"\x30\x06\x00\x01t\x02\x04\x00"),
    ("unknown property 0x80 0x01", MQTT_5, b"\x30\x06\x00\x01t\x02\x80\x01"),
    ("CONNACK property 0x00", MQTT_5, b"\x20\x05\x00\x00\x02\x00\x00"),
    ("content type twice", MQTT_5, b"\x30\x0c\x00\x01t\x08\x03\x00\x01c\x03\x00\x01c"),
    ("receive maximum twice", MQTT_5, b"\x20\x09\x00\x00\x06\x21\x00\x01\x21\x00\x02"),
    ("property value past its list", MQTT_5, b"\x30\x06\x00\x01t\x02\x03\x00"),
    ("property list past the packet", MQTT_5, b"\x30\x04\x00\x01t\x05"),
    ("u32 property cut", MQTT_5, b"\x30\x07\x00\x01t\x03\x02\x00\x00"),
    ("user property without value", MQTT_5, b"\x30\x08\x00\x01t\x04\x26\x00\x01k"),
    ("PINGREQ with a body", MQTT_5, b"\xc0\x01\x00"),
    ("PINGRESP with a body", MQTT_311, b"\xd0\x01\x00"),
    ("PUBACK 3.1.1 with a reason code", MQTT_311, b"\x40\x03\x00\x01\x00"),
    ("PUBACK 5 past its properties", MQTT_5, b"\x40\x05\x00\x01\x00\x00\xff"),
    ("CONNACK 3.1.1 with properties", MQTT_311, b"\x20\x03\x00\x00\x00"),
    ("CONNACK 5 past its properties", MQTT_5, b"\x20\x04\x00\x00\x00\x00"),
    ("CONNECT past its end", MQTT_311, b"\x10\x0e\x00\x04MQTT\x04\x02\x00\x3c\x00\x01a!"),
    ("DISCONNECT 3.1.1 with a body", MQTT_311, b"\xe0\x01\x00"),
    ("DISCONNECT 5 past its properties", MQTT_5, b"\xe0\x03\x00\x00\x00"),
    ("UNSUBACK 3.1.1 past its packet id", MQTT_311, b"\xb0\x03\x00\x02\x00"),
    ("AUTH in 3.1.1", MQTT_311, b"\xf0\x00"),
    ("AUTH past its properties", MQTT_5, b"\xf0\x03\x18\x00\x00"),
    ("CONNACK reserved flags", MQTT_5, b"\x20\x03\x02\x00\x00"),
    ("CONNECT reserved flag", MQTT_311, b"\x10\x0d\x00\x04MQTT\x04\x03\x00\x3c\x00\x01a"),
    ("CONNECT wrong protocol name", MQTT_311, b"\x10\x0d\x00\x04MQTX\x04\x02\x00\x3c\x00\x01a"),
    ("CONNECT protocol level 3", MQTT_311, b"\x10\x0d\x00\x04MQTT\x03\x02\x00\x3c\x00\x01a"),
    ("SUBSCRIBE without filters", MQTT_311, b"\x82\x02\x00\x01"),
    ("SUBSCRIBE filter without options", MQTT_311, b"\x82\x05\x00\x01\x00\x01a"),
    ("UNSUBSCRIBE without filters", MQTT_5, b"\xa2\x03\x00\x01\x00"),
]


@pytest.mark.parametrize(
    ("version", "data"), [(v, d) for _, v, d in MALFORMED], ids=[n for n, _, _ in MALFORMED]
)
def test_malformed_input_is_a_decode_error(version: int, data: bytes) -> None:
    # pytest.raises lets any other exception through: the test then fails.
    reader = PacketReader(4096, version)
    reader.feed(data)
    with pytest.raises(MQTTDecodeError):
        reader.packets()
    # Byte by byte it fails the same way (or, for an incomplete header, still waits).
    reader = PacketReader(4096, version)
    with pytest.raises(MQTTDecodeError):
        for byte in bytewise(data):
            reader.feed(byte)
            reader.packets()


def test_malformed_after_good_packets_is_still_an_error() -> None:
    reader = PacketReader(4096, MQTT_311)
    reader.feed(b"\xd0\x00\xd0\x00\x30\x03\x00\x01\x00")
    with pytest.raises(MQTTDecodeError):
        reader.packets()


def test_short_bodies_of_every_type_decode_or_fail_cleanly() -> None:
    # A proper prefix of a body is refused with MQTTDecodeError or, for PUBLISH (the payload
    # is the rest) and the packets whose reason code and properties may be left out, is itself
    # a valid shorter packet; anything else (IndexError, struct.error, ...) fails the test.
    for version, _, data in FIXTURES:
        header = 2
        while data[header - 1] & 0x80:
            header += 1
        body = data[header:]
        for cut in range(len(body)):
            with contextlib.suppress(MQTTDecodeError):
                decode_packet(data[0], body[:cut], version)


# -- variable byte integers ----------------------------------------------------------------------

VARINTS = [
    (0, b"\x00"),
    (127, b"\x7f"),
    (128, b"\x80\x01"),
    (16_383, b"\xff\x7f"),
    (16_384, b"\x80\x80\x01"),
    (2_097_151, b"\xff\xff\x7f"),
    (2_097_152, b"\x80\x80\x80\x01"),
    (268_435_455, b"\xff\xff\xff\x7f"),
]


@pytest.mark.parametrize(("value", "data"), VARINTS)
def test_variable_byte_integer_boundaries(value: int, data: bytes) -> None:
    # MQTT 5 section 1.5.5, table 1-1.
    assert encode_varint(value) == data
    reader = Reader(data + b"rest")
    assert reader.varint() == value
    assert reader.remaining == 4


def test_variable_byte_integer_refusals() -> None:
    assert MAX_VARINT == 268_435_455
    for value in (268_435_456, -1):
        with pytest.raises(ValueError):
            encode_varint(value)
    with pytest.raises(MQTTDecodeError):
        Reader(b"\x80\x80\x80\x80\x01").varint()  # would be 268435456: five bytes
    with pytest.raises(MQTTDecodeError):
        Reader(b"\xff\xff").varint()  # runs out


def test_remaining_length_boundaries_in_the_reader() -> None:
    for value, data in VARINTS:
        reader = PacketReader(MAX_VARINT + 5)
        reader.feed(b"\x30" + data)
        if value == 0:
            with pytest.raises(MQTTDecodeError):  # a PUBLISH needs at least its topic
                reader.packets()
        else:
            assert reader.packets() == []  # waiting for the body
        assert len(reader._buffer) == (0 if value == 0 else 1 + len(data))


# -- encoding refusals ---------------------------------------------------------------------------


def test_encoder_refuses_what_cannot_be_sent() -> None:
    with pytest.raises(ValueError):
        encode_packet(Publish("t", b"", 3, packet_id=1))
    with pytest.raises(ValueError):
        encode_packet(Publish("t", b"", 1))  # QoS 1 without a packet id
    with pytest.raises(ValueError):
        encode_packet(Publish("a\x00b", b""))
    with pytest.raises(ValueError):
        encode_packet(Subscribe(1, (Subscription("a", 3),)))
    with pytest.raises(ValueError):
        encode_packet(Connect("a", will=Will("w", b"", 3)))
    with pytest.raises(ValueError):
        encode_string("x" * 65536)
    with pytest.raises(ValueError):
        encode_binary(b"x" * 65536)
    with pytest.raises(ValueError):
        encode_properties(Properties(receive_maximum=65536))
    with pytest.raises(ValueError):
        encode_properties(Properties(payload_format_indicator=-1))
    assert encode_string("é") == b"\x00\x02\xc3\xa9"
    assert encode_string("x" * 65535)[:2] == b"\xff\xff"


# -- properties of arbitrary input -----------------------------------------------------------------

# Invariants:
# 1. Any PUBLISH the codec can express (a topic without U+0000, any payload, QoS 0-2 with a
#    packet id 1..65535 above QoS 0, retain, dup, MQTT 5 properties) encodes to bytes that
#    decode to an equal packet, in both versions (3.1.1 carries no properties), fed whole or
#    cut anywhere, and re-encode to the same bytes.
# 2. `PacketReader(max_packet=4096).packets()`, on any bytes however they are cut, returns
#    packets or raises `MQTTDecodeError`, nothing else; what it returns re-encodes to bytes that
#    decode to the same packet; it never holds a complete packet or more than 4096 bytes.

texts = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=20)
properties = st.builds(
    Properties,
    user_properties=st.lists(st.tuples(texts, texts), max_size=3).map(tuple),
    content_type=st.none() | texts,
    correlation_data=st.none() | st.binary(max_size=30),
    message_expiry_interval=st.none() | st.integers(0, 0xFFFF_FFFF),
    subscription_identifiers=st.lists(st.integers(1, MAX_VARINT), max_size=3).map(tuple),
)


@st.composite
def publishes(draw: st.DrawFn, version: int) -> Publish:
    qos = draw(st.integers(0, 2))
    return Publish(
        topic=draw(texts),
        payload=draw(st.binary(max_size=300)),
        qos=qos,
        retain=draw(st.booleans()),
        dup=draw(st.booleans()),
        packet_id=draw(st.integers(1, 65535)) if qos else None,
        properties=draw(properties) if version == MQTT_5 else None,
    )


@PROPERTY
@given(st.data())
def test_any_publish_round_trips(data: st.DataObject) -> None:
    version = data.draw(st.sampled_from(VERSIONS))
    packet = data.draw(publishes(version))
    encoded = encode_packet(packet, version)
    assert roundtrip(packet, version) == packet
    cuts = data.draw(st.lists(st.integers(0, len(encoded)), max_size=6))
    reader = PacketReader(1 << 16, version)
    got: list[Packet] = []
    for chunk in split_at(encoded, cuts):
        reader.feed(chunk)
        got += reader.packets()
    assert got == [packet]


@PROPERTY
@given(st.sampled_from(VERSIONS), st.binary(max_size=600), st.lists(st.integers(0, 600)))
def test_any_bytes_give_packets_or_a_decode_error(
    version: int, data: bytes, cuts: list[int]
) -> None:
    reader = PacketReader(max_packet=4096, version=version)
    for chunk in split_at(data, [c for c in cuts if c <= len(data)]):
        reader.feed(chunk)
        try:
            packets = reader.packets()
        except MQTTDecodeError:
            return
        assert len(reader._buffer) <= 4096
        for packet in packets:
            encoded = encode_packet(packet, version)
            assert encode_packet(decode_one(encoded, version), version) == encoded


@PROPERTY
@given(st.sampled_from(VERSIONS), st.binary(max_size=200))
def test_any_body_gives_a_packet_or_a_decode_error(version: int, body: bytes) -> None:
    for first in range(256):
        with contextlib.suppress(MQTTDecodeError):
            decode_packet(first, body, version)
