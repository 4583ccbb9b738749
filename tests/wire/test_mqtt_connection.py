"""`MQTTClientConnection`, driven against a broker made of the codec (no sockets, no clock:
time is the ``now`` each call is given)."""

from __future__ import annotations

import pytest

from airlane.wire.mqtt.connection import (
    ClientSession,
    Connected,
    ConnectionClosed,
    Event,
    LocalProtocolError,
    MessageReceived,
    MessageReleased,
    MQTTClientConnection,
    PublishDone,
    State,
    Subscribed,
    Unsubscribed,
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
    Subscribe,
    Subscription,
    UnsubAck,
    Unsubscribe,
    encode_packet,
)
from airlane.wire.mqtt.properties import Properties

VERSIONS = [MQTT_311, MQTT_5]
PUBACK, PUBREC, PUBREL, PUBCOMP = (
    PacketType.PUBACK,
    PacketType.PUBREC,
    PacketType.PUBREL,
    PacketType.PUBCOMP,
)


class FakeBroker:
    """The broker's end of one connection: reads what the client wrote with `PacketReader`,
    answers with `encode_packet`."""

    def __init__(self, client: MQTTClientConnection, version: int) -> None:
        self.client = client
        self.version = version
        self.reader = PacketReader(1 << 20, version)

    def received(self) -> list[Packet]:
        """The packets the client has written since the last call."""
        self.reader.feed(self.client.data_to_send())
        return self.reader.packets()

    def send(self, *packets: Packet, now: float = 0.0) -> list[Event]:
        data = b"".join(encode_packet(packet, self.version) for packet in packets)
        return self.client.receive_data(data, now)

    def send_raw(self, data: bytes, now: float = 0.0) -> list[Event]:
        return self.client.receive_data(data, now)

    def connack(self, session_present: bool = False, **props: int) -> list[Event]:
        properties = Properties(**props) if self.version == MQTT_5 else None  # type: ignore[arg-type]
        return self.send(ConnAck(session_present, 0, properties))


def start(
    version: int = MQTT_5,
    session: ClientSession | None = None,
    *,
    keepalive: int = 60,
    max_packet: int = 1 << 20,
) -> tuple[MQTTClientConnection, FakeBroker]:
    connect = Connect("client", keepalive, session is None, version=version)
    client = MQTTClientConnection(connect, session, max_packet=max_packet)
    return client, FakeBroker(client, version)


def connected(
    version: int = MQTT_5, session: ClientSession | None = None, **kwargs: int
) -> tuple[MQTTClientConnection, FakeBroker]:
    client, broker = start(version, session, **kwargs)
    assert len(broker.received()) == 1  # CONNECT
    events = broker.connack()
    assert [type(e) for e in events] == [Connected]
    return client, broker


def props(version: int, **values: object) -> Properties | None:
    return Properties(**values) if version == MQTT_5 else None  # type: ignore[arg-type]


# -- connecting -----------------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_connect_is_sent_on_construction(version: int) -> None:
    client, broker = start(version, keepalive=30)
    assert client.state is State.CONNECTING
    (packet,) = broker.received()
    assert isinstance(packet, Connect)
    assert (packet.client_id, packet.keepalive, packet.version) == ("client", 30, version)
    assert broker.received() == []  # data_to_send hands the bytes over once


def test_connect_bytes_3_1_1() -> None:
    client = MQTTClientConnection(Connect("a", 60, True, version=MQTT_311))
    assert client.data_to_send() == b"\x10\x0d\x00\x04MQTT\x04\x02\x00\x3c\x00\x01a"


@pytest.mark.parametrize("version", VERSIONS)
def test_connack_connects(version: int) -> None:
    client, broker = start(version)
    broker.received()
    (event,) = broker.send(ConnAck(False, 0, props(version)))
    assert event == Connected(False, Properties())
    assert client.state is State.CONNECTED and not client.closed
    assert client.receive_maximum == 65535 and client.maximum_qos == 2 and client.keepalive == 60


def test_connack_properties_are_honoured() -> None:
    client, broker = start(MQTT_5)
    broker.received()
    (event,) = broker.connack(receive_maximum=2, maximum_qos=1, server_keep_alive=5)
    assert isinstance(event, Connected)
    assert event.properties.receive_maximum == 2
    assert client.receive_maximum == 2
    assert client.maximum_qos == 1
    assert client.keepalive == 5
    assert client.server == event.properties
    # maximum QoS 1: a QoS 2 publish goes at QoS 1
    packet_id = client.publish("t", b"x", qos=2)
    (sent,) = broker.received()
    assert isinstance(sent, Publish) and sent.qos == 1 and sent.packet_id == packet_id
    # the server's keep-alive replaces the client's
    assert client.get_timer() == 5
    client.handle_timer(5.0)
    assert broker.received() == [PingReq()]


