"""`Inbound`: what the broker sends the bridge, stored in Airlane and then acknowledged.

Messages are handled in the order they arrived (MQTT 5 section 4.6 asks acknowledgements in
that order), in batches: each QoS 1/2 message is numbered in the journal
(`airlane.transports.mqtt.journal`), routed by the first `InboundRoute` whose filter matches
its topic, appended (consecutive messages for one log in one append), and only then
acknowledged to the broker (PUBACK; PUBREC at QoS 2). A message that cannot be stored goes to
the dead-letter topic with the reason and is acknowledged once the broker has the dead letter;
one the hub cannot take *now* stays unacknowledged and is stored again after
``retry_store_s`` (`airlane.transports.mqtt.errors`). When the broker refuses the dead letter
itself (MQTT 5: a PUBACK with a failure reason code, say 0x87 where its ACL does not let the
bridge publish on the dead-letter topic), the message is lost: the bridge logs it as an error,
counts it (``dead_letters_refused``) and ends its flow, at QoS 1 with a PUBACK that carries
the failure reason code (`ack_reason`), at QoS 2 with a plain PUBREC (see `Inbound._refuse`).
Left unacknowledged it would hold one of the ``receive_maximum`` places the subscriber reads
with, for good (the broker sends nothing again until the next connection, where it would be
refused again); enough of them stopped all ingestion.

A rule that reads a topic filter adds a *tap* (`airlane.gateway.rules.Tap`): every message
matching it is also appended to the rule's input log, as the rule's owner, before the message
is acknowledged. When the broker names the subscriptions a copy was sent for (MQTT 5
subscription identifiers, `airlane.transports.mqtt.bridge.filter_identifier`), a copy is
stored only for the routes and taps they name.

Records appended to a log carry the MQTT facts as headers (``mqtt-topic``, ``mqtt-qos``,
``mqtt-retain``, ``mqtt-response-topic``, and each MQTT 5 user property as
``mqtt-user-<name>``) and an idempotency key: the publisher's identity (the user property
named by ``id_property``) when it gives one, else the journal's number. Messages routed to a
stream become ``message`` events ``{"topic": ..., "payload": ...}`` (``payload_base64`` for
one that is not JSON); streams keep no idempotency keys, so a message the broker sends again
after a crash may appear twice there (at least once), never zero times.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import logging
import re
from collections import deque
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import orjson

from airlane.core.errors import AirlaneError, ErrorCode
from airlane.core.events import Event, Lane
from airlane.gateway import NewEvent, Principal
from airlane.gateway.rules import Tap
from airlane.transports.mqtt.config import DataClass, InboundRoute, MqttBridgeConfig, fill
from airlane.transports.mqtt.errors import MQTT_REASON, ack_reason, retried
from airlane.transports.mqtt.journal import InflightJournal
from airlane.transports.mqtt.link import BrokerLink, LinkClosed, PublishRefused
from airlane.wire.mqtt import FilterTree, Properties, Publish

if TYPE_CHECKING:
    from airlane.gateway import Gateway


__all__ = ["Inbound", "InboundStats", "Publisher"]

log = logging.getLogger("airlane.mqtt")

JSON = "application/json"
OCTETS = "application/octet-stream"
_IDENTITY = re.compile(r"[!-~]{1,160}")
"""An identity a publisher gives: printable ASCII without spaces (an idempotency key)."""
DEAD_PAYLOAD_BYTES = 64 << 10
"""The most of a refused payload a dead letter carries back (base64)."""


class Publisher(Protocol):
    """`MqttBridge.publish`: returns once the broker has the message."""

    def __call__(
        self, topic: str, payload: bytes, *, qos: int, properties: Properties | None = None
    ) -> Awaitable[None]: ...


@dataclass(slots=True)
class InboundStats:
    """Counters for metrics and tests."""

    received: int = 0
    stored: int = 0
    dead_lettered: int = 0
    dead_letters_refused: int = 0
    """Messages lost: neither stored nor dead-lettered (the broker refused their dead
    letter), and acknowledged all the same (a QoS 1 one with a failure reason code)."""
    retried: int = 0
    unrouted: int = 0
    failed_batches: int = 0
    """Batches that failed unexpectedly (a bug, logged): sent again by the broker."""


@dataclass(slots=True)
class _Item:
    link: BrokerLink
    message: Publish
    number: int | None
    key: str | None


class _Refused(Exception):
    """A message that goes to the dead-letter topic."""

    def __init__(self, code: ErrorCode, text: str) -> None:
        super().__init__(text)
        self.code = code


@dataclass(frozen=True, slots=True)
class _Plan:
    """Where one message goes: a log's record or a stream's event."""

    log: str | None
    stream: str | None
    record: NewEvent | None
    event: Event | None
    data_class: DataClass | None = None
    principal: Principal | None = None
    """Who stores it: a tap's rule owner; None: the bridge."""

    @property
    def target(self) -> tuple[str | None, str | None, Principal | None]:
        """Where it is stored, as who: messages with the same targets are stored together."""
        return self.log, self.stream, self.principal


