"""One rule at work: its source read into its runner, its output rows stored, its actions run.

Two tasks per rule, both owned by its `RuleTask`::

    source --read--> RuleRunner --append--> output log rules.<name>.out --read--> actions

**Input.** A rule reads one source:

- an event log (``FROM sensors``), through the consumer group ``rule.<name>``, from the events
  appended after the rule was created;
- an MQTT topic filter (``FROM "sensor/+/vibration"``): the bridges subscribe to it and store
  each message in the rule's input log ``rules.<name>.in`` before acknowledging it to the
  broker (as an inbound route does); the rule then reads that log as above;
- a stream (``"source": "stream"``), followed from the position last saved.

A record's JSON object is a row, with its topic (``mqtt-topic`` header) and QoS. Its time
(``ts``) is when it was stored, and rows move the rule's clock: a window closes when a row
stored after its end arrives, or, once the rule has read everything there is, when the wall
clock passes its end by ``late_s``. So a rule that falls behind, or restarts and reads again,
puts every row in the window it was stored in, and produces the same output rows again. A
record that is not a JSON object is counted (``not_object``) and skipped.

**Exactly once into the output log.** After each batch the runner's output rows are appended
to ``rules.<name>.out``, each with the idempotency key ``rule/<name>/<incarnation>/<n>`` (``n``
counts output rows; `RuleState.output_key`), then the state is saved
(`airlane.gateway.rules.store`), then the batch is acknowledged. A process killed between two
steps reads the batch again from the saved state: the rows it produced again get the same
keys, and the log keeps the first copy.

**Actions at least once.** The action task reads the output log after the last row whose
actions all ran (saved after each row) and runs the rule's actions in order: a row whose actions
were cut by a crash has them run again. Messages published carry the user property ``msg-id``
(``rule/<name>/<incarnation>/<n>/<action>``, `RuleState.action_key`): Airlane's own bridges,
and any consumer that keeps the last ids it saw, drop the copy. A ``hold`` keeps the row (in
the saved state) until `RuleTask.decide`; actions that fail (no bridge, a broker that refuses,
a backend error) are retried
`ACTION_ATTEMPTS` times, then counted (``failed``) and logged, and the next row goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import orjson

from airlane.backends.base import GenerationRequest
from airlane.core.errors import AirlaneError, ErrorCode
from airlane.core.events import TERMINAL_KINDS, Event, Kind
from airlane.core.position import Position
from airlane.eventlog import Delivery, NewEvent, Record
from airlane.gateway.rules.definition import (
    Action,
    AppendAction,
    GenerateAction,
    HoldAction,
    PublishAction,
    RuleDefinition,
    fill_template,
)
from airlane.gateway.rules.store import RuleState
from airlane.rules import RuleRunner, SnapshotError
from airlane.security import Principal
from airlane.wire.event_json import event_to_dict

if TYPE_CHECKING:
    from airlane.gateway.rules.service import RuleService

__all__ = [
    "ACTION_ATTEMPTS",
    "RuleTask",
    "input_log",
    "output_log",
]

log = logging.getLogger("airlane.rules")

ACTION_ATTEMPTS = 3
"""Tries of one action on one row before it counts as failed."""
RETRY_PAUSE_S = 1.0
"""The pause before an action is tried again (doubled each time)."""
WAIT_SOURCE_S = 1.0
"""How often a rule looks again for a source that does not exist yet."""
LANDING_S = 2.0
"""How long a stopping rule lets a generation's event under way reach its topic."""
MAX_GENERATIONS = 16
"""Generations one rule forwards to their result topics at once; the next row's actions wait
for one to end."""
OUTPUT_RETENTION = 100_000
"""Rows the output log keeps (the oldest go first)."""
INPUT_RETENTION = 100_000
"""Messages a topic filter rule's input log keeps."""
_BATCH = 256


def input_log(name: str) -> str:
    """The log a topic filter rule's messages are stored in."""
    return f"rules.{name}.in"