@pytest.mark.parametrize(("version", "code"), [(MQTT_5, 0x87), (MQTT_5, 0x80), (MQTT_311, 5)])
def test_connack_refusal_closes(version: int, code: int) -> None:
    client, broker = start(version)
    broker.received()
    events = broker.send(ConnAck(False, code, props(version, reason_string="no")))
    assert len(events) == 1 and isinstance(events[0], ConnectionClosed)
    assert events[0].reason_code == code
    assert client.state is State.CLOSED and client.closed
    assert broker.received() == []  # no DISCONNECT before a connection existed
    assert client.get_timer() is None
    with pytest.raises(LocalProtocolError):
        client.publish("t", b"x")


def test_connect_timeout_without_connack() -> None:
    connect = Connect("c", 60, version=MQTT_5)
    client = MQTTClientConnection(connect, connect_timeout_s=10.0, now=100.0)
    client.data_to_send()
    assert client.get_timer() == 110.0
    assert client.handle_timer(109.9) == []
    (event,) = client.handle_timer(110.0)
    assert isinstance(event, ConnectionClosed)
    assert client.state is State.CLOSED
    assert client.data_to_send() == b""
    assert client.get_timer() is None
    assert client.handle_timer(200.0) == []


@pytest.mark.parametrize("version", VERSIONS)
def test_packet_before_connack_is_a_protocol_error(version: int) -> None:
    client, broker = start(version)
    broker.received()
    (event,) = broker.send(PingResp())
    assert event == ConnectionClosed(0x82, "PingResp before CONNACK")
    assert client.closed


@pytest.mark.parametrize("version", VERSIONS)
def test_calls_before_connack_are_local_errors(version: int) -> None:
    client, _ = start(version)
    with pytest.raises(LocalProtocolError):
        client.publish("t", b"x")
    with pytest.raises(LocalProtocolError):
        client.publish("t", b"x", qos=1)
    with pytest.raises(LocalProtocolError):
        client.subscribe([Subscription("a")])
    with pytest.raises(LocalProtocolError):
        client.unsubscribe(["a"])
    assert not client.can_publish


# -- publishing -------------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_publish_qos0(version: int) -> None:
    client, broker = connected(version)
    assert client.publish("a/b", b"hi", retain=True) is None
    assert broker.received() == [Publish("a/b", b"hi", 0, True, properties=props(version))]
    assert client.in_flight == 0


@pytest.mark.parametrize("version", VERSIONS)
def test_publish_qos1(version: int) -> None:
    client, broker = connected(version)
    packet_id = client.publish("a/b", b"hi", qos=1)
    assert packet_id == 1
    (sent,) = broker.received()
    assert sent == Publish("a/b", b"hi", 1, False, False, 1, props(version))
    assert client.in_flight == 1
    assert broker.send(Ack(PUBACK, 1)) == [PublishDone(1, 0)]
    assert client.in_flight == 0
    assert broker.send(Ack(PUBACK, 1)) == []  # a second PUBACK settles nothing
    assert broker.received() == []


def test_publish_qos1_refused_with_reason() -> None:
    client, broker = connected(MQTT_5)
    client.publish("t", b"", qos=1)
    broker.received()
    events = broker.send(Ack(PUBACK, 1, 0x87, Properties(reason_string="not allowed")))
    assert events == [PublishDone(1, 0x87, "not allowed")]


@pytest.mark.parametrize("version", VERSIONS)
def test_publish_qos2(version: int) -> None:
    client, broker = connected(version)
    packet_id = client.publish("t", b"x", qos=2)
    (sent,) = broker.received()
    assert isinstance(sent, Publish) and sent.qos == 2 and sent.packet_id == packet_id == 1
    assert broker.send(Ack(PUBREC, 1)) == []
    assert broker.received() == [Ack(PUBREL, 1)]
    assert client.session.releasing == {1} and not client.session.outgoing
    assert client.in_flight == 1
    assert broker.send(Ack(PUBCOMP, 1)) == [PublishDone(1, 0)]
    assert client.in_flight == 0
    assert broker.send(Ack(PUBCOMP, 1)) == []


