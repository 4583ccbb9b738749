"""MQTT 3.1.1 and 5.0, sans-I/O: packets (`packets`), properties (`properties`), topic
filters (`topics`) and the client side of a connection (`connection.MQTTClientConnection`).

What the MQTT bridge (`airlane.transports.mqtt`) is built on; no I/O, and time only as the
caller's ``now``.
"""

from __future__ import annotations

from airlane.wire.mqtt.connection import (
    ClientSession,
    Connected,
    ConnectionClosed,
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
    Connect,
    PacketReader,
    Publish,
    Subscription,
    Will,
    decode_packet,
    encode_packet,
)
from airlane.wire.mqtt.primitives import MQTTDecodeError
from airlane.wire.mqtt.properties import Properties
from airlane.wire.mqtt.topics import (
    FilterTree,
    check_filter,
    check_topic,
    filter_matches,
    shared_filter,
)

__all__ = [
    "MQTT_5",
    "MQTT_311",
    "ClientSession",
    "Connect",
    "Connected",
    "ConnectionClosed",
    "FilterTree",
    "LocalProtocolError",
    "MQTTClientConnection",
    "MQTTDecodeError",
    "MessageReceived",
    "MessageReleased",
    "PacketReader",
    "Properties",
    "Publish",
    "PublishDone",
    "State",
    "Subscribed",
    "Subscription",
    "Unsubscribed",
    "Will",
    "check_filter",
    "check_topic",
    "decode_packet",
    "encode_packet",
    "filter_matches",
    "shared_filter",
]
