"""Outbound: Airlane streams published to MQTT topics.

A `Forwarder` follows one `OutboundRoute`'s stream through the gateway, as the bridge's
principal, and publishes each event (its native JSON form, `airlane.wire.event_json`) to the
route's topic at its QoS, with MQTT 5 properties: content type ``application/json``, the
message expiry if set, and user properties ``stream``, ``epoch`` and ``seq`` (the position a
consumer resumes from, and de-duplicates with). At QoS 1/2 the position a batch reaches is
saved (`Positions`, a JSON file in the bridge's state directory) once the broker has
acknowledged every message of it, so a restarted bridge resumes where the broker stopped
acknowledging: a message is published at least once, and a consumer that keeps the highest
``seq`` per ``epoch`` sees each once. A batch's messages are sent one after another and their
acknowledgements awaited together, so they reach the broker in the stream's order, across a
reconnection too (the session sends what was in flight again first).

A stream that does not exist yet is waited for (checked every `WAIT_STREAM_S`); a stream that
ends stops the forwarder after its terminal event (unless the route's ``terminal`` is false,
then the end is not published).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from airlane.core.errors import AirlaneError, ErrorCode
from airlane.core.events import Event, Kind
from airlane.core.position import Position
from airlane.transports.mqtt.config import OutboundRoute
from airlane.transports.mqtt.link import PublishRefused, settled
from airlane.wire.event_json import event_to_dict, event_to_json
from airlane.wire.mqtt import Properties, PublishDone

if TYPE_CHECKING:
    from airlane.transports.mqtt.bridge import MqttBridge

__all__ = ["WAIT_STREAM_S", "Forwarder", "OutboundStats", "Positions"]

log = logging.getLogger("airlane.mqtt")

WAIT_STREAM_S = 1.0
"""How often a forwarder looks for a stream that does not exist yet."""
BATCH = 64
"""Events taken from the stream at a time."""
_TERMINAL = frozenset({Kind.DONE, Kind.ERROR})


@dataclass(slots=True)
class OutboundStats:
    """One route's counters."""

    stream: str
    published: int = 0
    refused: int = 0
    finished: bool = False


class Positions:
    """The last acknowledged position of each outbound route, kept in a JSON file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._positions: dict[str, str] = {}

    def load(self) -> None:
        """Read the file (a missing or unreadable one is empty: every route starts over)."""
        try:
            data = json.loads(self.path.read_text("utf-8"))
        except (OSError, ValueError):
            return
        if isinstance(data, dict):
            self._positions = {str(k): str(v) for k, v in data.items()}

    def get(self, route: str) -> Position | None:
        """The saved position of ``route``."""
        token = self._positions.get(route)
        if token is None:
            return None
        try:
            return Position.parse(token)
        except AirlaneError:
            return None

    def set(self, route: str, position: Position) -> None:
        """Remember ``route``'s position and save the file."""
        self._positions[route] = position.token
        self.save()

    def save(self) -> None:
        """Write the file atomically."""
        if not self._positions:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self._positions, sort_keys=True), "utf-8")
        os.replace(tmp, self.path)


class Forwarder:
    """Publishes one route's stream; see the module docstring."""

    def __init__(self, bridge: MqttBridge, route: OutboundRoute, index: int) -> None:
        self.bridge = bridge
        self.route = route
        self.key = f"{index}:{route.stream}->{route.topic}"
        self.stats = OutboundStats(route.stream)

    async def run(self) -> None:
        """Follow the stream until it ends (cancel to stop)."""
        route = self.route
        gateway = self.bridge.gateway
        principal = self.bridge.principal
        while True:
            position = self.bridge.positions.get(self.key)
            try:
                subscription = await gateway.subscribe(
                    principal, route.stream, resume=position, subscriber="mqtt-bridge"
                )
            except AirlaneError as exc:
                if exc.code not in (ErrorCode.STREAM_NOT_FOUND, ErrorCode.NOT_FOUND):
                    log.warning("mqtt bridge: cannot follow %s: %s", route.stream, exc)
                await asyncio.sleep(WAIT_STREAM_S)
                continue
            async with contextlib.AsyncExitStack() as stack:
                stack.push_async_callback(subscription.aclose)
                # Each delta with its own seq: what a restart publishes again after the saved
                # position is copies a consumer skips by seq, never a merged delta repeating
                # text it has.
                subscription.keep_deltas_apart()
                while True:
                    events = await subscription.next_batch(BATCH)
                    if not events:
                        break
                    epoch = subscription.position.epoch
                    # Sent one by one, so the broker gets them in the stream's order (a
                    # consumer keeping the last seq skips an earlier one that comes after a
                    # later one), then their acknowledgements awaited together: one round
                    # trip per batch.
                    wanted = [e for e in events if route.terminal or e.kind not in _TERMINAL]
                    sent = [(event, await self._send(event, epoch)) for event in wanted]
                    for event, waiter in sent:
                        await self._settle(event, waiter)
                    if route.qos:
                        self.bridge.positions.set(self.key, subscription.position)
            if subscription.finished:
                self.stats.finished = True
                return
            await asyncio.sleep(WAIT_STREAM_S)

    async def _send(self, event: Event, epoch: str) -> asyncio.Future[PublishDone] | None:
        """Hand ``event`` to the bridge's publisher; what settles once the broker has it."""
        route = self.route
        properties = Properties(
            content_type="application/json",
            message_expiry_interval=route.message_expiry_s,
            user_properties=(
                ("stream", route.stream),
                ("epoch", epoch),
                ("seq", str(event.seq)),
            ),
        )
        if self.bridge.config.protocol == 5:
            payload = event_to_json(event)
        else:
            # MQTT 3.1.1 has no properties: the position rides in the body instead.
            body = {**event_to_dict(event), "stream": route.stream, "epoch": epoch}
            payload = orjson.dumps(body)
        return await self.bridge.send(
            route.topic,
            payload,
            qos=route.qos,
            retain=route.retain,
            properties=properties if self.bridge.config.protocol == 5 else None,
        )

    async def _settle(self, event: Event, waiter: asyncio.Future[PublishDone] | None) -> None:
        """Wait for the broker's acknowledgement of ``event`` and count it."""
        try:
            await settled(waiter)
        except PublishRefused as exc:
            self.stats.refused += 1
            log.warning(
                "mqtt bridge: the broker refused %s seq %d: %s", self.route.topic, event.seq, exc
            )
            return
        self.stats.published += 1