def test_publish_qos2_refused_at_pubrec() -> None:
    client, broker = connected(MQTT_5)
    client.publish("t", b"x", qos=2)
    broker.received()
    assert broker.send(Ack(PUBREC, 1, 0x97, Properties())) == [PublishDone(1, 0x97)]
    assert broker.received() == []  # no PUBREL after a failure
    assert client.in_flight == 0


@pytest.mark.parametrize("version", VERSIONS)
def test_pubrec_for_an_unknown_id_is_released_but_not_tracked(version: int) -> None:
    client, broker = connected(version)
    assert broker.send(Ack(PUBREC, 42)) == []
    (pubrel,) = broker.received()
    assert isinstance(pubrel, Ack) and pubrel.type is PUBREL and pubrel.packet_id == 42
    if version == MQTT_5:
        assert pubrel.reason_code == 0x92  # packet identifier not found
    assert client.in_flight == 0  # nothing of ours is in flight
    assert broker.send(Ack(PUBCOMP, 42)) == []  # and nothing is reported done


def test_repeated_pubrec_is_released_again() -> None:
    client, broker = connected(MQTT_5)
    client.publish("t", b"x", qos=2)
    broker.received()
    broker.send(Ack(PUBREC, 1))
    broker.send(Ack(PUBREC, 1))
    assert broker.received() == [Ack(PUBREL, 1), Ack(PUBREL, 1)]
    assert client.in_flight == 1
    assert broker.send(Ack(PUBCOMP, 1)) == [PublishDone(1, 0)]


def test_packet_ids_are_unique_and_wrap() -> None:
    client, _ = connected(MQTT_5)
    client.session.next_id = 65535
    assert client.publish("t", b"", qos=1) == 65535
    assert client.publish("t", b"", qos=1) == 1
    client.session.next_id = 65535
    assert client.publish("t", b"", qos=1) == 2  # 65535 and 1 are in flight


def test_publish_past_receive_maximum_is_refused() -> None:
    client, broker = start(MQTT_5)
    broker.received()
    broker.connack(receive_maximum=2)
    client.publish("t", b"", qos=1)
    client.publish("t", b"", qos=2)
    assert not client.can_publish
    with pytest.raises(LocalProtocolError):
        client.publish("t", b"", qos=1)
    assert client.publish("t", b"", qos=0) is None  # QoS 0 is not counted
    broker.received()
    broker.send(Ack(PUBREC, 2))  # QoS 2 past PUBREC still counts
    assert not client.can_publish
    broker.send(Ack(PUBACK, 1))
    assert client.can_publish
    assert client.publish("t", b"", qos=1) == 3


# -- receiving --------------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_receive_qos0(version: int) -> None:
    client, broker = connected(version)
    message = Publish("a", b"m", properties=props(version))
    assert broker.send(message) == [MessageReceived(message)]
    client.ack(message)
    assert broker.received() == []


@pytest.mark.parametrize("version", VERSIONS)
def test_receive_qos1_is_acked_only_when_told(version: int) -> None:
    client, broker = connected(version)
    message = Publish("a", b"m", 1, packet_id=7, properties=props(version))
    assert broker.send(message) == [MessageReceived(message)]
    assert broker.received() == []  # no PUBACK yet
    client.ack(message)
    assert broker.received() == [Ack(PUBACK, 7)]


@pytest.mark.parametrize("version", VERSIONS)
def test_receive_qos2_is_recd_only_when_told(version: int) -> None:
    client, broker = connected(version)
    message = Publish("a", b"m", 2, packet_id=9, properties=props(version))
    assert broker.send(message) == [MessageReceived(message)]
    assert broker.received() == []  # no PUBREC yet
    client.ack(message)
    assert broker.received() == [Ack(PUBREC, 9)]
    assert client.session.received == {9}
    # the same message again (DUP): answered, not delivered twice
    assert broker.send(Publish("a", b"m", 2, dup=True, packet_id=9)) == []
    assert broker.received() == [Ack(PUBREC, 9)]
    # PUBREL -> PUBCOMP; the id is free again
    assert broker.send(Ack(PUBREL, 9)) == [MessageReleased(9)]
    assert broker.received() == [Ack(PUBCOMP, 9)]
    assert client.session.received == set()
    again = Publish("b", b"new", 2, packet_id=9, properties=props(version))
    assert broker.send(again) == [MessageReceived(again)]


