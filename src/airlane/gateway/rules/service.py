"""`RuleService`: the rules of a node, managed over any wire and run in the background.

Every method authorizes its call on the resource ``rules/<name>``: ``rules.read`` to list, see
and test; ``rules.admin`` to add, replace and delete (audited); ``rules.approve`` to decide on
a held row (audited, with the decision). A rule belongs to its owner's tenant, and runs as its
owner: what it reads and writes is authorized as the owner's own calls would be.

MQTT bridges (`airlane.transports.mqtt`) `register` here as `TopicPublisher` s: the rules'
``publish`` actions and generation results go out through them, and each bridge subscribes to
the topic filters rules read (a `Tap`), storing what arrives in the rule's input log before it
acknowledges the message to the broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from airlane.core.errors import AirlaneError, BadRequest, ErrorCode, NotFound
from airlane.gateway.rules.config import RulesConfig
from airlane.gateway.rules.definition import (
    RuleDefinition,
    check_rule_name,
    parse_definition,
)
from airlane.gateway.rules.store import RuleState, RuleStore
from airlane.gateway.rules.task import RuleTask, input_log, output_log
from airlane.gateway.tenancy import own_names, scoped_name
from airlane.rules import RuleRunner, compile_rule
from airlane.security import Action, Principal
from airlane.security.audit import audit_admin

if TYPE_CHECKING:
    from airlane.gateway.service import Gateway

__all__ = ["NoBridge", "RuleService", "Tap", "TopicPublisher", "rule_resource"]

log = logging.getLogger("airlane.rules")


def rule_resource(name: str) -> str:
    """The resource the security gate is asked about for the rule ``name``."""
    return f"rules/{name}"


class NoBridge(AirlaneError):
    """An action names an MQTT bridge that is not running (or none runs)."""

    code = ErrorCode.UPSTREAM_UNAVAILABLE


@dataclass(frozen=True, slots=True)
class Tap:
    """A topic filter a rule reads: a bridge subscribes to it and appends each message to
    ``log`` as ``principal`` before acknowledging it."""

    key: str
    """The rule's key (its name in its tenant's scope)."""
    filter: str
    qos: int
    log: str
    principal: Principal


class TopicPublisher(Protocol):
    """What an MQTT bridge offers the rules."""

    @property
    def name(self) -> str:
        """The bridge's name."""
        ...

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
        """Publish a JSON payload; return once the broker has it (QoS 1/2)."""
        ...

    def add_tap(self, tap: Tap) -> None:
        """Subscribe to ``tap.filter`` and store what comes in ``tap.log``."""
        ...

    def remove_tap(self, key: str) -> None:
        """Stop storing for the rule ``key`` (and unsubscribe when no one else needs it)."""
        ...


def _owner(principal: Principal) -> dict[str, Any]:
    return {
        "name": principal.name,
        "roles": sorted(principal.roles),
        "tenant": principal.tenant,
        "via": principal.via,
    }


def _principal(owner: dict[str, Any]) -> Principal:
    return Principal(
        str(owner["name"]),
        frozenset(owner.get("roles", ())),
        str(owner["tenant"]),
        via=str(owner.get("via", "anonymous")),
    )


