"""The client side of an MQTT connection (3.1.1 or 5.0), sans-I/O.

`MQTTClientConnection` is one network connection: bytes in (`receive_data`), events out, bytes
to write (`data_to_send`), time passed in (`get_timer` / `handle_timer`). What must outlive a
connection for a persistent session (Clean Start 0) is a separate `ClientSession`: the QoS 1
and 2 messages this client sent that the broker has not acknowledged yet, and the packet ids
of QoS 2 messages received whose PUBREL has not come. Hand the same session to the next
connection and, when the broker says its session is present, it resends what was in flight
(DUP set) and the PUBRELs, as MQTT 5 section 4.4 asks.

Why Airlane speaks MQTT itself instead of through paho-mqtt: a received QoS 1 or 2 message is
acknowledged (PUBACK; PUBREC for QoS 2) only when the caller says so with `ack`, after the
message is stored. paho acknowledges a QoS 2 message with PUBREC as it arrives and hands it over
only at PUBREL, so a crash between the two loses a message the broker already let go of.

States::

    CONNECTING --CONNACK 0--> CONNECTED --DISCONNECT / error / keep-alive timeout--> CLOSED
         |                                      ^
         +---------CONNACK >= 0x80 -------------+

Events (all frozen dataclasses): `Connected`, `MessageReceived`, `MessageReleased`,
`PublishDone`, `Subscribed`,
`Unsubscribed`, `ConnectionClosed`. A peer that breaks the protocol closes the connection with
a `ConnectionClosed` carrying the reason (and a DISCONNECT with that code under MQTT 5);
`receive_data` never raises on hostile bytes. Calling a method in the wrong state is a
`LocalProtocolError`.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Final

from airlane.wire.mqtt.packets import (
    MQTT_5,
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
    encode_packet,
)
from airlane.wire.mqtt.primitives import MQTTDecodeError
from airlane.wire.mqtt.properties import Properties

__all__ = [
    "ClientSession",
    "Connected",
    "ConnectionClosed",
    "Event",
    "LocalProtocolError",
    "MQTTClientConnection",
    "MessageReceived",
    "MessageReleased",
    "PublishDone",
    "State",
    "Subscribed",
    "Unsubscribed",
]

MALFORMED = 0x81
PROTOCOL_ERROR = 0x82
PACKET_TOO_LARGE = 0x95
KEEP_ALIVE_TIMEOUT = 0x8D


CONNACK_REASONS: Final = {
    # MQTT 3.1.1 return codes.
    0x01: "unacceptable protocol version",
    0x02: "client identifier rejected",
    0x03: "server unavailable",
    0x04: "bad user name or password",
    0x05: "not authorized",
    # MQTT 5 reason codes.
    0x80: "unspecified error",
    0x81: "malformed packet",
    0x82: "protocol error",
    0x83: "implementation specific error",
    0x84: "unsupported protocol version",
    0x85: "client identifier not valid",
    0x86: "bad user name or password",
    0x87: "not authorized",
    0x88: "server unavailable",
    0x89: "server busy",
    0x8A: "banned",
    0x8C: "bad authentication method",
    0x95: "packet too large",
    0x97: "quota exceeded",
    0x99: "payload format invalid",
    0x9A: "retain not supported",
    0x9B: "QoS not supported",
    0x9C: "use another server",
    0x9D: "server moved",
    0x9F: "connection rate exceeded",
}
"""What a CONNACK's refusal code means (3.1.1's 1-5 and 5's 0x80 up do not overlap)."""


class LocalProtocolError(RuntimeError):
    """This side called the connection wrongly (publishing before CONNACK, past the broker's
    receive maximum, ...)."""


class State(enum.Enum):
    """Where the connection is."""

    CONNECTING = "connecting"
    CONNECTED = "connected"
    CLOSED = "closed"


@dataclass(frozen=True, slots=True)
class Connected:
    """The broker accepted the connection."""

    session_present: bool
    properties: Properties


@dataclass(frozen=True, slots=True)
class MessageReceived:
    """A message from the broker. At QoS 1 and 2 it stays unacknowledged until `ack`."""

    message: Publish


@dataclass(frozen=True, slots=True)
class PublishDone:
    """The broker settled a QoS 1 or 2 message this client published (PUBACK, PUBCOMP, or a
    PUBREC with a failure code); ``reason_code`` >= 0x80 is a refusal."""

    packet_id: int
    reason_code: int
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class Subscribed:
    """SUBACK: a granted QoS (0-2) or a failure code (>= 0x80) per filter."""

    packet_id: int
    reason_codes: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class MessageReleased:
    """PUBREL for a QoS 2 message received: the broker has this side's PUBREC and will not
    send the message again (PUBCOMP is already queued to answer it)."""

    packet_id: int