def test_refused_qos2_message_is_not_remembered() -> None:
    client, broker = connected(MQTT_5)
    message = Publish("a", b"m", 2, packet_id=9, properties=Properties())
    broker.send(message)
    client.ack(message, 0x80)
    assert broker.received() == [Ack(PUBREC, 9, 0x80, Properties())]
    assert client.session.received == set()


def test_a_311_refusal_is_a_plain_pubrec_and_the_message_is_remembered() -> None:
    # MQTT 3.1.1 acknowledgements carry no reason: the PUBREC says "taken", the broker
    # releases the message, and a copy sent again before that is not delivered twice.
    client, broker = connected(MQTT_311)
    message = Publish("a", b"m", 2, packet_id=9)
    broker.send(message)
    client.ack(message, 0x83)
    assert broker.received() == [Ack(PUBREC, 9)]
    assert client.session.received == {9}
    assert broker.send(Publish("a", b"m", 2, dup=True, packet_id=9)) == []


@pytest.mark.parametrize("version", VERSIONS)
def test_pubrel_for_an_unknown_id_is_completed(version: int) -> None:
    client, broker = connected(version)
    assert broker.send(Ack(PUBREL, 1234)) == [MessageReleased(1234)]
    assert broker.received() == [Ack(PUBCOMP, 1234)]
    assert not client.closed


def test_ack_after_close_sends_nothing() -> None:
    client, broker = connected(MQTT_5)
    message = Publish("a", b"m", 1, packet_id=7, properties=Properties())
    broker.send(message)
    client.connection_lost()
    client.ack(message)
    assert broker.received() == []


# -- subscribing ------------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_subscribe_and_unsubscribe(version: int) -> None:
    client, broker = connected(version)
    packet_id = client.subscribe([Subscription("a/+", 1), Subscription("b/#", 2)])
    (sent,) = broker.received()
    assert isinstance(sent, Subscribe) and sent.packet_id == packet_id
    assert [s.filter for s in sent.subscriptions] == ["a/+", "b/#"]
    events = broker.send(SubAck(packet_id, (1, 0x80), props(version)))
    assert events == [Subscribed(packet_id, (1, 0x80))]
    unsub_id = client.unsubscribe(["a/+"])
    (sent,) = broker.received()
    assert isinstance(sent, Unsubscribe) and sent.filters == ("a/+",)
    assert broker.send(UnsubAck(unsub_id, (), props(version))) == [Unsubscribed(unsub_id)]


@pytest.mark.parametrize("version", VERSIONS)
def test_suback_for_an_unknown_id_is_a_protocol_error(version: int) -> None:
    client, broker = connected(version)
    events = broker.send(SubAck(77, (0,), props(version)))
    assert len(events) == 1 and isinstance(events[0], ConnectionClosed)
    assert events[0].reason_code == 0x82
    assert client.closed
    sent = broker.received()
    assert sent == ([Disconnect(0x82, Properties(reason_string=events[0].reason))]
                    if version == MQTT_5 else [])  # fmt: skip


@pytest.mark.parametrize("version", VERSIONS)
def test_unsuback_for_an_unknown_id_is_a_protocol_error(version: int) -> None:
    client, broker = connected(version)
    events = broker.send(UnsubAck(77, (), props(version)))
    assert len(events) == 1 and isinstance(events[0], ConnectionClosed)
    assert events[0].reason_code == 0x82
    assert client.closed


# -- persistent sessions ----------------------------------------------------------------------


def in_flight_session(version: int) -> ClientSession:
    """A session left by a connection that went away with: QoS 1 id 1 unacknowledged, QoS 2
    id 2 past PUBREC (PUBREL sent), QoS 2 id 3 unacknowledged, and a received QoS 2 id 50
    PUBREC'd."""
    session = ClientSession()
    client, broker = connected(version, session)
    client.publish("q1", b"1", qos=1)
    client.publish("q2", b"2", qos=2)
    client.publish("q2b", b"3", qos=2)
    message = Publish("in", b"m", 2, packet_id=50, properties=props(version))
    broker.send(message)
    client.ack(message)
    broker.send(Ack(PUBREC, 2))
    broker.received()
    client.connection_lost()
    assert client.closed
    assert list(session.outgoing) == [1, 3]
    assert session.releasing == {2} and session.received == {50}
    return session


