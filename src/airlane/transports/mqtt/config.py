"""Configuration of the MQTT bridge: the broker to reach (`MqttBridgeConfig`), and how topics
map to Airlane's event logs and streams (`InboundRoute`) and streams to topics
(`OutboundRoute`).

In a TOML file each bridge is one ``[[mqtt]]`` table, its routes ``[[mqtt.inbound]]`` and
``[[mqtt.outbound]]``; ``airlane serve --mqtt URL`` adds a bridge with the default routes
(`DEFAULT_INBOUND`: ``airlane/logs/<log>`` into the log ``<log>``). See docs/edge.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

from airlane.wire.mqtt import check_filter, check_topic

__all__ = [
    "DEFAULT_CLASSES",
    "DEFAULT_INBOUND",
    "BrokerAddress",
    "DataClass",
    "InboundRoute",
    "MqttBridgeConfig",
    "OutboundRoute",
    "parse_broker_url",
]

_PLACEHOLDER = re.compile(r"\{(\d+)\}")


@dataclass(frozen=True, slots=True)
class BrokerAddress:
    """Where a broker listens, and how to log in (from ``mqtt://`` or ``mqtts://`` URLs)."""

    host: str
    port: int
    tls: bool = False
    username: str | None = None
    password: str | None = None


def parse_broker_url(url: str) -> BrokerAddress:
    """``mqtt://[user[:password]@]host[:port]`` (port 1883) or ``mqtts://...`` (TLS, port
    8883); a ValueError that says what is wrong otherwise."""
    parts = urlsplit(url)
    if parts.scheme not in ("mqtt", "mqtts", "tcp", "ssl"):
        raise ValueError(f"a broker URL is mqtt://host:port or mqtts://host:port, not {url!r}")
    tls = parts.scheme in ("mqtts", "ssl")
    try:
        port = parts.port or (8883 if tls else 1883)
    except ValueError as exc:
        raise ValueError(f"bad port in the broker URL {url!r}: {exc}") from None
    if not parts.hostname:
        raise ValueError(f"the broker URL {url!r} names no host")
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError(f"a broker URL has no path or query: {url!r}")
    username = unquote(parts.username) if parts.username is not None else None
    password = unquote(parts.password) if parts.password is not None else None
    return BrokerAddress(parts.hostname, port, tls, username, password)


def _check_template(template: str, what: str) -> None:
    if any(int(match.group(1)) < 1 for match in _PLACEHOLDER.finditer(template)):
        raise ValueError(f"{what} {template!r}: topic levels count from {{1}}")
    rest = _PLACEHOLDER.sub("", template)
    if "{" in rest or "}" in rest:
        raise ValueError(f"{what} {template!r}: the only placeholders are {{1}}, {{2}}, ...")


def fill(template: str, levels: list[str]) -> str:
    """``template`` with ``{N}`` replaced by the topic's N-th level (1-based); KeyError for a
    level the topic does not have."""

    def level(match: re.Match[str]) -> str:
        index = int(match.group(1)) - 1
        if index >= len(levels):
            raise KeyError(match.group(1))
        return levels[index]

    return _PLACEHOLDER.sub(level, template)


LANES = ("control", "interactive", "bulk")


@dataclass(frozen=True, slots=True)
class DataClass:
    """A class of data and how it travels, as the seed's table gives them: the QoS its
    messages are taken at, how long its log keeps them, and the priority lane its events take
    on the way out (``control`` > ``interactive`` > ``bulk``)."""

    name: str
    qos: int
    max_age_s: float | None = None
    """Retention of a log this class creates (None: the log's default)."""
    max_bytes: int | None = None
    max_events: int | None = None
    lane: str = "interactive"

    def __post_init__(self) -> None:
        if self.qos not in (0, 1, 2):
            raise ValueError(f"data class {self.name!r}: qos must be 0, 1 or 2")
        if self.lane not in LANES:
            raise ValueError(f"data class {self.name!r}: lane is one of {', '.join(LANES)}")


DEFAULT_CLASSES = (
    DataClass("telemetry", qos=0, max_age_s=86_400.0, lane="bulk"),
    DataClass("event", qos=1, max_age_s=30 * 86_400.0, lane="interactive"),
    DataClass("command", qos=2, max_age_s=365 * 86_400.0, lane="control"),
)
"""The seed's three tiers: telemetry (temperature heartbeats) at QoS 0, kept a day; events
(vibration anomalies) at QoS 1, kept 30 days; commands (firmware updates) at QoS 2, kept a
year, on the control lane."""


@dataclass(frozen=True, slots=True)
class InboundRoute:
    """Messages on topics matching ``filter`` go into the event log ``log`` (or the stream
    ``stream``). ``{N}`` in either is the topic's N-th level: ``airlane/logs/+`` into
    ``{3}``."""

    filter: str
    log: str | None = None
    stream: str | None = None
    qos: int | None = None
    """The subscription's maximum QoS: a message keeps its own QoS up to this. None: the
    data class's, or 2 without one."""
    data_class: str | None = None
    """The `DataClass` of what arrives here (its QoS, its log's retention, its lane)."""
    type: str = "mqtt.message"
    """The event type of the records it appends."""
    content_type: str | None = None
    """The records' media type when the message names none (MQTT 5 content type);
    None: JSON when the payload parses as JSON, else ``application/octet-stream``."""
    require_json: bool = False
    """Refuse (to the dead-letter topic) a payload that is not JSON."""

    def __post_init__(self) -> None:
        check_filter(self.filter)
        if (self.log is None) == (self.stream is None):
            raise ValueError(f"inbound route {self.filter!r}: give exactly one of log, stream")
        _check_template(self.log or self.stream or "", "inbound route target")
        if self.qos not in (None, 0, 1, 2):
            raise ValueError(f"inbound route {self.filter!r}: qos must be 0, 1 or 2")


@dataclass(frozen=True, slots=True)
class OutboundRoute:
    """Every event of the stream ``stream`` is published to ``topic`` at ``qos``, as the
    stream's native JSON form, with the stream position in user properties."""

    stream: str
    topic: str
    qos: int = 1
    retain: bool = False
    message_expiry_s: int | None = None
    """MQTT 5 message expiry: the broker drops the message if not delivered in time."""
    terminal: bool = True
    """Also publish the stream's end (``done``/``error``); the forwarder stops after it."""

    def __post_init__(self) -> None:
        check_topic(self.topic)
        if self.qos not in (0, 1, 2):
            raise ValueError(f"outbound route {self.stream!r}: qos must be 0, 1 or 2")


DEFAULT_INBOUND = (InboundRoute("airlane/logs/+", log="{3}"),)
"""A bridge's routes unless it names its own: ``airlane/logs/<log>`` into the log ``<log>``."""


@dataclass(frozen=True, slots=True)
class MqttBridgeConfig:
    """One broker Airlane bridges to, as an MQTT client (``[[mqtt]]``)."""

    url: str
    """``mqtt://[user:password@]host[:port]`` or ``mqtts://...``."""
    name: str = "mqtt"
    """Names the bridge in logs, metrics and its state directory."""
    client_id: str | None = None
    """The MQTT client identifier of the subscribing connection (its persistent session on
    the broker); None: ``airlane-<name>``. The publishing connection adds ``-pub``."""
    protocol: int = 5
    """5 (MQTT 5.0) or 4 (MQTT 3.1.1, for brokers without 5)."""
    username: str | None = None
    password: str | None = None
    ca_file: str | None = None
    """CA bundle the broker's certificate must chain to (``mqtts://``); None: the system's."""
    cert_file: str | None = None
    """A client certificate (PEM) for brokers that ask for one."""
    key_file: str | None = None
    keepalive_s: int = 30
    session_expiry_s: int = 3600
    """How long the broker keeps the bridge's session (subscriptions, queued QoS 1/2
    messages) while it is away (MQTT 5; 3.1.1 keeps it until the broker's own limit)."""
    receive_maximum: int = 64
    """QoS 1/2 messages the broker may have in flight to the bridge at once: bounds what the
    bridge holds unacknowledged."""
    max_packet: int = 16 << 20
    """The largest packet the bridge takes (told to the broker, which drops larger ones)."""
    max_message: int = 1 << 20
    """The largest payload stored; a larger one goes to the dead-letter topic."""
    dead_letter_topic: str = "airlane/dead-letter"
    """Where a message the bridge cannot store goes, with the reason (QoS 1)."""
    id_property: str = "msg-id"
    """An MQTT 5 user property that names a message's identity: a message seen again with
    the same identity is stored once."""
    principal: str = "mqtt-bridge@default"
    """Whom the bridge acts as (``NAME@TENANT``; a bare ``NAME`` is its own tenant): policy
    rules grant it the logs and streams it writes and reads. The default is in the default
    tenant, where clients without an API key read."""
    state_dir: str | None = None
    """Where the bridge keeps its in-flight journal and outbound positions; None:
    ``.airlane/mqtt/<name>`` under the working directory."""
    reconnect_min_s: float = 0.2
    reconnect_max_s: float = 15.0
    connect_timeout_s: float = 10.0
    retry_store_s: float = 0.5
    """How long to wait before storing again after the hub refused for lack of capacity."""
    batch: int = 256
    """Messages stored per append at most."""
    inbound: tuple[InboundRoute, ...] = DEFAULT_INBOUND
    outbound: tuple[OutboundRoute, ...] = ()
    classes: tuple[DataClass, ...] = DEFAULT_CLASSES
    """The data classes routes name (``[[mqtt.classes]]`` adds to or replaces these by
    name)."""
    address: BrokerAddress = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "address", parse_broker_url(self.url))
        if self.protocol not in (4, 5):
            raise ValueError("[mqtt] protocol is 5 (MQTT 5.0) or 4 (MQTT 3.1.1)")
        if not 1 <= self.receive_maximum <= 65535:
            raise ValueError("[mqtt] receive_maximum is 1 to 65535")
        if self.max_message > self.max_packet:
            raise ValueError("[mqtt] max_message may not exceed max_packet")
        if re.fullmatch(r"[A-Za-z0-9._-]{1,64}", self.name) is None:
            raise ValueError(f"[mqtt] name {self.name!r}: 1 to 64 of A-Z a-z 0-9 . _ -")
        check_topic(self.dead_letter_topic)
        if not self.address.tls and (self.ca_file or self.cert_file or self.key_file):
            raise ValueError("[mqtt] ca_file, cert_file and key_file need an mqtts:// url")
        if self.key_file is not None and self.cert_file is None:
            raise ValueError("[mqtt] key_file goes with a cert_file")
        names = {c.name for c in self.classes}
        for route in self.inbound:
            if route.data_class is not None and route.data_class not in names:
                raise ValueError(
                    f"inbound route {route.filter!r}: no data class {route.data_class!r} "
                    f"(there are {', '.join(sorted(names))})"
                )

    def data_class(self, route: InboundRoute) -> DataClass | None:
        """The data class ``route`` names."""
        return next((c for c in self.classes if c.name == route.data_class), None)

    def qos(self, route: InboundRoute) -> int:
        """The QoS ``route`` subscribes at."""
        if route.qos is not None:
            return route.qos
        data_class = self.data_class(route)
        return 2 if data_class is None else data_class.qos

    @property
    def identifier(self) -> str:
        """The MQTT client identifier."""
        return self.client_id or f"airlane-{self.name}"

    @property
    def login(self) -> tuple[str | None, str | None]:
        """(username, password): the fields, else the URL's."""
        return (
            self.username if self.username is not None else self.address.username,
            self.password if self.password is not None else self.address.password,
        )
