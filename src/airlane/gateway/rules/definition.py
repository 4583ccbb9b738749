"""A rule as a user defines it: its SQL, where it reads, and what it does with each output row.

A definition arrives as JSON (``PUT /v1/rules/{name}``, ``airlane rules add``)::

    {"sql": "SELECT deviceId, avg(vibration) AS v FROM \\"sensor/+/vibration\\"
             GROUP BY deviceId, TUMBLINGWINDOW(ss, 10) HAVING avg(vibration) > 3.5",
     "actions": [{"publish": {"topic": "alerts/{deviceId}", "qos": 1}},
                 {"generate": {"prompt": "Vibration alarm: {row}",
                               "result_topic": "advice/{deviceId}"}},
                 {"hold": {"timeout_s": 3600}},
                 {"publish": {"topic": "commands/{deviceId}/stop", "qos": 2}}]}

`parse_definition` checks all of it (the SQL compiles, every topic template is a topic once
filled, names are names) and raises `BadRequest` naming the field that is wrong. Templates
(``topic``, ``log``, ``prompt``) take ``{field}`` from the output row, ``{rule}`` (the rule's
name) and ``{row}`` (the whole row as JSON).

Actions run in order for each output row. ``hold`` stops there until an approval: the actions
after it run only when someone approves the row (`airlane.gateway.rules.service`), never if it
is rejected or its hold times out.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import orjson

from airlane.core.errors import BadRequest
from airlane.rules import RulePlan, SourceKind, compile_rule
from airlane.wire.mqtt import check_filter, check_topic

__all__ = [
    "DEFAULT_PROMPT",
    "MAX_ACTIONS",
    "Action",
    "AppendAction",
    "GenerateAction",
    "HoldAction",
    "PublishAction",
    "RuleDefinition",
    "check_rule_name",
    "fill_template",
    "parse_definition",
]

MAX_ACTIONS = 8
"""Most actions one rule runs per output row."""
MAX_TEMPLATE_CHARS = 4000
"""Longest template (a prompt is the long one)."""
DEFAULT_PROMPT = (
    "The rule {rule} matched this row from the edge:\n{row}\n"
    "Explain what it means and what an operator should do, in two sentences."
)
"""The prompt a ``generate`` action sends unless it gives its own."""

_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_FIELD = re.compile(r"\{([A-Za-z_][A-Za-z0-9_.]*)\}")
_LOG_NAME = re.compile(r"[A-Za-z0-9._{}-]{1,200}")


def check_rule_name(name: object) -> str:
    """``name`` if it names a rule (``[A-Za-z0-9_.-]{1,64}``), else `BadRequest`."""
    if not isinstance(name, str) or _NAME.fullmatch(name) is None:
        raise BadRequest(
            f"invalid rule name {name!r}: expected [A-Za-z0-9_.-]{{1,64}}", param="name"
        )
    return name


@dataclass(frozen=True, slots=True)
class PublishAction:
    """Publish the row (JSON) to an MQTT topic through a bridge."""

    topic: str
    """A topic template: ``alerts/{deviceId}``."""
    qos: int = 1
    retain: bool = False
    message_expiry_s: int | None = None
    """MQTT 5 message expiry: the broker drops the message if not delivered in time."""
    bridge: str | None = None
    """The bridge's name; None: the rule's bridge, else the first one started."""
    kind: Literal["publish"] = "publish"


@dataclass(frozen=True, slots=True)
class AppendAction:
    """Append the row to an event log (created on first use)."""

    log: str
    """A log name template: ``alerts.{deviceId}``."""
    type: str = "rule.output"
    """The event type (a registry subject of that name validates the row)."""
    kind: Literal["append"] = "append"


@dataclass(frozen=True, slots=True)
class GenerateAction:
    """Start a generation with the row in its prompt; publish its events to a topic."""

    prompt: str = DEFAULT_PROMPT
    """The user message, a template: ``{row}`` is the output row as JSON."""
    system: str | None = None
    """A system message, if any (not a template)."""
    model: str = "airlane-edge"
    """The model asked for (the backend may force its own)."""
    max_tokens: int | None = 256
    result_topic: str | None = None
    """A topic template the generation's events are published to (each event's JSON, as an
    outbound route publishes them); None: the generation's stream only."""
    qos: int = 1
    """QoS of the published events."""
    bridge: str | None = None
    kind: Literal["generate"] = "generate"


