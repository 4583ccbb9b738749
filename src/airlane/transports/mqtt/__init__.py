"""The MQTT bridge: Airlane as an MQTT 5 (or 3.1.1) client of a broker, storing what arrives
on topics into event logs and streams, and publishing streams to topics (docs/edge.md).

`MqttBridge` is one broker; `MqttBridgeConfig` says which and how topics map (`InboundRoute`,
`OutboundRoute`). The wire is `airlane.wire.mqtt`.
"""

from __future__ import annotations

from airlane.transports.mqtt.bridge import BridgeStats, MqttBridge
from airlane.transports.mqtt.config import (
    DEFAULT_CLASSES,
    DEFAULT_INBOUND,
    BrokerAddress,
    DataClass,
    InboundRoute,
    MqttBridgeConfig,
    OutboundRoute,
    parse_broker_url,
)
from airlane.transports.mqtt.errors import MQTT_REASON
from airlane.transports.mqtt.inbound import InboundStats
from airlane.transports.mqtt.outbound import OutboundStats

__all__ = [
    "DEFAULT_CLASSES",
    "DEFAULT_INBOUND",
    "MQTT_REASON",
    "BridgeStats",
    "BrokerAddress",
    "DataClass",
    "InboundRoute",
    "InboundStats",
    "MqttBridge",
    "MqttBridgeConfig",
    "OutboundRoute",
    "OutboundStats",
    "parse_broker_url",
]
