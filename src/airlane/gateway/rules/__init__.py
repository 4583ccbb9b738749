"""Rules on the edge path: streaming SQL over MQTT topics, event logs and streams, with actions.

`RuleService` manages the node's rules (over HTTP and ``airlane rules``) and runs each in a
`RuleTask`; `airlane.rules` is the pure engine they run. See docs/edge.md.
"""

from __future__ import annotations

from airlane.gateway.rules.config import RulesConfig
from airlane.gateway.rules.definition import (
    AppendAction,
    GenerateAction,
    HoldAction,
    PublishAction,
    RuleDefinition,
    parse_definition,
)
from airlane.gateway.rules.service import (
    NoBridge,
    RuleService,
    Tap,
    TopicPublisher,
    rule_resource,
)
from airlane.gateway.rules.store import RuleState, RuleStore
from airlane.gateway.rules.task import RuleTask, input_log, output_log

__all__ = [
    "AppendAction",
    "GenerateAction",
    "HoldAction",
    "NoBridge",
    "PublishAction",
    "RuleDefinition",
    "RuleService",
    "RuleState",
    "RuleStore",
    "RuleTask",
    "RulesConfig",
    "Tap",
    "TopicPublisher",
    "input_log",
    "output_log",
    "parse_definition",
    "rule_resource",
]