@pytest.mark.parametrize("version", VERSIONS)
def test_session_present_resends_with_dup(version: int) -> None:
    session = in_flight_session(version)
    client, broker = start(version, session)
    (connect,) = broker.received()
    assert isinstance(connect, Connect) and not connect.clean_start
    (event,) = broker.connack(session_present=True)
    assert event == Connected(True, Properties())
    assert broker.received() == [
        Publish("q1", b"1", 1, False, True, 1, props(version)),
        Publish("q2b", b"3", 2, False, True, 3, props(version)),
        Ack(PUBREL, 2),
    ]
    assert session.received == {50}
    # the broker resends the QoS 2 message it has our PUBREC for: not delivered again
    assert broker.send(Publish("in", b"m", 2, dup=True, packet_id=50)) == []
    assert broker.received() == [Ack(PUBREC, 50)]
    # and the flows complete on the new connection
    assert broker.send(Ack(PUBACK, 1), Ack(PUBCOMP, 2)) == [PublishDone(1, 0), PublishDone(2, 0)]
    assert client.in_flight == 1
    # new packet ids avoid the one still in flight
    client.session.next_id = 3
    assert client.publish("t", b"", qos=1) == 4


@pytest.mark.parametrize("version", VERSIONS)
def test_no_session_present_resends_as_new_and_clears(version: int) -> None:
    session = in_flight_session(version)
    _, broker = start(version, session)
    broker.received()
    (event,) = broker.connack(session_present=False)
    assert isinstance(event, Connected) and not event.session_present
    assert broker.received() == [
        Publish("q1", b"1", 1, False, False, 1, props(version)),
        Publish("q2b", b"3", 2, False, False, 3, props(version)),
    ]
    assert session.received == set()
    assert session.releasing == set()
    message = Publish("in", b"m", 2, packet_id=50, properties=props(version))
    assert broker.send(message) == [MessageReceived(message)]  # a new message now


# -- keep-alive -------------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_keepalive_ping_and_timeout(version: int) -> None:
    client, broker = connected(version, keepalive=60)
    assert client.get_timer() == 60.0
    assert client.handle_timer(59.0) == []
    assert broker.received() == []
    assert client.handle_timer(60.0) == []
    assert broker.received() == [PingReq()]
    assert client.get_timer() == 120.0
    assert client.handle_timer(119.0) == []
    assert broker.received() == []
    (event,) = client.handle_timer(120.0)
    assert isinstance(event, ConnectionClosed) and event.reason_code == 0x8D
    assert client.state is State.CLOSED
    sent = broker.received()
    if version == MQTT_5:
        assert len(sent) == 1 and isinstance(sent[0], Disconnect)
        assert sent[0].reason_code == 0x8D
    else:
        assert sent == []
    assert client.get_timer() is None


@pytest.mark.parametrize("version", VERSIONS)
def test_keepalive_answered(version: int) -> None:
    client, broker = connected(version, keepalive=60)
    client.handle_timer(60.0)
    assert broker.received() == [PingReq()]
    assert broker.send(PingResp(), now=61.0) == []
    assert client.get_timer() == 120.0  # the next ping, no deadline
    assert client.handle_timer(120.0) == []
    assert broker.received() == [PingReq()]
    assert not client.closed


@pytest.mark.parametrize("version", VERSIONS)
def test_keepalive_while_not_reading_pings_without_awaiting_the_answer(version: int) -> None:
    # A caller that has stopped reading (backpressure) cannot see PINGRESP: PINGREQ still
    # goes out at each keep-alive, and the connection is not closed for a missing answer.
    client, broker = connected(version, keepalive=60)
    assert client.handle_timer(60.0) == []  # reading: PINGREQ, its answer awaited until 120
    assert broker.received() == [PingReq()]
    assert client.get_timer() == 120.0
    for now in (120.0, 180.0, 240.0):
        assert client.handle_timer(now, reading=False) == []
        assert broker.received() == [PingReq()]
        assert client.get_timer() == now + 60.0
    assert not client.closed
    # Reading again: the next PINGREQ awaits its answer as before.
    assert client.handle_timer(300.0) == []
    assert broker.received() == [PingReq()]
    (event,) = client.handle_timer(360.0)
    assert isinstance(event, ConnectionClosed) and event.reason_code == 0x8D


def test_keepalive_counts_from_the_last_packet_sent() -> None:
    client, broker = connected(MQTT_5, keepalive=60)
    client.publish("t", b"", now=50.0)
    broker.received()
    assert client.get_timer() == 110.0
    assert client.handle_timer(60.0) == []
    assert broker.received() == []