@dataclass(frozen=True, slots=True)
class Unsubscribed:
    """UNSUBACK."""

    packet_id: int


@dataclass(frozen=True, slots=True)
class ConnectionClosed:
    """The connection is over: the broker refused or ended it, it broke the protocol, or the
    keep-alive ran out. ``reason_code`` is MQTT 5's (0 for a normal end)."""

    reason_code: int
    reason: str


Event = (
    Connected
    | MessageReceived
    | MessageReleased
    | PublishDone
    | Subscribed
    | Unsubscribed
    | ConnectionClosed
)


@dataclass(slots=True)
class ClientSession:
    """The session state a persistent client keeps across its connections."""

    outgoing: OrderedDict[int, Publish] = field(default_factory=OrderedDict)
    """QoS 1/2 messages sent and not yet acknowledged (PUBACK / PUBREC), by packet id."""
    releasing: set[int] = field(default_factory=set)
    """Own QoS 2 messages past PUBREC: PUBREL sent, PUBCOMP awaited."""
    received: set[int] = field(default_factory=set)
    """QoS 2 messages received and acknowledged with PUBREC, PUBREL awaited: a new copy with
    the same id is answered, not delivered again."""
    next_id: int = 1

    def allocate(self) -> int:
        """A packet id not in use by a message in flight."""
        for _ in range(65535):
            packet_id = self.next_id
            self.next_id = packet_id % 65535 + 1
            if packet_id not in self.outgoing and packet_id not in self.releasing:
                return packet_id
        raise LocalProtocolError("all 65535 packet ids are in flight")

    def clear(self) -> None:
        """Forget the state (the broker has no session for this client)."""
        self.releasing.clear()
        self.received.clear()


