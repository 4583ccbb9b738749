"""What the MQTT bridge tests share: the bridge's principal, a wait for a log's records, and
an MQTT 5 client (paho-mqtt through aiomqtt) of a test broker."""

from __future__ import annotations

import asyncio
from typing import Any

import aiomqtt

from airlane.gateway import Gateway
from airlane.security import principal_named

__all__ = ["PRINCIPAL", "stored", "v5_client"]

PRINCIPAL = principal_named("mqtt-bridge@default")
"""Who a default bridge stores as."""


async def stored(
    gateway: Gateway, log: str, count: int, timeout: float = 10.0, limit: int = 10_000
) -> list[Any]:
    """``log``'s records once it holds ``count`` (or whatever it holds after ``timeout``)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            found = await gateway.logs.read(PRINCIPAL, log, limit=limit)
        except Exception:  # the log is created by the first append
            found = []
        if len(found) >= count or asyncio.get_running_loop().time() > deadline:
            return found
        await asyncio.sleep(0.05)


def v5_client(port: int, name: str) -> aiomqtt.Client:
    """An MQTT 5 client of the broker on loopback ``port``."""
    return aiomqtt.Client("127.0.0.1", port, identifier=name, protocol=aiomqtt.ProtocolVersion.V5)
