"""`MqttBridge`: Airlane as an MQTT client of one broker, moving messages both ways.

Two connections, each owned by one task that connects (MQTT 5 or 3.1.1, TLS for
``mqtts://``, a persistent session: Clean Start 0 and the configured session expiry), reads
until the connection ends, and connects again after a pause that doubles from
``reconnect_min_s`` to ``reconnect_max_s`` (with jitter):

- the **subscriber** (the configured client identifier) subscribes the inbound routes' filters
  and receives. It stops reading while the bridge holds ``receive_maximum`` messages not yet
  stored: that is the bridge's backpressure.
- the **publisher** (the identifier with ``-pub``) carries everything the bridge publishes:
  dead letters, outbound routes, the rules' actions. It subscribes nothing, so it always reads,
  and the broker's acknowledgements of what the bridge publishes never wait behind a paused
  subscriber. On one connection they did: the inbound worker waited for the PUBACK of a dead
  letter before acknowledging the refused message, while the link, full, no longer read, so it
  waited for itself, forever. (Mosquitto 2.0 also lets a client's own publishes raise the
  number of messages it sends that client past the receive maximum.)

Each connection's session state (`ClientSession`) belongs to the bridge, and so do the waiters
for the broker's acknowledgements, so a message published just before a drop is settled on
the next connection, which sends it again.

Inbound messages go through `airlane.transports.mqtt.inbound.Inbound` (stored, then
acknowledged). Each outbound route has a forwarder task (`airlane.transports.mqtt.outbound`).
Every task is the bridge's; `aclose` ends them all and leaves the broker with a DISCONNECT.

The bridge offers itself to the gateway's rules (`airlane.gateway.rules.TopicPublisher`): their
actions publish through it, and each rule that reads a topic filter adds a `Tap`, a filter
subscribed beside the inbound routes whose messages are stored in the rule's input log.

**Overlapping filters.** A broker may send one copy of a message per matching subscription
(Mosquitto does). Over MQTT 5 each filter is subscribed with its own subscription identifier,
derived from the filter's text (`filter_identifier`, the same after a restart, when queued
messages arrive with the identifiers they were matched with), and a copy is stored only for
the routes and taps its identifiers name: once for its first matching route, once per tap.
Over MQTT 3.1.1, which has no identifiers, overlapping filters store a message once per copy
the broker sends.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import random
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airlane.gateway import Principal, principal_named
from airlane.gateway.rules import Tap
from airlane.transports.mqtt.config import MqttBridgeConfig
from airlane.transports.mqtt.inbound import Inbound, InboundStats
from airlane.transports.mqtt.journal import InflightJournal
from airlane.transports.mqtt.link import BrokerLink, LinkClosed, settled
from airlane.transports.mqtt.outbound import Forwarder, OutboundStats, Positions
from airlane.wire.mqtt import ClientSession, Properties, Publish, PublishDone, Subscription

if TYPE_CHECKING:
    from airlane.gateway import Gateway

__all__ = ["BridgeStats", "MqttBridge", "filter_identifier"]

log = logging.getLogger("airlane.mqtt")


@dataclass(slots=True)
class BridgeStats:
    """The bridge's counters."""

    connects: int = 0
    """Connections made by the subscriber."""
    connected: bool = False
    """Whether the subscriber is connected and subscribed."""
    publisher_connects: int = 0
    """Connections made by the publisher (for rules' forwards)."""
    last_error: str | None = None
    """Why the latest failed connection of either one (subscriber or publisher) failed."""
    refused_filters: int = 0
    """Filters the broker refused to subscribe."""


def filter_identifier(filter: str) -> int:
    """The MQTT 5 subscription identifier a filter is subscribed with: from its text, so
    the same after a restart (1 to 2**28 - 1)."""
    digest = hashlib.blake2b(filter.encode(), digest_size=4).digest()
    return int.from_bytes(digest, "big") % (2**28 - 1) + 1