@dataclass(frozen=True, slots=True)
class HoldAction:
    """Wait for an explicit approval before the next actions run."""

    timeout_s: float = 86_400.0
    """After this long undecided, the row is rejected (audited as timed out)."""
    kind: Literal["hold"] = "hold"


Action = PublishAction | AppendAction | GenerateAction | HoldAction
_KINDS: dict[str, type[Any]] = {
    "publish": PublishAction,
    "append": AppendAction,
    "generate": GenerateAction,
    "hold": HoldAction,
}


@dataclass(frozen=True, slots=True)
class RuleDefinition:
    """One rule: see the module docstring. ``plan`` is the compiled SQL."""

    name: str
    sql: str
    actions: tuple[Action, ...] = ()
    source: Literal["log", "stream"] = "log"
    """What a bare FROM name is: an event log, or a stream (an MQTT topic filter in quotes
    is always read through the bridges)."""
    qos: int = 1
    """QoS of the bridges' subscription for a topic filter source."""
    bridge: str | None = None
    """The bridge a topic filter source is read through (None: every bridge)."""
    description: str = ""
    plan: RulePlan | None = field(default=None, compare=False, repr=False)

    @property
    def compiled(self) -> RulePlan:
        """The compiled SQL."""
        assert self.plan is not None
        return self.plan

    @property
    def topic_filter(self) -> str | None:
        """The MQTT topic filter FROM names, or None for a log or stream."""
        source = self.compiled.source
        return source.text if source.kind is SourceKind.TOPIC_FILTER else None

    def to_dict(self) -> dict[str, Any]:
        """The definition as JSON (what `parse_definition` reads back)."""
        actions = []
        for action in self.actions:
            body = {k: v for k, v in asdict(action).items() if k != "kind"}
            actions.append({action.kind: body})
        out: dict[str, Any] = {
            "name": self.name,
            "sql": self.sql,
            "actions": actions,
            "source": self.source,
            "qos": self.qos,
        }
        if self.bridge is not None:
            out["bridge"] = self.bridge
        if self.description:
            out["description"] = self.description
        return out


def parse_definition(name: str, body: object) -> RuleDefinition:
    """A checked `RuleDefinition` from its JSON; `BadRequest` (``param`` naming the field)
    or `airlane.rules.RuleError` (the SQL) otherwise."""
    check_rule_name(name)
    if not isinstance(body, dict):
        raise BadRequest("a rule is a JSON object with 'sql' and 'actions'")
    unknown = set(body) - {"name", "sql", "actions", "source", "qos", "bridge", "description"}
    if unknown:
        raise BadRequest(f"unknown rule fields {sorted(unknown)}", param=sorted(unknown)[0])
    if body.get("name", name) != name:
        raise BadRequest("the body's name differs from the rule's", param="name")
    sql = body.get("sql")
    if not isinstance(sql, str):
        raise BadRequest("'sql' is required: the rule's SELECT statement", param="sql")
    plan = compile_rule(sql)
    source = body.get("source", "log")
    if source not in ("log", "stream"):
        raise BadRequest("'source' is 'log' or 'stream'", param="source")
    if plan.source.kind is SourceKind.TOPIC_FILTER:
        try:
            check_filter(plan.source.text)
        except ValueError as exc:
            raise BadRequest(str(exc), param="sql") from None
    elif re.fullmatch(r"[A-Za-z0-9._-]{1,200}", plan.source.text) is None:
        raise BadRequest(
            f"FROM {plan.source.text!r}: a log or stream name is [A-Za-z0-9._-]; quote an "
            'MQTT topic filter: FROM "sensor/+/vibration"',
            param="sql",
        )
    qos = body.get("qos", 1)
    _check_qos(qos, "qos")
    bridge = body.get("bridge")
    if bridge is not None and not isinstance(bridge, str):
        raise BadRequest("'bridge' is a bridge's name", param="bridge")
    description = body.get("description", "")
    if not isinstance(description, str) or len(description) > 1000:
        raise BadRequest("'description' is a string of at most 1000 characters")
    raw_actions = body.get("actions", [])
    if not isinstance(raw_actions, list) or len(raw_actions) > MAX_ACTIONS:
        raise BadRequest(f"'actions' is a list of at most {MAX_ACTIONS}", param="actions")
    actions = tuple(_action(i, raw) for i, raw in enumerate(raw_actions))
    return RuleDefinition(
        name,
        sql,
        actions,
        source,
        qos,
        bridge,
        description,
        plan,
    )