class MQTTClientConnection:
    """One client connection; see the module docstring."""

    def __init__(
        self,
        connect: Connect,
        session: ClientSession | None = None,
        *,
        max_packet: int = 1 << 20,
        connect_timeout_s: float = 10.0,
        now: float = 0.0,
    ) -> None:
        self.version = connect.version
        self.session = session if session is not None else ClientSession()
        self.state = State.CONNECTING
        self.keepalive = connect.keepalive
        self.server = Properties()
        """The broker's CONNACK properties once connected."""
        self.receive_maximum = 65535
        """How many QoS 1/2 messages the broker takes in flight from this client."""
        self.maximum_qos = 2
        self.server_max_packet: int | None = None
        self._reader = PacketReader(max_packet, connect.version)
        self._out = bytearray()
        self._pending_subs: set[int] = set()
        self._pending_unsubs: set[int] = set()
        self._last_sent = now
        self._ping_deadline: float | None = None
        self._connect_deadline: float | None = now + connect_timeout_s
        self._send(connect, now)

    # -- output -----------------------------------------------------------------------------

    def data_to_send(self) -> bytes:
        """The bytes to write to the socket now (and forget)."""
        out = bytes(self._out)
        self._out.clear()
        return out

    def _send(self, packet: Packet, now: float | None = None) -> None:
        self._out += encode_packet(packet, self.version)
        if now is not None:
            self._last_sent = now

    # -- calls ------------------------------------------------------------------------------

    def _require_connected(self) -> None:
        if self.state is not State.CONNECTED:
            raise LocalProtocolError(f"the connection is {self.state.value}")

    @property
    def in_flight(self) -> int:
        """QoS 1/2 messages this client sent that are not fully acknowledged."""
        return len(self.session.outgoing) + len(self.session.releasing)

    @property
    def can_publish(self) -> bool:
        """Whether a QoS 1/2 publish fits the broker's receive maximum now."""
        return self.state is State.CONNECTED and self.in_flight < self.receive_maximum

    def publish(
        self,
        topic: str,
        payload: bytes,
        *,
        qos: int = 0,
        retain: bool = False,
        properties: Properties | None = None,
        now: float = 0.0,
    ) -> int | None:
        """Send a message; its packet id (None at QoS 0). A QoS above the broker's maximum is
        lowered to it (MQTT 5 section 3.2.2.3.4)."""
        self._require_connected()
        qos = min(qos, self.maximum_qos)
        if qos and not self.can_publish:
            raise LocalProtocolError(f"{self.in_flight} messages in flight: the broker's limit")
        packet_id = self.session.allocate() if qos else None
        packet = Publish(topic, payload, qos, retain, False, packet_id, properties)
        if packet_id is not None:
            self.session.outgoing[packet_id] = packet
        self._send(packet, now)
        return packet_id

    def subscribe(
        self, subscriptions: list[Subscription], properties: Properties | None = None
    ) -> int:
        """Send SUBSCRIBE; its packet id (a `Subscribed` event answers it)."""
        self._require_connected()
        packet_id = self.session.allocate()
        self._pending_subs.add(packet_id)
        self._send(Subscribe(packet_id, tuple(subscriptions), properties))
        return packet_id

    def unsubscribe(self, filters: list[str]) -> int:
        """Send UNSUBSCRIBE; its packet id."""
        self._require_connected()
        packet_id = self.session.allocate()
        self._pending_unsubs.add(packet_id)
        self._send(Unsubscribe(packet_id, tuple(filters)))
        return packet_id

    def ack(self, message: Publish, reason_code: int = 0) -> None:
        """Acknowledge a received QoS 1 (PUBACK) or QoS 2 (PUBREC) message: the caller has it
        now, or (MQTT 5, ``reason_code`` 0x80 or more) refuses it, which ends its flow: the
        broker drops it. Nothing to do at QoS 0, or once the connection is closed (the broker
        sends the message again on the next connection)."""
        if message.qos == 0 or message.packet_id is None or self.state is not State.CONNECTED:
            return
        if self.version != MQTT_5:
            # MQTT 3.1.1 acknowledgements carry no reason: a PUBREC there is always "taken",
            # and the broker's PUBREL follows.
            reason_code = 0
        if message.qos == 1:
            self._send(Ack(PacketType.PUBACK, message.packet_id, reason_code))
            return
        self._send(Ack(PacketType.PUBREC, message.packet_id, reason_code))
        if reason_code < 0x80:
            self.session.received.add(message.packet_id)

    def disconnect(self, reason_code: int = 0, reason: str = "closed by the client") -> None:
        """End the connection with DISCONNECT (the session stays on the broker for a
        persistent client)."""
        if self.state is State.CLOSED:
            return
        self._send(Disconnect(reason_code))
        self.state = State.CLOSED

    @property
    def closed(self) -> bool:
        """Whether the connection is over."""
        return self.state is State.CLOSED

    def connection_lost(self) -> None:
        """The socket closed under the connection."""
        self.state = State.CLOSED

    # -- time -------------------------------------------------------------------------------

    def get_timer(self) -> float | None:
        """When `handle_timer` should be called next (None: never)."""
        if self.state is State.CLOSED:
            return None
        if self.state is State.CONNECTING:
            return self._connect_deadline
        deadlines = [d for d in (self._ping_deadline,) if d is not None]
        if self.keepalive:
            deadlines.append(self._last_sent + self.keepalive)
        return min(deadlines) if deadlines else None

    def handle_timer(self, now: float, *, reading: bool = True) -> list[Event]:
        """Send PINGREQ when idle for the keep-alive; close when the broker stays silent.

        ``reading=False``: the caller is not reading the socket now (it holds as many
        messages as it can take), so the broker's answer cannot arrive. PINGREQ still goes
        out, which keeps the broker from dropping an idle client, but no answer is awaited:
        one already awaited is forgotten, and the next PINGREQ sent while reading awaits
        its own."""
        if self.state is State.CONNECTING:
            if self._connect_deadline is not None and now >= self._connect_deadline:
                return self._close(0x88, "no CONNACK in time", send=False)
            return []
        if self.state is not State.CONNECTED:
            return []
        if not reading:
            self._ping_deadline = None
        elif self._ping_deadline is not None and now >= self._ping_deadline:
            return self._close(KEEP_ALIVE_TIMEOUT, "the broker did not answer PINGREQ in time")
        if self.keepalive and now >= self._last_sent + self.keepalive:
            self._send(PingReq(), now)
            if reading and self._ping_deadline is None:
                self._ping_deadline = now + self.keepalive
        return []

    # -- input ------------------------------------------------------------------------------

    def receive_data(self, data: bytes, now: float = 0.0) -> list[Event]:
        """Take bytes from the broker; the events they complete."""
        if self.state is State.CLOSED:
            return []
        self._reader.feed(data)
        try:
            packets = self._reader.packets()
        except PacketTooLarge as exc:
            return self._close(PACKET_TOO_LARGE, str(exc))
        except MQTTDecodeError as exc:
            return self._close(MALFORMED, f"malformed packet from the broker: {exc}")
        events: list[Event] = []
        for packet in packets:
            events += self._handle(packet, now)
            if self.closed:
                break
        return events

    def _close(self, code: int, reason: str, *, send: bool = True) -> list[Event]:
        if send and self.version == MQTT_5 and self.state is State.CONNECTED:
            self._send(Disconnect(code, Properties(reason_string=reason[:200])))
        self.state = State.CLOSED
        return [ConnectionClosed(code, reason)]

    def _handle(self, packet: Packet, now: float) -> list[Event]:
        self._ping_deadline = None  # any packet shows the broker is there
        if self.state is State.CONNECTING:
            if not isinstance(packet, ConnAck):
                return self._close(PROTOCOL_ERROR, f"{type(packet).__name__} before CONNACK")
            return self._on_connack(packet, now)
        if isinstance(packet, Publish):
            return self._on_publish(packet)
        if isinstance(packet, Ack):
            return self._on_ack(packet, now)
        if isinstance(packet, SubAck):
            if packet.packet_id not in self._pending_subs:
                return self._close(PROTOCOL_ERROR, f"SUBACK for unknown id {packet.packet_id}")
            self._pending_subs.discard(packet.packet_id)
            return [Subscribed(packet.packet_id, packet.reason_codes)]
        if isinstance(packet, UnsubAck):
            if packet.packet_id not in self._pending_unsubs:
                return self._close(PROTOCOL_ERROR, f"UNSUBACK for unknown id {packet.packet_id}")
            self._pending_unsubs.discard(packet.packet_id)
            return [Unsubscribed(packet.packet_id)]
        if isinstance(packet, PingResp):
            return []
        if isinstance(packet, Disconnect):
            reason = packet.properties.reason_string if packet.properties else None
            self.state = State.CLOSED
            return [ConnectionClosed(packet.reason_code, reason or "the broker disconnected")]
        if isinstance(packet, Auth):
            return self._close(PROTOCOL_ERROR, "AUTH without an authentication method")
        return self._close(PROTOCOL_ERROR, f"{type(packet).__name__} sent to a client")

    def _on_connack(self, packet: ConnAck, now: float) -> list[Event]:
        self._connect_deadline = None
        props = packet.properties or Properties()
        code = packet.reason_code
        if code >= 0x80 or (self.version != MQTT_5 and code):
            self.state = State.CLOSED
            text = props.reason_string or CONNACK_REASONS.get(code, "no reason given")
            reason = f"the broker refused the connection: {text} (CONNACK reason code {code:#04x})"
            return [ConnectionClosed(code, reason)]
        self.state = State.CONNECTED
        self.server = props
        if props.receive_maximum:
            self.receive_maximum = props.receive_maximum
        if props.maximum_qos is not None:
            self.maximum_qos = props.maximum_qos
        if props.server_keep_alive is not None:
            self.keepalive = props.server_keep_alive
        self.server_max_packet = props.maximum_packet_size
        session = self.session
        if not packet.session_present:
            session.clear()
        # What was in flight goes again, in order: marked DUP when the broker kept the session
        # (it may have seen it), as a new message when it did not (MQTT 5 section 4.4).
        for packet_id, message in list(session.outgoing.items()):
            again = replace(message, dup=packet.session_present)
            session.outgoing[packet_id] = again
            self._send(again, now)
        for packet_id in sorted(session.releasing):
            self._send(Ack(PacketType.PUBREL, packet_id), now)
        return [Connected(packet.session_present, props)]

    def _on_publish(self, packet: Publish) -> list[Event]:
        if packet.qos == 2 and packet.packet_id in self.session.received:
            # Already taken and PUBREC'd: answer again, deliver nothing twice (section 4.3.3).
            self._send(Ack(PacketType.PUBREC, packet.packet_id))
            return []
        return [MessageReceived(packet)]

    def _on_ack(self, packet: Ack, now: float) -> list[Event]:
        session = self.session
        reason = packet.properties.reason_string if packet.properties else None
        if packet.type is PacketType.PUBREL:
            session.received.discard(packet.packet_id)
            # Sent even for an id this side no longer knows (a restarted client): the message
            # was taken already, or the broker would not release it.
            self._send(Ack(PacketType.PUBCOMP, packet.packet_id), now)
            return [MessageReleased(packet.packet_id)]
        if packet.type is PacketType.PUBACK:
            if session.outgoing.pop(packet.packet_id, None) is None:
                return []
            return [PublishDone(packet.packet_id, packet.reason_code, reason)]
        if packet.type is PacketType.PUBREC:
            message = session.outgoing.pop(packet.packet_id, None)
            if packet.reason_code >= 0x80:
                if message is None:
                    return []
                return [PublishDone(packet.packet_id, packet.reason_code, reason)]
            if message is None and packet.packet_id not in session.releasing:
                # Not a message of ours: release the broker's state (MQTT 5: 0x92, packet
                # identifier not found) but track nothing, and report nothing at PUBCOMP.
                self._send(Ack(PacketType.PUBREL, packet.packet_id, 0x92), now)
                return []
            session.releasing.add(packet.packet_id)
            self._send(Ack(PacketType.PUBREL, packet.packet_id), now)
            return []
        if packet.type is PacketType.PUBCOMP:
            if packet.packet_id not in session.releasing:
                return []
            session.releasing.discard(packet.packet_id)
            return [PublishDone(packet.packet_id, packet.reason_code, reason)]
        return self._close(PROTOCOL_ERROR, f"{packet.type.name} sent to a client")