class MqttBridge:
    """A bridge to one broker; `start`, later `aclose`."""

    def __init__(
        self, gateway: Gateway, config: MqttBridgeConfig, *, state_dir: Path | None = None
    ) -> None:
        self.config = config
        self.gateway = gateway
        base = state_dir or Path(config.state_dir or Path(".airlane") / "mqtt" / config.name)
        self.state_dir = base
        spec = principal_named(config.principal)
        self.principal = Principal(spec.name, spec.roles, spec.tenant, via="mqtt-bridge")
        self.session = ClientSession()
        self.journal = InflightJournal(base)
        self.inbound = Inbound(config, gateway, self.principal, self.journal, self.publish)
        self.positions = Positions(base / "outbound.json")
        self.stats = BridgeStats()
        self.link: BrokerLink | None = None
        """The subscriber's connection."""
        self.up = asyncio.Event()
        """Set while the subscriber is connected and subscribed."""
        self.publisher: BrokerLink | None = None
        self.publisher_session = ClientSession()
        self.publisher_up = asyncio.Event()
        """Set while the publisher is connected."""
        self._publishes: dict[int, asyncio.Future[PublishDone]] = {}
        """The publisher's waiters for the broker's acknowledgements."""
        self._tasks: list[asyncio.Task[None]] = []
        self._closing = False
        self.forwarders = [
            Forwarder(self, route, index) for index, route in enumerate(config.outbound)
        ]
        self.taps: dict[str, Tap] = {}
        """The rules' topic filters, by rule key."""
        self._side_tasks: set[asyncio.Task[None]] = set()

    @property
    def name(self) -> str:
        """The bridge's name (``[[mqtt]] name``)."""
        return self.config.name

    @property
    def inbound_stats(self) -> InboundStats:
        """The inbound pipeline's counters."""
        return self.inbound.stats

    @property
    def outbound_stats(self) -> list[OutboundStats]:
        """Each outbound route's counters."""
        return [forwarder.stats for forwarder in self.forwarders]

    async def start(self) -> None:
        """Open the journal and start the tasks (the first connection is made in the
        background: a broker that is down does not stop Airlane from serving)."""
        self.journal.open()
        self.positions.load()
        name = self.config.name
        self._tasks.append(asyncio.create_task(self._connect_loop(), name=f"mqtt-{name}"))
        self._tasks.append(
            asyncio.create_task(self._connect_loop(publisher=True), name=f"mqtt-{name}-pub")
        )
        self._tasks.append(asyncio.create_task(self.inbound.run(), name=f"mqtt-{name}-in"))
        for forwarder in self.forwarders:
            self._tasks.append(asyncio.create_task(forwarder.run(), name=f"mqtt-{name}-out"))
        self.gateway.rules.register(self)

    async def aclose(self) -> None:
        """Stop: DISCONNECT from the broker (the session stays there), end every task."""
        self._closing = True
        self.gateway.rules.unregister(self)
        tasks = [*self._tasks, *self._side_tasks]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        for link in (self.link, self.publisher):
            if link is not None:
                with contextlib.suppress(Exception):
                    await link.disconnect()
        for waiter in self._publishes.values():
            if not waiter.done():
                waiter.set_exception(LinkClosed("the bridge is closing"))
        self._publishes.clear()
        self.journal.close()
        self.positions.save()

    @property
    def publisher_identifier(self) -> str:
        """The MQTT client identifier of the publishing connection."""
        return f"{self.config.identifier}-pub"

    async def wait_connected(self, timeout_s: float) -> None:
        """Wait until both connections are up and the subscriber has subscribed
        (TimeoutError otherwise)."""
        async with asyncio.timeout(timeout_s):
            await self.up.wait()
            await self.publisher_up.wait()

    # -- the connection ---------------------------------------------------------------------

    def _new_link(self, publisher: bool) -> BrokerLink:
        config = self.config
        if publisher:
            link = BrokerLink(
                config,
                self.publisher_session,
                _unexpected,
                _no_release,
                self._publishes,
                max_pending=config.receive_maximum,
                identifier=self.publisher_identifier,
            )
            self.publisher = link
        else:
            # Its acknowledgement waiters stay empty: nothing is published on it.
            link = BrokerLink(
                config,
                self.session,
                self.inbound.take,
                self.inbound.release,
                {},
                max_pending=config.receive_maximum,
            )
            self.link = link
        return link

    async def _connect_loop(self, *, publisher: bool = False) -> None:
        config = self.config
        up = self.publisher_up if publisher else self.up
        # Both connections log their failures; the role tells them apart.
        role = "publisher" if publisher else "subscriber"
        pause = config.reconnect_min_s
        while not self._closing:
            link = self._new_link(publisher)
            try:
                connected = await link.connect()
                if publisher:
                    self.stats.publisher_connects += 1
                else:
                    self.stats.connects += 1
                log.info(
                    "mqtt bridge %s: %s connected to %s:%d as %s (session %s)",
                    config.name,
                    role,
                    config.address.host,
                    config.address.port,
                    link.identifier,
                    "resumed" if connected.session_present else "new",
                )
                runner = asyncio.create_task(link.run())
                try:
                    if not publisher:
                        await self._subscribe(link)
                        self.stats.connected = True
                    up.set()
                    pause = config.reconnect_min_s
                    await runner
                finally:
                    runner.cancel()
                    with contextlib.suppress(asyncio.CancelledError, LinkClosed):
                        await runner
            except LinkClosed as exc:
                self.stats.last_error = str(exc)
                log.warning("mqtt bridge %s: %s: %s", config.name, role, exc)
            except Exception as exc:  # a bug must not end the bridge: log it, connect again
                self.stats.last_error = f"{type(exc).__name__}: {exc}"
                log.exception("mqtt bridge %s: %s: the connection failed", config.name, role)
            finally:
                up.clear()
                if not publisher:
                    self.stats.connected = False
                link.close()
            if self._closing:
                return
            await asyncio.sleep(pause * random.uniform(0.5, 1.0))
            pause = min(pause * 2, config.reconnect_max_s)

    def _filters(self) -> dict[str, int]:
        """Every filter to subscribe, with its QoS (the highest asked for it)."""
        qos = self.config.qos
        filters: dict[str, int] = {}
        for route in self.config.inbound:
            filters[route.filter] = max(filters.get(route.filter, 0), qos(route))
        for tap in self.taps.values():
            filters[tap.filter] = max(filters.get(tap.filter, 0), tap.qos)
        return filters

    def _targets(self) -> None:
        """Tell the inbound pipeline which routes and taps each identifier stands for."""
        targets: dict[int, set[tuple[str, object]]] = {}
        for index, route in enumerate(self.config.inbound):
            targets.setdefault(filter_identifier(route.filter), set()).add(("route", index))
        for key, tap in self.taps.items():
            targets.setdefault(filter_identifier(tap.filter), set()).add(("tap", key))
        self.inbound.set_taps(list(self.taps.values()), targets)

    async def _subscribe(self, link: BrokerLink, only: str | None = None) -> None:
        filters = self._filters()
        if only is not None:
            filters = {only: filters[only]} if only in filters else {}
        if not filters:
            return
        # Retain handling 1: retained messages only for a subscription the session lacked
        # (a resumed session does not get them all again).
        subs = [Subscription(f, q, retain_handling=1) for f, q in filters.items()]
        if link.subscription_identifiers:
            answers = await asyncio.gather(
                *(link.subscribe([sub], filter_identifier(sub.filter)) for sub in subs)
            )
            codes: Sequence[int] = [answer[0] if answer else 0x80 for answer in answers]
        else:
            codes = await link.subscribe(subs)
        for sub, code in zip(subs, codes, strict=False):
            if code >= 0x80:
                self.stats.refused_filters += 1
                log.error(
                    "mqtt bridge %s: the broker refused the subscription %r (reason %#04x)",
                    self.config.name,
                    sub.filter,
                    code,
                )

    # -- for the rules ----------------------------------------------------------------------

    def add_tap(self, tap: Tap) -> None:
        """Subscribe to a rule's topic filter; store what comes in its input log."""
        self.taps[tap.key] = tap
        self._targets()
        link = self.link
        if self.up.is_set() and link is not None:
            self._side(self._subscribe(link, only=tap.filter), f"tap {tap.filter}")

    def remove_tap(self, key: str) -> None:
        """Stop storing for the rule ``key``; unsubscribe its filter if nothing else uses it."""
        tap = self.taps.pop(key, None)
        if tap is None:
            return
        self._targets()
        link = self.link
        if tap.filter not in self._filters() and self.up.is_set() and link is not None:
            with contextlib.suppress(LinkClosed):
                link.unsubscribe([tap.filter])

    def _side(self, work: Coroutine[Any, Any, None], what: str) -> None:
        async def run() -> None:
            try:
                await work
            except LinkClosed:
                pass  # the next connection subscribes everything again
            except Exception:
                log.exception("mqtt bridge %s: %s failed", self.config.name, what)

        task = asyncio.create_task(run(), name=f"mqtt-{self.config.name} {what}")
        self._side_tasks.add(task)
        task.add_done_callback(self._side_tasks.discard)

    async def publish_json(
        self,
        topic: str,
        payload: bytes,
        *,
        qos: int,
        retain: bool = False,
        message_expiry_s: int | None = None,
        user_properties: Sequence[tuple[str, str]] = (),
    ) -> None:
        """Publish a JSON payload with its content type and user properties (MQTT 5; over
        3.1.1 the payload only); return once the broker has it (QoS 1/2)."""
        properties = None
        if self.config.protocol == 5:
            properties = Properties(
                content_type="application/json",
                message_expiry_interval=message_expiry_s,
                user_properties=tuple(user_properties),
            )
        await self.publish(topic, payload, qos=qos, retain=retain, properties=properties)

    async def publish(
        self,
        topic: str,
        payload: bytes,
        *,
        qos: int,
        retain: bool = False,
        properties: Properties | None = None,
    ) -> None:
        """Publish through the bridge, waiting for a connection if there is none, and (QoS
        1/2) until the broker has the message, across reconnections."""
        await settled(
            await self.send(topic, payload, qos=qos, retain=retain, properties=properties)
        )

    async def send(
        self,
        topic: str,
        payload: bytes,
        *,
        qos: int,
        retain: bool = False,
        properties: Properties | None = None,
    ) -> asyncio.Future[PublishDone] | None:
        """Hand a message to the publisher connection, waiting for one if there is none and
        for room under the broker's receive maximum; at QoS 1/2 return the future the broker's
        acknowledgement settles (`settled` waits for it), across reconnections. Messages sent
        one after another go to the broker in that order, a reconnection included: what the
        last connection had sent goes again first (the session's), then the rest."""
        while True:
            await self.publisher_up.wait()
            link = self.publisher
            if link is None:
                continue
            try:
                return await link.publish(
                    topic, payload, qos=qos, retain=retain, properties=properties
                )
            except LinkClosed:
                # The connection task clears ``up`` in a moment; then wait for the next one.
                await asyncio.sleep(0.05)


def _unexpected(link: BrokerLink, message: Publish) -> None:
    """A message on the publisher, which subscribes nothing (a session left from elsewhere):
    acknowledged, not stored."""
    log.warning("mqtt bridge: a message on %s for the publisher, dropped", message.topic)
    link.settle(message)


def _no_release(packet_ids: list[int]) -> None:
    pass