def test_keepalive_zero_never_pings() -> None:
    client, broker = connected(MQTT_5, keepalive=0)
    assert client.get_timer() is None
    assert client.handle_timer(1e9) == []
    assert broker.received() == []


# -- a misbehaving broker ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "garbage",
    [
        b"\x00\x00",  # reserved packet type
        b"\x30\x03\x00\x01\x00",  # U+0000 in a topic
        b"\x60\x02\x00\x01",  # PUBREL without its flags
        b"\x30\x80\x80\x80\x80\x01",  # five-byte remaining length
        b"\xff" * 50,
    ],
)
def test_garbage_closes_as_malformed(garbage: bytes) -> None:
    client, broker = connected(MQTT_5)
    events = broker.send_raw(garbage)
    assert len(events) == 1 and isinstance(events[0], ConnectionClosed)
    assert events[0].reason_code == 0x81
    (disconnect,) = broker.received()
    assert isinstance(disconnect, Disconnect) and disconnect.reason_code == 0x81
    assert client.state is State.CLOSED
    assert broker.send_raw(garbage) == []  # closed: nothing more happens


def test_garbage_in_3_1_1_closes_without_disconnect() -> None:
    _, broker = connected(MQTT_311)
    (event,) = broker.send_raw(b"\x00\x00")
    assert isinstance(event, ConnectionClosed) and event.reason_code == 0x81
    assert broker.received() == []


def test_garbage_before_connack_closes() -> None:
    _, broker = start(MQTT_5)
    broker.received()
    (event,) = broker.send_raw(b"\x20\x03\x05\x00\x00")  # CONNACK reserved flags
    assert isinstance(event, ConnectionClosed) and event.reason_code == 0x81
    assert broker.received() == []


def test_packet_larger_than_max_packet_closes() -> None:
    _, broker = connected(MQTT_5, max_packet=100)
    events = broker.send_raw(b"\x30\xe8\x07")  # remaining length 1000, no body yet
    assert len(events) == 1 and isinstance(events[0], ConnectionClosed)
    assert events[0].reason_code == 0x95
    (disconnect,) = broker.received()
    assert isinstance(disconnect, Disconnect) and disconnect.reason_code == 0x95


def test_packets_before_garbage_in_one_read() -> None:
    client, broker = connected(MQTT_5)
    client.publish("t", b"", qos=1)
    broker.received()
    events = broker.send_raw(encode_packet(Ack(PUBACK, 1), MQTT_5) + b"\x00\x00")
    assert isinstance(events[-1], ConnectionClosed)
    assert client.closed


@pytest.mark.parametrize(
    "packet",
    [
        ConnAck(False, 0, Properties()),
        Connect("x"),
        Subscribe(1, (Subscription("a"),), Properties()),
        Unsubscribe(1, ("a",), Properties()),
        PingReq(),
        Auth(0x18, Properties(authentication_method="m")),
    ],
)
def test_packets_a_client_never_gets_are_protocol_errors(packet: Packet) -> None:
    client, broker = connected(MQTT_5)
    (event,) = broker.send(packet)
    assert isinstance(event, ConnectionClosed) and event.reason_code == 0x82
    assert client.closed


@pytest.mark.parametrize("version", VERSIONS)
def test_broker_disconnect(version: int) -> None:
    client, broker = connected(version)
    events = broker.send(Disconnect(0x8B, props(version, reason_string="shutting down")))
    if version == MQTT_5:
        assert events == [ConnectionClosed(0x8B, "shutting down")]
    else:
        assert events == [ConnectionClosed(0, "the broker disconnected")]
    assert client.closed
    assert broker.received() == []


@pytest.mark.parametrize("version", VERSIONS)
def test_events_stop_at_close(version: int) -> None:
    _, broker = connected(version)
    message = Publish("a", b"m", properties=props(version))
    events = broker.send(message, Disconnect(), message)
    assert events == [MessageReceived(message), ConnectionClosed(0, "the broker disconnected")]


@pytest.mark.parametrize("version", VERSIONS)
def test_client_disconnect(version: int) -> None:
    client, broker = connected(version)
    client.disconnect()
    assert broker.received() == [Disconnect()]
    assert client.closed
    client.disconnect()
    assert broker.received() == []
    with pytest.raises(LocalProtocolError):
        client.publish("t", b"")