def output_log(name: str) -> str:
    """The log a rule's output rows are stored in."""
    return f"rules.{name}.out"


@dataclass(slots=True)
class _Batch:
    rows: list[tuple[int, dict[str, Any] | None, float, str | None, int | None]]
    """(seq, row or None if not an object, ts, topic, qos)."""
    commit: Callable[[], Awaitable[None]]
    position: dict[str, Any] | None
    """The source's position after these rows (None: unchanged)."""
    watermark: float | None = None
    """A time before which the source had nothing more to give (None: it may have)."""


async def _nothing() -> None:
    return None


class RuleTask:
    """One running rule; see the module docstring."""

    def __init__(
        self,
        service: RuleService,
        definition: RuleDefinition,
        state: RuleState,
        owner: Principal,
    ) -> None:
        self.service = service
        self.definition = definition
        self.state = state
        self.owner = owner
        self.runner = self._runner()
        self._wake_actions = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._forwards: dict[str, asyncio.Task[None]] = {}
        """The tasks publishing generations to their topics, by stream id."""
        self._decisions: set[asyncio.Task[None]] = set()
        self._save_lock = asyncio.Lock()

    @property
    def name(self) -> str:
        """The rule's name (in its owner's tenant)."""
        return self.definition.name

    def _runner(self) -> RuleRunner:
        plan = self.definition.compiled
        limits = self.service.config
        snapshot = self.state.snapshot
        if snapshot is not None and snapshot.get("sql") == plan.sql:
            try:
                return RuleRunner.restore(
                    plan,
                    snapshot,
                    max_groups=limits.max_groups,
                    max_window_rows=limits.max_window_rows,
                )
            except SnapshotError as exc:
                log.error("rule %s: its saved windows cannot be restored (%s)", self.name, exc)
        return RuleRunner(
            plan, max_groups=limits.max_groups, max_window_rows=limits.max_window_rows
        )

    # -- life -------------------------------------------------------------------------------

    async def start(self) -> None:
        """Create the rule's logs and start its two tasks."""
        logs = self.service.gateway.logs
        limits = self.service.config
        output, _ = await logs.create(
            self.owner, output_log(self.name), max_events=limits.output_retention
        )
        if output.last_seq < self.state.actions_done:
            # The log is younger than the saved state (an in-memory log after a restart, or
            # one deleted under a delete that did not finish): every row in it is new.
            self.state.actions_done = 0
        if self.definition.topic_filter is not None:
            await logs.create(self.owner, input_log(self.name), max_events=limits.input_retention)
        source = self._source_log()
        if source is not None and "seq" not in self.state.input:
            # A new rule reads what is appended from now on (not what was there before).
            seq = 0
            if source in await logs.names(self.owner):
                with contextlib.suppress(AirlaneError):  # deleted meanwhile: from the start
                    seq = (await logs.info(self.owner, source)).last_seq
            self.state.input = {"seq": seq}
        self._tasks.append(asyncio.create_task(self._input_loop(), name=f"rule {self.name} in"))
        self._tasks.append(asyncio.create_task(self._action_loop(), name=f"rule {self.name} out"))
        # What an earlier process started and did not finish goes on.
        for approval, item in self.state.pending.items():
            if item.get("approved"):
                self._run_approved(approval, item)
        for stream_id in self.state.forwards:
            self._start_forward(stream_id)

    async def aclose(self) -> None:
        """Stop both tasks and what they started, and save the state."""
        tasks = [*self._tasks, *self._forwards.values(), *self._decisions]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        await self.save()

    async def save(self) -> None:
        """Save the state: the windows and the source's position as of the last finished
        step, how far the actions ran, the held rows.

        The runner's live windows are never saved from here: between feeding a batch and
        storing its output rows they hold rows whose outputs exist nowhere else, and a file
        that said so would lose those rows to a crash (the source would not send them
        again). Only `_step` moves the saved windows and position, together, once the
        outputs are stored."""
        async with self._save_lock:
            self.service.store.save(self.state)

    def describe(self) -> dict[str, Any]:
        """What ``GET /v1/rules/{name}`` shows."""
        stats = self.runner.stats
        return {
            **self.definition.to_dict(),
            "input_log": self._source_log(),
            "output_log": output_log(self.name),
            "incarnation": self.state.incarnation,
            "stats": {
                "rows_in": stats.rows_in,
                "rows_filtered": stats.rows_filtered,
                "rows_out": stats.rows_out,
                "late_rows": stats.late_rows,
                "dropped_groups": stats.dropped_groups,
                "dropped_rows": stats.dropped_rows,
                "outputs": self.state.outputs,
                "actions_done": self.state.actions_done,
                **self.state.counters,
            },
            "pending": self.pending(),
            "owner": self.state.owner.get("name"),
        }

    def pending(self) -> list[dict[str, Any]]:
        """The rows held for approval, oldest first (not those approved, whose actions run)."""
        return [
            {"id": key, **{k: v for k, v in item.items() if k != "next"}}
            for key, item in sorted(self.state.pending.items(), key=lambda kv: kv[1]["seq"])
            if not item.get("approved")
        ]

    def _count(self, what: str, n: int = 1) -> None:
        self.state.counters[what] = self.state.counters.get(what, 0) + n

    # -- input ------------------------------------------------------------------------------

    def _source_log(self) -> str | None:
        if self.definition.topic_filter is not None:
            return input_log(self.name)
        if self.definition.source == "log":
            return self.definition.compiled.source.text
        return None

    async def _input_loop(self) -> None:
        queue: asyncio.Queue[_Batch] = asyncio.Queue(maxsize=2)
        source_log = self._source_log()
        reader = self._read_log(source_log, queue) if source_log else self._read_stream(queue)
        feeder = asyncio.create_task(reader, name=f"rule {self.name} source")
        late = self.service.config.late_s
        try:
            while True:
                # A log's reader says itself how far it has read (an empty batch when there
                # is nothing); a stream's reader blocks, so the clock stands in for it.
                timer = None if source_log else self.runner.get_timer()
                timeout = None if timer is None else max(0.0, timer + late - time.time())
                # asyncio.timeout, not wait_for: Python 3.11's wait_for can swallow a
                # cancellation that arrives as the wait ends, and the task never stops.
                batch = _Batch([], _nothing, None, watermark=time.time())
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout):
                        batch = await queue.get()
                await self._step(batch)
        finally:
            feeder.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await feeder

    async def _step(self, batch: _Batch) -> None:
        """Feed one batch, close the windows its watermark closes, store the output rows,
        save, acknowledge."""
        outputs: list[dict[str, Any]] = []
        for _, row, ts, topic, qos in batch.rows:
            if row is None:
                self._count("not_object")
                continue
            outputs.extend(self.runner.feed(row, ts, ts=ts, topic=topic, qos=qos))
        if batch.watermark is not None:
            # Everything stored before the watermark has been read: wall time closes
            # windows up to there (less late_s, for clocks that disagree a little).
            now = min(batch.watermark, time.time())
            outputs.extend(self.runner.handle_timer(now - self.service.config.late_s))
        if outputs:
            await self._store_outputs(outputs)
        # One cut, taken with no await inside it: the windows, the position they were read
        # to and the output count move together (the action task saves meanwhile).
        if batch.position is not None:
            self.state.input = batch.position
        if outputs or batch.rows:
            self.state.snapshot = self.runner.snapshot()
            await self.save()
        await batch.commit()

    async def _store_outputs(self, outputs: list[dict[str, Any]]) -> None:
        first = self.state.outputs
        events = [
            NewEvent(
                "rule.output",
                orjson.dumps(row, option=orjson.OPT_NON_STR_KEYS),
                headers={"rule": self.name},
                idempotency_key=self.state.output_key(self.name, first + i),
            )
            for i, row in enumerate(outputs)
        ]
        logs = self.service.gateway.logs
        for start in range(0, len(events), 500):
            chunk = events[start : start + 500]
            await self._retrying(
                partial(logs.append, self.owner, output_log(self.name), chunk), forever=True
            )
        self.state.outputs = first + len(outputs)
        self._wake_actions.set()

    async def _read_log(self, name: str, queue: asyncio.Queue[_Batch]) -> None:
        logs = self.service.gateway.logs
        group = f"rule.{self.name}"
        seen = int(self.state.input.get("seq", 0))
        while True:  # the log may not exist yet
            try:
                # Listed first: a lookup of a missing log would be an audit record a second.
                if name in await logs.names(self.owner):
                    info = await logs.info(self.owner, name)
                    break
            except AirlaneError as exc:
                if exc.code is not ErrorCode.LOG_NOT_FOUND:
                    log.warning("rule %s: cannot read %s: %s", self.name, name, exc)
            await asyncio.sleep(WAIT_SOURCE_S)
        if info.last_seq < seen:
            # The log is younger than the saved position (an in-memory log after a restart):
            # everything in it is new.
            seen = 0
        # The group starts again after what was saved: what an earlier process read and did
        # not save comes again now, in order (a consumer group would hand it out only after
        # its ack wait, behind newer records, which a rule must not skip or see late).
        await logs.restart_own_group(self.owner, name, group)
        settings = {"start_seq": seen + 1, "ack_wait_s": self.service.config.ack_wait_s}
        late = self.service.config.late_s
        while True:
            # Waits no longer than the next window's end: an empty answer then tells the
            # rule it may close it.
            timer = self.runner.get_timer()
            started = time.time()
            wait = 1.0 if timer is None else min(1.0, max(0.01, timer + late - started))
            try:
                deliveries = await logs.fetch(
                    self.owner, name, group, max_events=_BATCH, timeout_s=wait, settings=settings
                )
            except AirlaneError as exc:
                if exc.code is ErrorCode.GROUP_SETTINGS_CONFLICT:
                    settings = {}
                    continue
                log.warning("rule %s: reading %s: %s", self.name, name, exc)
                await asyncio.sleep(WAIT_SOURCE_S)
                continue
            if not deliveries:
                await queue.put(_Batch([], _nothing, None, watermark=time.time()))
                continue
            rows = []
            for delivery in deliveries:
                if delivery.seq <= seen:
                    continue  # fed before the last save, then sent again
                rows.append(_log_row(delivery.record))
                seen = delivery.seq
            # A batch that is not full is all there was when the fetch began.
            watermark = started if len(deliveries) < _BATCH else None
            await queue.put(_Batch(rows, _acker(deliveries), {"seq": seen}, watermark))

    async def _read_stream(self, queue: asyncio.Queue[_Batch]) -> None:
        gateway = self.service.gateway
        stream = self.definition.compiled.source.text
        token = self.state.input.get("position")
        resume = Position.parse(token) if isinstance(token, str) else None
        while True:
            try:
                subscription = await gateway.subscribe(
                    self.owner, stream, resume=resume, subscriber=f"rule {self.name}"
                )
            except AirlaneError as exc:
                if exc.code not in (ErrorCode.STREAM_NOT_FOUND, ErrorCode.NOT_FOUND):
                    log.warning("rule %s: cannot follow %s: %s", self.name, stream, exc)
                await asyncio.sleep(WAIT_SOURCE_S)
                continue
            try:
                while events := await subscription.next_batch(_BATCH):
                    now = time.time()
                    rows = [_stream_row(event, now) for event in events]
                    resume = subscription.position
                    position = {"position": resume.token}
                    watermark = now if len(events) < _BATCH else None
                    await queue.put(_Batch(rows, _nothing, position, watermark))
            finally:
                await subscription.aclose()
            await asyncio.sleep(WAIT_SOURCE_S)  # the stream ended: wait for the next one

    # -- actions ----------------------------------------------------------------------------

    async def _action_loop(self) -> None:
        logs = self.service.gateway.logs
        name = output_log(self.name)
        while True:
            await self._expire_holds()
            # Cleared before reading: outputs stored during the read set it again.
            self._wake_actions.clear()
            try:
                records = await logs.read(
                    self.owner, name, from_seq=self.state.actions_done + 1, limit=64
                )
            except AirlaneError as exc:
                log.warning("rule %s: reading its output: %s", self.name, exc)
                records = []
            if records and records[0].seq > self.state.actions_done + 1:
                # Retention removed rows before their actions ran (the first ones included:
                # a rule whose actions are slow from its first row loses them as well).
                self._count("output_lost", records[0].seq - self.state.actions_done - 1)
            for record in records:
                await self._run_actions(record.seq, record.json(), 0)
                self.state.actions_done = record.seq
                await self.save()
            if not records:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(1.0):
                        await self._wake_actions.wait()

    async def _run_actions(self, seq: int, row: dict[str, Any], first: int) -> None:
        """Run the actions from index ``first`` on one output row (stopping at a hold)."""
        actions = self.definition.actions
        for index in range(first, len(actions)):
            action = actions[index]
            if isinstance(action, HoldAction):
                self._hold(seq, row, index, action)
                return
            try:
                await self._retrying(partial(self._act, action, index, seq, row))
            except Exception as exc:  # counted and logged: the next row goes on
                self._count("failed")
                log.warning(
                    "rule %s: %s action failed on output %d: %s", self.name, action.kind, seq, exc
                )

    async def _act(self, action: Action, index: int, seq: int, row: dict[str, Any]) -> None:
        gateway = self.service.gateway
        msg_id = self.state.action_key(self.name, seq, index)
        if isinstance(action, PublishAction):
            topic = fill_template(action.topic, row, self.name)
            publisher = self.service.publisher(action.bridge or self.definition.bridge)
            await publisher.publish_json(
                topic,
                orjson.dumps(row, option=orjson.OPT_NON_STR_KEYS),
                qos=action.qos,
                retain=action.retain,
                message_expiry_s=action.message_expiry_s,
                user_properties=(("rule", self.name), ("msg-id", msg_id)),
            )
            self._count("published")
        elif isinstance(action, AppendAction):
            target = fill_template(action.log, row, self.name)
            event = NewEvent(
                action.type,
                orjson.dumps(row, option=orjson.OPT_NON_STR_KEYS),
                headers={"rule": self.name},
                idempotency_key=msg_id,
            )
            try:
                await gateway.logs.append(self.owner, target, [event])
            except AirlaneError as exc:
                if exc.code is not ErrorCode.LOG_NOT_FOUND:
                    raise
                await gateway.logs.create(self.owner, target)
                await gateway.logs.append(self.owner, target, [event])
            self._count("appended")
        elif isinstance(action, GenerateAction):
            await self._generate(action, seq, index, row)

    async def _generate(
        self, action: GenerateAction, seq: int, index: int, row: dict[str, Any]
    ) -> None:
        gateway = self.service.gateway
        messages: list[dict[str, Any]] = []
        if action.system:
            messages.append({"role": "system", "content": action.system})
        messages.append({"role": "user", "content": fill_template(action.prompt, row, self.name)})
        request = GenerationRequest(action.model, messages, max_tokens=action.max_tokens)
        stream_id = self.state.generation_stream(self.name, seq, index)
        topic = None
        bridge = action.bridge or self.definition.bridge
        if action.result_topic is not None:
            topic = fill_template(action.result_topic, row, self.name)
            self.service.publisher(bridge)  # no bridge: this action fails, before it starts
        while len(self._forwards) >= MAX_GENERATIONS:
            await asyncio.wait(self._forwards.values(), return_when=asyncio.FIRST_COMPLETED)
        try:
            await gateway.generate(self.owner, request, stream_id=stream_id)
        except AirlaneError as exc:
            # Started before a crash cut this row's actions: forward it again.
            if exc.code is not ErrorCode.STREAM_EXISTS:
                raise
        self._count("generated")
        if topic is None:
            return
        if stream_id not in self.state.forwards:
            # Kept in the state before the row counts as done (the caller saves then): a
            # process killed while it forwards goes on where it was saved.
            self.state.forwards[stream_id] = {
                "topic": topic,
                "qos": action.qos,
                "bridge": bridge,
                "position": None,
            }
        self._start_forward(stream_id)

    def _start_forward(self, stream_id: str) -> None:
        if stream_id in self._forwards:
            return  # already on its way (resumed at start, then met again in the output)
        task = asyncio.create_task(
            self._forward(stream_id), name=f"rule {self.name} forwards {stream_id}"
        )
        self._forwards[stream_id] = task
        task.add_done_callback(lambda _: self._forwards.pop(stream_id, None))

    async def _forward(self, stream_id: str) -> None:
        """Publish a generation's events to its topic until it ends, saving how far after
        each batch (at least once: a crash publishes again what followed the last save; the
        ``stream``, ``epoch`` and ``seq`` properties tell a copy)."""
        gateway = self.service.gateway
        entry = self.state.forwards[stream_id]
        topic = str(entry["topic"])
        token = entry.get("position")
        try:
            resume = Position.parse(token) if isinstance(token, str) else None
            subscription = await gateway.subscribe(
                self.owner, stream_id, resume=resume, subscriber="rules"
            )
            try:
                # Each delta with its own seq: what a crash makes this publish again is then
                # copies a consumer skips by seq, never a merged delta repeating text it has.
                subscription.keep_deltas_apart()
                while events := await subscription.next_batch(64):
                    epoch = subscription.position.epoch
                    for event in events:
                        await self._publish_landing(stream_id, epoch, event)
                        # Per event in memory (a task that replaces this one goes on from the
                        # next), per batch on disk.
                        entry["position"] = Position(epoch, event.seq).token
                    if events[-1].kind in TERMINAL_KINDS:
                        break
                    await self.save()
            finally:
                await subscription.aclose()
        except Exception as exc:
            self._count("failed")
            log.warning("rule %s: forwarding %s to %s: %s", self.name, stream_id, topic, exc)
        self.state.forwards.pop(stream_id, None)
        await self.save()

    async def _publish_landing(self, stream_id: str, epoch: str, event: Event) -> None:
        """Publish one event (retried); a task stopped meanwhile (its rule replaced, the
        gateway closing) lets the publish land first, for up to `LANDING_S`, so that the
        position it leaves says exactly what went out: the task that takes over sends
        nothing twice."""
        publish = asyncio.ensure_future(
            self._retrying(partial(self._publish_event, stream_id, epoch, event))
        )
        try:
            await asyncio.shield(publish)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(publish, LANDING_S)
            if publish.done() and not publish.cancelled() and publish.exception() is None:
                self.state.forwards[stream_id]["position"] = Position(epoch, event.seq).token
            raise

    async def _publish_event(self, stream_id: str, epoch: str, event: Event) -> None:
        entry = self.state.forwards[stream_id]
        publisher = self.service.publisher(entry.get("bridge"))
        await publisher.publish_json(
            str(entry["topic"]),
            orjson.dumps(event_to_dict(event)),
            qos=int(entry["qos"]),
            user_properties=(
                ("rule", self.name),
                ("stream", stream_id),
                ("epoch", epoch),
                ("seq", str(event.seq)),
            ),
        )

    async def _retrying(
        self, attempt: Callable[[], Awaitable[Any]], *, forever: bool = False
    ) -> Any:
        pause = RETRY_PAUSE_S
        tries = 0
        while True:
            tries += 1
            try:
                return await attempt()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                retriable = not isinstance(exc, AirlaneError) or exc.code in _RETRIED
                if not retriable or (not forever and tries >= ACTION_ATTEMPTS):
                    raise
                log.info("rule %s: %s; trying again in %.1f s", self.name, exc, pause)
                await asyncio.sleep(pause)
                pause = min(pause * 2, 30.0)

    # -- holds ------------------------------------------------------------------------------

    def _hold(self, seq: int, row: dict[str, Any], index: int, action: HoldAction) -> None:
        limit = self.service.config.max_pending
        if len(self.state.pending) >= limit:
            self._count("hold_refused")
            log.warning(
                "rule %s: %d rows already wait for approval; output %d is rejected",
                self.name,
                limit,
                seq,
            )
            return
        now = time.time()
        key = secrets.token_hex(8)
        self.state.pending[key] = {
            "seq": seq,
            "row": row,
            "next": index + 1,
            "held_at": now,
            "expires_at": now + action.timeout_s,
        }
        self._count("held")

    async def decide(self, approval: str, approve: bool) -> dict[str, Any]:
        """Approve (run the actions after the hold) or reject a held row; KeyError if it is
        not held (any more).

        An approved row stays in the saved state, marked approved, until the actions after
        its hold have run: a process killed meanwhile, or a rule replaced, runs them again
        when it starts (at least once, as every action)."""
        item = self.state.pending.get(approval)
        if item is None or item.get("approved"):
            raise KeyError(approval)
        self._count("approved" if approve else "rejected")
        if approve:
            item["approved"] = True
        else:
            del self.state.pending[approval]
        await self.save()
        if approve:
            self._run_approved(approval, item)
        return {"id": approval, "seq": item["seq"], "row": item["row"], "approved": approve}

    def _run_approved(self, approval: str, item: dict[str, Any]) -> None:
        async def run() -> None:
            await self._run_actions(item["seq"], item["row"], item["next"])
            self.state.pending.pop(approval, None)
            await self.save()

        task = asyncio.create_task(run(), name=f"rule {self.name} approved {approval}")
        self._decisions.add(task)
        task.add_done_callback(self._decisions.discard)

    async def _expire_holds(self) -> None:
        now = time.time()
        expired = [
            k
            for k, v in self.state.pending.items()
            if v["expires_at"] <= now and not v.get("approved")
        ]
        for key in expired:
            self.state.pending.pop(key)
            self._count("expired")
            self.service.audit_expired(self, key)
        if expired:
            await self.save()