class RuleService:
    """The node's rules; see the module docstring."""

    def __init__(self, gateway: Gateway, config: RulesConfig | None = None) -> None:
        self.gateway = gateway
        self.config = config or RulesConfig()
        self.store = RuleStore(None if self.config.dir is None else Path(self.config.dir))
        self._tasks: dict[str, RuleTask] = {}
        self._publishers: dict[str, TopicPublisher] = {}
        self._admin = asyncio.Lock()
        """Held by `put`, `delete` and `aclose`: each awaits the event log between reading
        and changing the rules, and one must not change them under another."""

    @property
    def _security(self) -> Any:
        return self.gateway.security

    # -- life -------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start every rule kept in the directory (one that no longer compiles is logged and
        left in its file)."""
        in_memory = not self.gateway.events.servers
        for state in self.store.load_all():
            if in_memory and "seq" in state.input:
                # The logs did not outlive the last process: the source this rule reads is
                # another, new log, read from its start (what the saved seq counted is gone).
                state.input["seq"] = 0
            owner = _principal(state.owner)
            try:
                definition = parse_definition(state.definition["name"], state.definition)
            except (AirlaneError, KeyError, ValueError) as exc:
                log.error("rules: %s no longer loads: %s", state.key, exc)
                continue
            try:
                await self._run(state.key, definition, state, owner)
            except AirlaneError as exc:
                # Its owner may no longer do what it does (another policy, keys, tenant): the
                # gateway starts anyway, and the rule waits in its file for a fix.
                log.error(
                    "rules: %s does not run: %s (as %s; kept in %s)",
                    state.key,
                    exc,
                    owner.name,
                    self.store.directory,
                )
        if self._tasks:
            log.info("rules: %d rules running", len(self._tasks))

    async def aclose(self) -> None:
        """Stop every rule, saving its state."""
        async with self._admin:
            for key, task in list(self._tasks.items()):
                self._untap(key)
                await task.aclose()
            self._tasks.clear()

    async def _run(
        self, key: str, definition: RuleDefinition, state: RuleState, owner: Principal
    ) -> None:
        task = RuleTask(self, definition, state, owner)
        await task.start()
        self._tasks[key] = task
        self._tap(key, task)

    # -- bridges ----------------------------------------------------------------------------

    def register(self, publisher: TopicPublisher) -> None:
        """A bridge offers itself: it gets the taps of the rules that read topic filters."""
        self._publishers[publisher.name] = publisher
        for key, task in self._tasks.items():
            tap = self._tap_of(key, task)
            if tap is not None and task.definition.bridge in (None, publisher.name):
                publisher.add_tap(tap)

    def unregister(self, publisher: TopicPublisher) -> None:
        """A bridge is closing."""
        if self._publishers.get(publisher.name) is publisher:
            del self._publishers[publisher.name]

    def publisher(self, name: str | None) -> TopicPublisher:
        """The bridge named ``name`` (None: the first one registered); `NoBridge` if none."""
        if name is None:
            for publisher in self._publishers.values():
                return publisher
            raise NoBridge("no MQTT bridge is running (start one with --mqtt)")
        try:
            return self._publishers[name]
        except KeyError:
            raise NoBridge(f"no MQTT bridge named {name!r} is running") from None

    @staticmethod
    def _tap_of(key: str, task: RuleTask) -> Tap | None:
        definition = task.definition
        if definition.topic_filter is None:
            return None
        return Tap(key, definition.topic_filter, definition.qos, input_log(task.name), task.owner)

    def _tap(self, key: str, task: RuleTask) -> None:
        tap = self._tap_of(key, task)
        if tap is None:
            return
        for publisher in self._publishers.values():
            if task.definition.bridge in (None, publisher.name):
                publisher.add_tap(tap)

    def _untap(self, key: str) -> None:
        for publisher in self._publishers.values():
            publisher.remove_tap(key)

    # -- management -------------------------------------------------------------------------

    def _allow(self, principal: Principal, action: Action, name: str) -> str:
        check_rule_name(name)
        self._security.authorize(principal, action, rule_resource(name))
        return scoped_name(principal, name)

    def _task(self, key: str, name: str) -> RuleTask:
        task = self._tasks.get(key)
        if task is None:
            raise NotFound(f"no rule named {name!r}")
        return task

    async def put(
        self, principal: Principal, name: str, body: object
    ) -> tuple[dict[str, Any], bool]:
        """Add the rule ``name`` or replace it; its description and whether it is new.

        A replaced rule keeps its place in its source, its output count, its incarnation and
        its held rows when its source is the same; its windows start empty when its SQL
        changed. A new rule gets an incarnation of its own (the keys of what it writes hold
        it), and its actions start after what its output log already holds (rows a deleted
        rule of that name left). Raises the event log's error (503) when it does not answer."""
        key = self._allow(principal, Action.RULES_ADMIN, name)
        definition = parse_definition(name, body)
        self._check_source(principal, definition)
        async with self._admin:
            return await self._put(principal, name, key, definition)

    async def _put(
        self, principal: Principal, name: str, key: str, definition: RuleDefinition
    ) -> tuple[dict[str, Any], bool]:
        old = self._tasks.get(key)
        if old is None and len(self._tasks) >= self.config.max_rules:
            raise BadRequest(f"this node runs {self.config.max_rules} rules, the limit")
        state = RuleState(key, definition.to_dict(), _owner(principal), created=time.time())
        if old is None:
            state.incarnation = secrets.token_hex(4)
            state.actions_done = await self._left_rows(principal, name)
        else:
            state.incarnation = old.state.incarnation
            self._untap(key)
            await old.aclose()
            del self._tasks[key]
            same_source = (
                old.definition.compiled.source == definition.compiled.source
                and old.definition.source == definition.source
            )
            state.outputs = old.state.outputs
            # A batch the old rule was storing when it stopped may have rows stored and not
            # counted; the new rule makes other rows from it, under keys of their own.
            same_rows = same_source and old.definition.compiled.sql == definition.compiled.sql
            state.revision = old.state.revision + (0 if same_rows else 1)
            state.actions_done = old.state.actions_done
            state.counters = old.state.counters
            state.created = old.state.created
            # What was decided or started goes on whatever the new rule reads.
            state.forwards = old.state.forwards
            state.pending = {k: v for k, v in old.state.pending.items() if v.get("approved")}
            if same_source:
                state.input = old.state.input
                state.snapshot = old.state.snapshot
                state.pending = old.state.pending
        self.store.save(state)
        try:
            await self._run(key, definition, state, principal)
        except BaseException:
            # Nothing half-made is kept: a new rule is forgotten, a replaced one comes back.
            if old is None:
                self.store.delete(key)
            else:
                self.store.save(old.state)
                await self._run(key, old.definition, old.state, old.owner)
            raise
        audit_admin(self._security, principal, "rule_put", rule_resource(name))
        return self._tasks[key].describe(), old is None

    def _check_source(self, principal: Principal, definition: RuleDefinition) -> None:
        """The owner may read what the rule reads."""
        if definition.topic_filter is not None:
            return
        source = definition.compiled.source.text
        if definition.source == "log":
            self._security.authorize(principal, Action.LOGS_CONSUME, f"logs/{source}")
        else:
            self._security.authorize(principal, Action.SUBSCRIBE, source)

    def names(self, principal: Principal) -> list[dict[str, Any]]:
        """The caller's tenant's rules, each described briefly."""
        self._security.authorize(principal, Action.RULES_READ, "rules")
        out = []
        for name in sorted(own_names(principal, list(self._tasks))):
            task = self._tasks[scoped_name(principal, name)]
            described = task.describe()
            out.append(
                {
                    "name": name,
                    "sql": task.definition.sql,
                    "actions": [a.kind for a in task.definition.actions],
                    "pending": len(described["pending"]),
                    "stats": described["stats"],
                }
            )
        return out

    def get(self, principal: Principal, name: str) -> dict[str, Any]:
        """One rule: its definition, its counters and its held rows."""
        key = self._allow(principal, Action.RULES_READ, name)
        return self._task(key, name).describe()

    async def delete(self, principal: Principal, name: str) -> None:
        """Stop the rule and forget it, its state and its logs.

        Raises the event log's error (503) when it does not answer, with the rule running
        as before: try again. A log it cannot delete after that (the event log gone away
        meanwhile, the owner no longer allowed to) is left, and logged: a rule added again
        under the name starts after its rows, with keys of its own."""
        key = self._allow(principal, Action.RULES_ADMIN, name)
        async with self._admin:
            task = self._task(key, name)
            owner, logs = task.owner, self.gateway.logs
            try:  # asked first, with the rule still running: is the event log there?
                await logs.info(owner, output_log(name))
            except AirlaneError as exc:
                if exc.code is ErrorCode.EVENT_LOG_UNAVAILABLE:
                    raise
            self._untap(key)
            await task.aclose()
            del self._tasks[key]
            self.store.delete(key)
            for log_name in (output_log(name), input_log(name)):
                try:
                    await logs.delete(owner, log_name)
                except AirlaneError as exc:
                    if exc.code is not ErrorCode.LOG_NOT_FOUND:  # (never made: an input log)
                        log.warning("rules: %s deleted, its log %s left: %s", key, log_name, exc)
            if task.definition.source == "log" and task.definition.topic_filter is None:
                source = task.definition.compiled.source.text
                # A group left behind is harmless: a rule added again restarts it.
                with contextlib.suppress(AirlaneError):
                    await logs.delete_group(owner, source, f"rule.{name}")
        audit_admin(self._security, principal, "rule_delete", rule_resource(name))

    async def _left_rows(self, principal: Principal, name: str) -> int:
        """The last seq of the output log a deleted rule named ``name`` left (0 if none):
        a new rule of that name runs its actions on its own rows only."""
        logs = self.gateway.logs
        if output_log(name) not in await logs.names(principal):
            return 0
        try:
            return (await logs.info(principal, output_log(name))).last_seq
        except AirlaneError as exc:
            if exc.code is ErrorCode.LOG_NOT_FOUND:  # deleted meanwhile
                return 0
            raise

    def pending(self, principal: Principal, name: str) -> list[dict[str, Any]]:
        """The rule's rows held for approval."""
        key = self._allow(principal, Action.RULES_READ, name)
        return self._task(key, name).pending()

    async def decide(
        self, principal: Principal, name: str, approval: str, *, approve: bool
    ) -> dict[str, Any]:
        """Approve or reject a held row: approved, the actions after its hold run."""
        key = self._allow(principal, Action.RULES_APPROVE, name)
        task = self._task(key, name)
        try:
            decided = await task.decide(approval, approve)
        except KeyError:
            raise NotFound(
                f"rule {name!r} holds no row {approval!r} (decided or expired)"
            ) from None
        what = "rule_approve" if approve else "rule_reject"
        audit_admin(self._security, principal, what, f"{rule_resource(name)}/approvals/{approval}")
        return decided

    def audit_expired(self, task: RuleTask, approval: str) -> None:
        """A hold timed out: recorded as a rejection by the rule's owner."""
        audit_admin(
            self._security,
            task.owner,
            "rule_hold_expired",
            f"{rule_resource(task.name)}/approvals/{approval}",
        )

    def test(self, principal: Principal, body: object) -> dict[str, Any]:
        """Run SQL over sample messages, nothing stored: ``{"sql": ..., "messages":
        [{"payload": {...}, "ts": 0.0, "topic": "a/b", "qos": 1}, ...]}``; every window still
        open at the end is closed. The output rows and the runner's counters."""
        self._security.authorize(principal, Action.RULES_READ, "rules")
        if not isinstance(body, dict):
            raise BadRequest("a test is a JSON object with 'sql' and 'messages'")
        unknown = set(body) - {"sql", "messages"}
        if unknown:
            raise BadRequest(f"unknown test fields {sorted(unknown)}", param=sorted(unknown)[0])
        sql = body.get("sql")
        if not isinstance(sql, str):
            raise BadRequest("'sql' is required", param="sql")
        plan = compile_rule(sql)
        messages = body.get("messages", [])
        if not isinstance(messages, list) or len(messages) > self.config.max_test_messages:
            raise BadRequest(
                f"'messages' is a list of at most {self.config.max_test_messages}",
                param="messages",
            )
        runner = RuleRunner(
            plan, max_groups=self.config.max_groups, max_window_rows=self.config.max_window_rows
        )
        outputs: list[dict[str, Any]] = []
        clock = 0.0
        for i, message in enumerate(messages):
            where = f"messages[{i}]"
            if not isinstance(message, dict) or not isinstance(message.get("payload"), dict):
                raise BadRequest(f"{where}: an object with a 'payload' object", param=where)
            ts = message.get("ts", clock)
            topic = message.get("topic")
            qos = message.get("qos")
            if isinstance(ts, bool) or not isinstance(ts, int | float) or not math.isfinite(ts):
                raise BadRequest(f"{where}.ts: a number of seconds", param=where)
            if topic is not None and not isinstance(topic, str):
                raise BadRequest(f"{where}.topic: a string", param=where)
            if qos not in (None, 0, 1, 2):
                raise BadRequest(f"{where}.qos: 0, 1 or 2", param=where)
            try:
                clock = max(clock, float(ts))
                outputs.extend(
                    runner.feed(message["payload"], clock, ts=float(ts), topic=topic, qos=qos)
                )
            except ValueError as exc:
                raise BadRequest(f"{where}: {exc}", param=where) from None
        while (timer := runner.get_timer()) is not None:
            outputs.extend(runner.handle_timer(timer))
        stats = runner.stats
        return {
            "columns": [p.name for p in plan.projections],
            "outputs": outputs,
            "stats": {
                "rows_in": stats.rows_in,
                "rows_filtered": stats.rows_filtered,
                "rows_out": stats.rows_out,
                "late_rows": stats.late_rows,
                "dropped_groups": stats.dropped_groups,
                "dropped_rows": stats.dropped_rows,
            },
        }