def digest(message: Publish) -> str:
    """A short digest of a message's topic and payload (tells a resent copy from another
    message that reuses its packet id)."""
    h = hashlib.blake2b(message.topic.encode(), digest_size=8)
    h.update(b"\0")
    h.update(message.payload)
    return h.hexdigest()


class Inbound:
    """Stores received messages, then acknowledges them; see the module docstring."""

    def __init__(
        self,
        config: MqttBridgeConfig,
        gateway: Gateway,
        principal: Principal,
        journal: InflightJournal,
        publish: Publisher,
    ) -> None:
        self.config = config
        self.gateway = gateway
        self.principal = principal
        self.journal = journal
        self._publish = publish
        """Publishes a dead letter (on the bridge's publisher: never on the link a message
        came by, which pauses while the bridge is full) and returns once the broker has it."""
        self.stats = InboundStats()
        self._queue: deque[_Item] = deque()
        self._lines: list[str] = []
        self._wake = asyncio.Event()
        self._known_logs: set[str] = set()
        self._routes: FilterTree[int] = FilterTree()
        for index, route in enumerate(config.inbound):
            self._routes.add(route.filter, index)
        self._taps: FilterTree[Tap] = FilterTree()
        self._targets: dict[int, set[tuple[str, object]]] = {}

    def set_taps(self, taps: list[Tap], targets: dict[int, set[tuple[str, object]]]) -> None:
        """The rules' taps, and which routes (``("route", index)``) and taps (``("tap",
        key)``) each subscription identifier stands for."""
        tree: FilterTree[Tap] = FilterTree()
        for tap in taps:
            tree.add(tap.filter, tap)
        self._taps = tree
        self._targets = targets

    # -- intake (called by the link, synchronously, in arrival order) -----------------------

    def take(self, link: BrokerLink, message: Publish) -> None:
        """Queue a message the link received; the queue is bounded by the link, which stops
        reading at ``receive_maximum`` messages held."""
        self.stats.received += 1
        number = None
        key = self._identity(message)
        if message.qos and message.packet_id is not None:
            taken, line = self.journal.take(message.packet_id, digest(message), message.dup)
            number = taken.number
            key = key or taken.key
            if line is not None:
                self._lines.append(line)
        self._queue.append(_Item(link, message, number, key))
        self._wake.set()

    def _identity(self, message: Publish) -> str | None:
        props = message.properties
        value = props.user(self.config.id_property) if props is not None else None
        if value is None or _IDENTITY.fullmatch(value) is None:
            return None
        return f"mqtt.id.{value}"

    def release(self, packet_ids: list[int]) -> None:
        """PUBREL for QoS 2 messages: mark them settled in the journal, in one write (their
        PUBCOMPs go right after)."""
        lines = [line for pid in packet_ids if (line := self.journal.release(pid)) is not None]
        self.journal.write(lines)

    # -- the worker -------------------------------------------------------------------------

    async def run(self) -> None:
        """Store and acknowledge what comes, forever (cancel to stop)."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._queue:
                batch = [
                    self._queue.popleft() for _ in range(min(len(self._queue), self.config.batch))
                ]
                # The numbers are on disk before anything is stored under them.
                self.journal.write(self._lines)
                self._lines.clear()
                try:
                    await self._handle(batch)
                except Exception:
                    self._failed(batch)

    def _failed(self, batch: list[_Item]) -> None:
        """``batch`` failed in a way nothing handles (a bug: the hub's and the broker's
        failures are handled where they happen). Said loudly, and its connections closed
        without acknowledging what is left of it, so that the broker sends that again on
        the next one; the task serves on (it used to end, and ingestion with it, silently)."""
        log.exception("mqtt bridge %s: a batch failed unexpectedly", self.config.name)
        self.stats.failed_batches += 1
        for link in {id(item.link): item.link for item in batch}.values():
            link.close()

    async def _handle(self, batch: list[_Item]) -> None:
        group: list[tuple[_Item, list[_Plan]]] = []
        for item in batch:
            try:
                plans = self._plans(item.message, item.key)
            except _Refused as refused:
                await self._flush(group)
                group = []
                await self._dead_letter(item, refused.code, str(refused))
                continue
            if not plans:
                self.stats.unrouted += 1
                await self._flush(group)
                group = []
                self._ack([item])
                continue
            if group and _targets(group[0][1]) != _targets(plans):
                await self._flush(group)
                group = []
            group.append((item, plans))
        await self._flush(group)

    def _allowed(self, message: Publish) -> set[tuple[str, object]] | None:
        """The routes and taps this copy was sent for; None: any (no identifiers)."""
        props = message.properties
        if props is None or not props.subscription_identifiers or not self._targets:
            return None
        allowed: set[tuple[str, object]] = set()
        for identifier in props.subscription_identifiers:
            allowed |= self._targets.get(identifier, set())
        return allowed

    def _plans(self, message: Publish, key: str | None) -> list[_Plan]:
        allowed = self._allowed(message)
        plans = []
        matches = self._routes.match(message.topic)
        if matches and (allowed is None or ("route", min(matches)) in allowed):
            # The first matching route wins.
            plans.append(self._plan(self.config.inbound[min(matches)], message, key))
        for tap in self._taps.match(message.topic):
            if allowed is None or ("tap", tap.key) in allowed:
                self._check_size(message)
                record = self._record(message, key, None, type="mqtt.message")
                plans.append(_Plan(tap.log, None, record, None, None, tap.principal))
        return plans

    def _check_size(self, message: Publish) -> None:
        if message.oversize:
            raise _Refused(
                ErrorCode.EVENT_TOO_LARGE,
                f"a payload of {message.oversize} bytes: the bridge reads packets of at most "
                f"{self.config.max_packet} bytes (max_packet)",
            )
        if len(message.payload) > self.config.max_message:
            raise _Refused(
                ErrorCode.EVENT_TOO_LARGE,
                f"a payload of {len(message.payload)} bytes: the bridge stores at most "
                f"{self.config.max_message}",
            )

    def _record(
        self,
        message: Publish,
        key: str | None,
        data_class: DataClass | None,
        *,
        type: str,
        content_type: str | None = None,
    ) -> NewEvent:
        if content_type is None:
            props = message.properties
            content_type = (props.content_type if props is not None else None) or JSON
        try:
            headers = _headers(message)
            if data_class is not None:
                headers["mqtt-class"] = data_class.name
            return NewEvent(type, message.payload, content_type, headers, key)
        except ValueError as exc:
            raise _Refused(ErrorCode.INVALID_REQUEST, str(exc)) from None

    def _plan(self, route: InboundRoute, message: Publish, key: str | None) -> _Plan:
        self._check_size(message)
        try:
            target = fill(route.log or route.stream or "", message.topic.split("/"))
        except KeyError as exc:
            raise _Refused(
                ErrorCode.INVALID_LOG_NAME,
                f"the topic has no level {exc.args[0]} to name its target",
            ) from None
        content_type, parsed = self._content(route, message)
        data_class = self.config.data_class(route)
        if route.log is not None:
            record = self._record(
                message, key, data_class, type=route.type, content_type=content_type
            )
            return _Plan(target, None, record, None, data_class)
        body: dict[str, object] = {"topic": message.topic}
        if parsed is not _NOT_JSON:
            body["payload"] = parsed
        else:
            body["payload_base64"] = base64.b64encode(message.payload).decode("ascii")
        lane = Lane.INTERACTIVE if data_class is None else Lane[data_class.lane.upper()]
        return _Plan(None, target, None, Event.message(body, lane=lane), data_class)

    def _content(self, route: InboundRoute, message: Publish) -> tuple[str, object]:
        props = message.properties
        declared = (props.content_type if props is not None else None) or route.content_type
        parsed: object = _NOT_JSON
        if declared is None or declared == JSON or route.require_json or route.stream is not None:
            try:
                parsed = orjson.loads(message.payload)
            except orjson.JSONDecodeError:
                parsed = _NOT_JSON
        if route.require_json and parsed is _NOT_JSON:
            raise _Refused(
                ErrorCode.INVALID_JSON, "the payload is not JSON and the route requires JSON"
            )
        if declared is not None:
            return declared, parsed
        return (JSON if parsed is not _NOT_JSON else OCTETS), parsed

    async def _flush(self, group: list[tuple[_Item, list[_Plan]]]) -> None:
        """Store ``group`` (messages with the same targets) in each target, then acknowledge
        it."""
        if not group:
            return
        while True:
            try:
                for index, plan in enumerate(group[0][1]):
                    await self._store(plan, [plans[index] for _, plans in group])
            except Exception as exc:
                code = exc.code if isinstance(exc, AirlaneError) else ErrorCode.INTERNAL_ERROR
                if code is ErrorCode.INTERNAL_ERROR:
                    log.exception("mqtt bridge %s: storing failed", self.config.name)
                if retried(code):
                    if not any(_alive(item.link) for item, _ in group):
                        # Nobody to acknowledge to: the broker sends these again.
                        return
                    self.stats.retried += 1
                    log.warning(
                        "mqtt bridge %s: storing failed (%s), retrying", self.config.name, exc
                    )
                    await asyncio.sleep(self.config.retry_store_s)
                    continue
                if len(group) > 1:
                    # One bad message in the batch: store them one by one to find it.
                    for single in group:
                        await self._flush([single])
                    return
                await self._dead_letter(group[0][0], code, str(exc))
                return
            break
        self.stats.stored += len(group)
        self._ack([item for item, _ in group])

    async def _store(self, plan: _Plan, plans: list[_Plan]) -> None:
        """Store one target's share of a group (idempotent: a retry stores nothing twice in a
        log)."""
        principal = plan.principal or self.principal
        if plan.log is not None:
            records = [p.record for p in plans if p.record is not None]
            await self._append(principal, plan.log, records, plan.data_class)
        else:
            assert plan.stream is not None
            for p in plans:
                assert p.event is not None
                await self.gateway.publish(principal, plan.stream, p.event)

    async def _append(
        self,
        principal: Principal,
        name: str,
        records: list[NewEvent],
        data_class: DataClass | None,
    ) -> None:
        logs = self.gateway.logs
        try:
            await logs.append(principal, name, records)
        except AirlaneError as exc:
            if exc.code is not ErrorCode.LOG_NOT_FOUND or name in self._known_logs:
                raise
            if data_class is None:
                await logs.create(principal, name)
            else:
                await logs.create(
                    principal,
                    name,
                    max_age_s=data_class.max_age_s,
                    max_bytes=data_class.max_bytes,
                    max_events=data_class.max_events,
                )
            self._known_logs.add(name)
            await logs.append(principal, name, records)

    def _ack(self, items: list[_Item], reason_code: int = 0) -> None:
        """Acknowledge ``items`` to the broker; a ``reason_code`` of 0x80 or more refuses
        them (MQTT 5), which ends their flow too."""
        # QoS 2 stays live until PUBREL (`release`): until then the broker may resend it. A
        # refusal gets no PUBREL (MQTT 3.1.1 has no refusal: its PUBREC is always "taken").
        refused = reason_code >= 0x80 and self.config.protocol == 5
        lines = []
        for item in items:
            message = item.message
            ends = message.qos == 1 or (message.qos == 2 and refused)
            live = ends and item.number is not None and _alive(item.link)
            if live and item.number is not None and message.packet_id is not None:
                line = self.journal.settle(message.packet_id, item.number)
                if line is not None:
                    lines.append(line)
        # Marked acknowledged before the acknowledgement goes: see the journal's docstring.
        self.journal.write(lines)
        links = {}
        for item in items:
            item.link.settle(item.message, reason_code, flush=False)
            links[id(item.link)] = item.link
        for link in links.values():
            link.flush()

    async def _dead_letter(self, item: _Item, code: ErrorCode, text: str) -> None:
        message = item.message
        body: dict[str, object] = {
            "error": code.value,
            "message": text,
            "topic": message.topic,
            "qos": message.qos,
            "bytes": message.oversize or len(message.payload),
        }
        if not message.oversize and len(message.payload) <= DEAD_PAYLOAD_BYTES:
            body["payload_base64"] = base64.b64encode(message.payload).decode("ascii")
        props = Properties(
            content_type=JSON,
            user_properties=(
                ("error", code.value),
                ("reason-code", str(MQTT_REASON[code])),
                ("topic", message.topic),
            ),
        )
        log.warning(
            "mqtt bridge %s: %s to the dead-letter topic: %s", self.config.name, message.topic, text
        )
        try:
            await self._publish(
                self.config.dead_letter_topic, orjson.dumps(body), qos=1, properties=props
            )
        except LinkClosed as exc:
            # Only when the bridge closes (the publisher waits for a connection otherwise).
            # Not acknowledged: the broker sends the message again to the next run.
            log.warning("mqtt bridge %s: dead letter not delivered: %s", self.config.name, exc)
            return
        except PublishRefused as exc:
            self._refuse(item, code, text, exc)
            return
        self.stats.dead_lettered += 1
        self._ack([item])

    def _refuse(self, item: _Item, code: ErrorCode, text: str, exc: PublishRefused) -> None:
        """The broker refused the dead letter: end the message's flow rather than hold it
        unacknowledged (see the module docstring). It is lost.

        A QoS 1 message is refused back with the reason code in its PUBACK. A QoS 2 one gets
        a plain PUBREC: Mosquitto (2.0.11) does not give back the place in its receive
        maximum of a message refused in a PUBREC, so after ``receive_maximum`` of them it
        sent the bridge nothing more until the next connection."""
        self.stats.dead_letters_refused += 1
        reason = ack_reason(code) if item.message.qos == 1 else 0
        log.error(
            "mqtt bridge %s: a message on %s is lost: it cannot be stored (%s) and the broker "
            "refused its dead letter on %s (%s); settled with the broker (reason code %#04x)",
            self.config.name,
            item.message.topic,
            text,
            self.config.dead_letter_topic,
            exc,
            reason,
        )
        self._ack([item], reason)


def _alive(link: BrokerLink) -> bool:
    connection = link.connection
    return connection is not None and not connection.closed


class _NotJson:
    pass


_NOT_JSON = _NotJson()


def _headers(message: Publish) -> dict[str, str]:
    headers = {
        "mqtt-topic": message.topic,
        "mqtt-qos": str(message.qos),
    }
    if message.retain:
        headers["mqtt-retain"] = "1"
    props = message.properties
    if props is not None:
        if props.response_topic:
            headers["mqtt-response-topic"] = props.response_topic
        for name, value in props.user_properties[:16]:
            headers[f"mqtt-user-{name}"] = value
    return headers


def _targets(plans: list[_Plan]) -> list[tuple[str | None, str | None, Principal | None]]:
    return [plan.target for plan in plans]