_RETRIED = frozenset(
    {
        ErrorCode.OVERLOADED,
        ErrorCode.HUB_UNAVAILABLE,
        ErrorCode.HUB_FULL,
        ErrorCode.EVENT_LOG_UNAVAILABLE,
        ErrorCode.BROKER_ERROR,
        ErrorCode.SHUTTING_DOWN,
        ErrorCode.UPSTREAM_UNAVAILABLE,
        ErrorCode.UPSTREAM_TIMEOUT,
        ErrorCode.UPSTREAM_CONNECTION_ERROR,
        ErrorCode.TOO_MANY_REQUESTS,
    }
)
"""Errors worth another try of the same action."""


def _acker(deliveries: list[Delivery]) -> Callable[[], Awaitable[None]]:
    async def ack() -> None:
        for delivery in deliveries:
            with contextlib.suppress(AirlaneError):
                await delivery.ack()

    return ack


def _log_row(
    record: Record,
) -> tuple[int, dict[str, Any] | None, float, str | None, int | None]:
    try:
        row = record.json()
    except ValueError:
        row = None
    qos_header = record.headers.get("mqtt-qos")
    qos = int(qos_header) if qos_header in ("0", "1", "2") else None
    return (
        record.seq,
        row if isinstance(row, dict) else None,
        record.time_ns / 1e9,
        record.headers.get("mqtt-topic"),
        qos,
    )


def _stream_row(
    event: Event, now: float
) -> tuple[int, dict[str, Any] | None, float, str | None, int | None]:
    whole = event_to_dict(event)
    payload = whole.get("payload")
    # A message's payload is the row; any other event is a row of its own fields.
    row = payload if event.kind is Kind.MESSAGE and isinstance(payload, dict) else whole
    return (event.seq, row, now, None, None)