def _action(index: int, raw: object) -> Action:
    where = f"actions[{index}]"
    if not isinstance(raw, dict) or len(raw) != 1:
        raise BadRequest(
            f"{where}: an action is an object with one key: {sorted(_KINDS)}", param=where
        )
    ((kind, settings),) = raw.items()
    cls = _KINDS.get(kind)
    if cls is None:
        raise BadRequest(
            f"{where}: unknown action {kind!r}; expected {sorted(_KINDS)}", param=where
        )
    if settings is None:
        settings = {}
    if not isinstance(settings, dict):
        raise BadRequest(f"{where}.{kind}: its settings are an object", param=where)
    allowed = {f for f in cls.__dataclass_fields__ if f != "kind"}
    unknown = set(settings) - allowed
    if unknown:
        raise BadRequest(
            f"{where}.{kind}: unknown settings {sorted(unknown)}; expected {sorted(allowed)}",
            param=where,
        )
    try:
        action = cls(**settings)
    except TypeError as exc:
        raise BadRequest(f"{where}.{kind}: {exc}", param=where) from None
    _check_action(where, action)
    return action  # type: ignore[no-any-return]


def _check_action(where: str, action: Action) -> None:
    if isinstance(action, PublishAction):
        _check_template(f"{where}.publish.topic", action.topic, topic=True)
        _check_qos(action.qos, f"{where}.publish.qos")
        _check_type(f"{where}.publish.retain", action.retain, bool)
        if action.message_expiry_s is not None:
            _check_int(f"{where}.publish.message_expiry_s", action.message_expiry_s, 1)
        _check_type(f"{where}.publish.bridge", action.bridge, (str, type(None)))
    elif isinstance(action, AppendAction):
        _check_template(f"{where}.append.log", action.log)
        if _LOG_NAME.fullmatch(action.log) is None:
            raise BadRequest(f"{where}.append.log: not a log name template", param=where)
        _check_type(f"{where}.append.type", action.type, str)
        if not 0 < len(action.type) <= 200:
            raise BadRequest(f"{where}.append.type: 1 to 200 characters", param=where)
    elif isinstance(action, GenerateAction):
        _check_template(f"{where}.generate.prompt", action.prompt)
        _check_type(f"{where}.generate.system", action.system, (str, type(None)))
        _check_type(f"{where}.generate.model", action.model, str)
        if action.max_tokens is not None:
            _check_int(f"{where}.generate.max_tokens", action.max_tokens, 1)
        if action.result_topic is not None:
            _check_template(f"{where}.generate.result_topic", action.result_topic, topic=True)
        _check_qos(action.qos, f"{where}.generate.qos")
        _check_type(f"{where}.generate.bridge", action.bridge, (str, type(None)))
    else:
        timeout = action.timeout_s
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise BadRequest(f"{where}.hold.timeout_s: a number of seconds above 0", param=where)


def _check_template(where: str, template: object, *, topic: bool = False) -> None:
    if not isinstance(template, str) or not template or len(template) > MAX_TEMPLATE_CHARS:
        raise BadRequest(
            f"{where}: a non-empty string of at most {MAX_TEMPLATE_CHARS} characters",
            param=where,
        )
    if topic:
        try:
            check_topic(_FIELD.sub("x", template))
        except ValueError as exc:
            raise BadRequest(f"{where}: {exc}", param=where) from None


def _check_qos(qos: object, where: str) -> None:
    if qos not in (0, 1, 2) or isinstance(qos, bool):
        raise BadRequest(f"{where}: 0, 1 or 2", param=where)


def _check_int(where: str, value: object, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise BadRequest(f"{where}: an integer of at least {minimum}", param=where)


def _check_type(where: str, value: object, types: type | tuple[type, ...]) -> None:
    if not isinstance(value, types):
        raise BadRequest(f"{where}: wrong type {type(value).__name__}", param=where)


def fill_template(template: str, row: dict[str, Any], rule: str) -> str:
    """``template`` with ``{field}`` from ``row`` (a dotted path into nested objects),
    ``{rule}`` and ``{row}``; KeyError naming a field the row lacks."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if name == "rule":
            return rule
        if name == "row":
            return orjson.dumps(row).decode()
        current: Any = row
        for part in name.split("."):
            if not isinstance(current, dict) or part not in current:
                raise KeyError(name)
            current = current[part]
        if isinstance(current, str):
            return current
        return orjson.dumps(current).decode()

    return _FIELD.sub(value, template)
