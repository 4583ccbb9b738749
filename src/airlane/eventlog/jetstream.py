"""`JetStreamEventLog`: event logs on NATS JetStream, shared by every process connected to it.

Layout: one JetStream stream per log.
    log ``rl.rewards``  ->  stream ``AIRLANE_LOGS_rl=rewards``  (file storage, discard old)
                            subject ``airlane.log.rl=rewards``  (its only subject)
    group ``trainer``   ->  durable pull consumer ``trainer`` on that stream (ack explicit)
    event               ->  one message: payload = data; type, content type, headers and the
                            idempotency key in NATS headers (`airlane.eventlog.nats_codec`)

Why a stream per log rather than every log in one stream:

- **Sequence numbers.** A stream numbers its messages 1, 2, 3 ... without gaps (retention only
  trims the front; rejected and deduplicated publishes take no number). With one stream per
  log, the stream sequence *is* the log's seq, assigned by the broker under the stream's lock.
  Appends from any number of connections and processes are therefore safe and need no
  coordination: no ``Nats-Expected-Last-Subject-Sequence`` compare-and-retry loop (which costs
  a retry per collision and starves under contention), no per-log seq header that replay and
  consumers would have to map back to stream sequences.
- **Limits.** JetStream enforces ``max_msgs``, ``max_bytes`` and ``max_age`` per stream; in a
  shared stream per-log limits would need a housekeeping task purging by subject, and byte
  limits per subject are not available at all.
- **Metadata.** The stream's configuration *is* the log's metadata, seen by every node and
  changed atomically with the log itself: no separate KV bucket that a crash between two
  writes could leave disagreeing with the streams.
- **Deduplication.** The duplicate window is per stream, so idempotency keys are per log.

The cost: JetStream streams are not free (a file store each; in a cluster, a Raft group
each). Tens to a few thousand logs are fine; an aggregate-per-log design with millions of
logs is not what this is for (use one log per event family, with an aggregate id header).

Idempotency: ``Nats-Msg-Id`` carries the caller's key, or a random one, so that this
library's own retries after a lost reply are deduplicated too; the window is
``dedup_window_s`` (JetStream's default, 2 minutes), clamped to ``max_age_s`` because the
broker requires that. A duplicate's reply carries the original's sequence, and the original
is read back with a direct get.

Durability: `append` returns once JetStream has acknowledged the message, which it does
after writing it to its file store: it survives a broker crash or restart (tested with
SIGKILL). Against power loss it is as durable as the server's ``sync_interval`` (2 minutes by
default) allows, unless ``replicas`` is 3 in a cluster, where an ack means a quorum has it.
If `append` raises `EventLogUnavailable`, the event was most likely not stored (nothing is
sent while the client reconnects), but one in flight when the connection dropped may have
been: retry with an idempotency key to be certain.

Times: each record's ``time_ns`` is the broker's stamp (what replay by time searches), so
`append` reads the stored message back (one direct get) to return it.

Bounds: every request is retried per `RetryPolicy` and each waits ``request_timeout_s``;
a member's client-side buffer holds at most ``member_buffer_msgs`` messages and
``member_buffer_bytes`` bytes (nats-py drops past that; those records are redelivered after
``ack_wait``); at most ``max_ack_pending`` records are pending per group; storage is bounded
by the log's limits, the configured defaults, and the broker's own store limits.
"""

from __future__ import annotations

import contextlib
import datetime
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar, cast

import nats.errors
import nats.js.errors
import orjson
from nats.aio.client import Client as NATS
from nats.js import api

from airlane.eventlog.base import (
    DEFAULT_MAX_EVENT_BYTES,
    MAX_FETCH_EVENTS,
    MAX_READ_BYTES,
    ConsumerGroup,
    EventLog,
    GroupInfo,
    GroupSettings,
    LogInfo,
    LogLimits,
    NewEvent,
    Record,
    Validator,
)
from airlane.eventlog.errors import (
    EventLogUnavailable,
    GroupNotFound,
    InvalidRequest,
    LogExists,
    LogNotFound,
)
from airlane.eventlog.jetstream_group import (
    ERR_STREAM_NOT_FOUND,
    GroupRef,
    JetStreamConsumerGroup,
    group_info,
    lookup_group,
)
from airlane.eventlog.nats_codec import (
    decode_record,
    format_time_ns,
    message_headers,
    name_from_token,
    name_token,
    parse_ack_reply,
    parse_time_ns,
)
from airlane.eventlog.nats_retry import RetryPolicy, with_retries

__all__ = ["JetStreamEventLog", "JetStreamEventLogConfig"]

T = TypeVar("T")

_STREAM_PREFIX = re.compile(r"[A-Za-z0-9_-]{1,32}")
_SUBJECT_PREFIX = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*")
_READ_BATCH = 256  # messages per pull request while replaying
_ONCE = RetryPolicy(attempts=1)  # translate nats-py's errors without retrying


@dataclass(frozen=True, slots=True)
class JetStreamEventLogConfig:
    """Timeouts, retries and bounds of a `JetStreamEventLog`."""

    request_timeout_s: float = 2.0
    """How long one request to the broker may take."""
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    """How requests are retried before `EventLogUnavailable`."""
    dedup_window_s: float = 120.0
    """How long JetStream remembers an idempotency key (clamped to a log's ``max_age_s``)."""
    replicas: int = 1
    """Stream replicas (1 on a single server; 3 in a cluster for fault tolerance)."""
    default_max_events: int | None = None
    """Records kept per log created without ``max_events`` (None: the broker's limits)."""
    default_max_bytes: int | None = None
    """Bytes kept per log created without ``max_bytes`` (None: the broker's limits)."""
    max_ack_pending: int = 1_000
    """Most records pending an ack per group (JetStream's default for pull consumers)."""
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
    """Largest event accepted (the broker's ``max_payload`` applies as well)."""
    replay_inactive_threshold_s: float = 30.0
    """The broker deletes a replay consumer idle this long (one left by a crashed reader)."""
    member_buffer_msgs: int = 4 * MAX_FETCH_EVENTS
    """Messages one subscription may buffer client-side."""
    member_buffer_bytes: int = 64 * 1024 * 1024
    """Bytes one subscription may buffer client-side."""


class JetStreamEventLog(EventLog):
    """Event logs as JetStream streams (see the module docstring for the layout).

    ``nc`` is a connected client; it stays the caller's to close. Its reconnect settings
    decide how quickly a restarted broker is reached again; `RetryPolicy` bounds how long a
    request waits for that.
    """

    def __init__(
        self,
        nc: NATS,
        *,
        stream: str = "AIRLANE_LOGS",
        prefix: str = "airlane.log",
        config: JetStreamEventLogConfig | None = None,
        validate: Validator | None = None,
    ) -> None:
        if _STREAM_PREFIX.fullmatch(stream) is None:
            raise InvalidRequest(f"stream prefix {stream!r}: expected [A-Za-z0-9_-]{{1,32}}")
        if _SUBJECT_PREFIX.fullmatch(prefix) is None:
            raise InvalidRequest(f"subject prefix {prefix!r}: dot-separated plain tokens")
        self.config = config or JetStreamEventLogConfig()
        """Timeouts, retries and bounds."""
        super().__init__(validate=validate, max_event_bytes=self.config.max_event_bytes)
        self._nc = nc
        self._js = nc.jetstream(timeout=self.config.request_timeout_s)
        self._stream_prefix = stream
        self._subject_prefix = prefix

    # -- names ----------------------------------------------------------------------------------

    def stream_name(self, log: str) -> str:
        """The JetStream stream that holds ``log``."""
        return f"{self._stream_prefix}_{name_token(log)}"

    def subject(self, log: str) -> str:
        """The subject ``log``'s events are published on."""
        return f"{self._subject_prefix}.{name_token(log)}"

    def _log_name(self, config: api.StreamConfig) -> str | None:
        """The log a stream holds, or None for a stream that is not one of ours."""
        head = f"{self._stream_prefix}_"
        if not config.name or not config.name.startswith(head):
            return None
        name = name_from_token(config.name[len(head) :])
        return name if config.subjects == [self.subject(name)] else None

    async def _retry(self, what: str, request: Callable[[], Awaitable[T]]) -> T:
        return await with_retries(
            self.config.retry,
            what,
            request,
            nc=self._nc,
            connect_timeout_s=self.config.request_timeout_s,
        )

    # -- logs -----------------------------------------------------------------------------------

    async def logs(self) -> list[str]:
        """The names of all logs under this stream and subject prefix, sorted."""

        async def request() -> list[str]:
            names: list[str] = []
            offset = 0
            while page := await self._js.streams_info(offset):
                offset += len(page)
                names.extend(n for info in page if (n := self._log_name(info.config)))
            return sorted(names)

        return await self._retry("logs", request)

    async def _create_log(self, name: str, limits: LogLimits, exist_ok: bool) -> LogInfo:
        tried = False

        async def request() -> api.StreamInfo:
            nonlocal tried
            try:
                info = await self._js.stream_info(self.stream_name(name))
            except nats.js.errors.NotFoundError:
                pass
            else:
                # Found on a retry: our own earlier attempt created it before its reply was lost.
                if not exist_ok and not tried:
                    raise LogExists(f"log {name!r} exists")
                return info
            tried = True
            try:
                return await self._js.add_stream(self._stream_config(name, limits))
            except nats.js.errors.BadRequestError:
                # Created concurrently by another process with other limits.
                info = await self._js.stream_info(self.stream_name(name))
                if not exist_ok:
                    raise LogExists(f"log {name!r} exists") from None
                return info

        return _log_info(name, await self._retry(f"create_log {name}", request))

    def _stream_config(self, name: str, limits: LogLimits) -> api.StreamConfig:
        max_events = limits.max_events or self.config.default_max_events
        max_bytes = limits.max_bytes or self.config.default_max_bytes
        window = self.config.dedup_window_s
        if limits.max_age_s is not None:
            window = min(window, limits.max_age_s)  # the broker refuses a longer window
        return api.StreamConfig(
            name=self.stream_name(name),
            description=f"Airlane event log {name}",
            subjects=[self.subject(name)],
            retention=api.RetentionPolicy.LIMITS,
            storage=api.StorageType.FILE,
            discard=api.DiscardPolicy.OLD,
            max_msgs=max_events or -1,
            max_bytes=max_bytes or -1,
            max_age=limits.max_age_s or 0,
            duplicate_window=window,
            num_replicas=self.config.replicas,
            allow_direct=True,
        )

    async def _delete_log(self, name: str) -> None:
        tried = False

        async def request() -> None:
            nonlocal tried
            try:
                await self._js.delete_stream(self.stream_name(name))
            except nats.js.errors.NotFoundError as exc:
                if not tried:
                    raise LogNotFound(f"no log {name!r}") from exc
            finally:
                tried = True

        await self._retry(f"delete_log {name}", request)

    async def _info(self, name: str) -> LogInfo:
        return _log_info(name, await self._retry(f"info {name}", lambda: self._stream(name)))

    async def _stream(self, name: str) -> api.StreamInfo:
        try:
            return await self._js.stream_info(self.stream_name(name))
        except nats.js.errors.NotFoundError as exc:
            raise LogNotFound(f"no log {name!r}") from exc

    # -- appending ------------------------------------------------------------------------------

    async def _append(self, name: str, events: list[NewEvent]) -> list[Record]:
        # One event at a time, in order: a failure leaves a clean prefix stored, never a
        # later event stored ahead of an earlier one.
        return [await self._append_one(name, event) for event in events]

    async def _append_one(self, name: str, event: NewEvent) -> Record:
        headers = message_headers(event)

        async def publish() -> api.PubAck:
            try:
                return await self._js.publish(
                    self.subject(name),
                    event.data,
                    timeout=self.config.request_timeout_s,
                    stream=self.stream_name(name),
                    headers=dict(headers),  # nats-py adds to the dict it is given
                )
            except nats.js.errors.NoStreamResponseError:
                await self._stream(name)  # LogNotFound if it does not exist
                raise  # it exists: JetStream is restarting or electing, so retry

        ack = await self._retry(f"append {name}", publish)
        stored = await self._retry(f"append {name}", lambda: self._get(name, ack.seq))
        if stored is not None:
            return stored
        # A duplicate whose original retention already trimmed: the key is the event's
        # identity, so the retry describes it; its time is no longer known.
        return Record(
            name,
            ack.seq,
            0,
            event.type,
            event.data,
            event.content_type,
            dict(event.headers),
        )

    async def _get(self, name: str, seq: int) -> Record | None:
        try:
            msg = await self._js.get_msg(self.stream_name(name), seq, direct=True)
        except nats.js.errors.NotFoundError:
            return None
        headers = cast(dict[str, str], msg.headers or {})
        time_ns = parse_time_ns(headers["Nats-Time-Stamp"])
        return decode_record(name, seq, time_ns, headers, msg.data)

    # -- replay ---------------------------------------------------------------------------------

    async def _read(
        self, name: str, from_seq: int | None, from_time_ns: int | None, limit: int
    ) -> list[Record]:
        """Replay through an ephemeral pull consumer (ack none, in memory): the broker finds
        the start (by sequence or by time) and streams the records in order."""
        stream = self.stream_name(name)
        config = api.ConsumerConfig(
            ack_policy=api.AckPolicy.NONE,
            inactive_threshold=self.config.replay_inactive_threshold_s,
            mem_storage=True,
        )
        if from_seq is not None:
            config.deliver_policy = api.DeliverPolicy.BY_START_SEQUENCE
            config.opt_start_seq = from_seq
        elif from_time_ns is not None:
            config.deliver_policy = api.DeliverPolicy.BY_START_TIME
            # nats-py sends a string as it is: nanoseconds survive (a datetime keeps micro).
            config.opt_start_time = cast(datetime.datetime, format_time_ns(from_time_ns))

        async def create() -> api.ConsumerInfo:
            try:
                return await self._js.add_consumer(stream, config)
            except nats.js.errors.NotFoundError as exc:
                raise LogNotFound(f"no log {name!r}") from exc

        info = await self._retry(f"read {name}", create)
        try:
            wanted = min(limit, info.num_pending or 0)
            if wanted == 0:
                return []
            return await with_retries(
                _ONCE, f"read {name}", lambda: self._drain(name, info.name, wanted)
            )
        finally:
            with contextlib.suppress(nats.errors.Error):
                # Best effort: the broker deletes it after replay_inactive_threshold_s anyway.
                await self._js.delete_consumer(stream, info.name)

    async def _drain(self, name: str, consumer: str, wanted: int) -> list[Record]:
        sub = await self._js.pull_subscribe_bind(
            consumer=consumer,
            stream=self.stream_name(name),
            pending_msgs_limit=self.config.member_buffer_msgs,
            pending_bytes_limit=self.config.member_buffer_bytes,
        )
        records: list[Record] = []
        total = 0
        try:
            while len(records) < wanted:
                batch = min(wanted - len(records), _READ_BATCH)
                try:
                    msgs = await sub.fetch(batch, timeout=self.config.request_timeout_s)
                except TimeoutError:
                    if records or self._nc.is_connected:
                        break  # retention trimmed the rest meanwhile
                    raise EventLogUnavailable(f"read {name}: disconnected") from None
                for msg in msgs:
                    seq, _, time_ns = parse_ack_reply(msg.reply)
                    total += len(msg.data)
                    # Contiguous records only: a message the client buffer dropped would
                    # otherwise leave a silent hole.
                    contiguous = not records or seq == records[-1].seq + 1
                    if not contiguous or (records and total > MAX_READ_BYTES):
                        return records
                    records.append(decode_record(name, seq, time_ns, msg.headers, msg.data))
            return records
        finally:
            with contextlib.suppress(nats.errors.Error):
                await sub.unsubscribe()

    # -- consumer groups ------------------------------------------------------------------------

    def _group_ref(self, name: str, group: str) -> GroupRef:
        return GroupRef(
            nc=self._nc,
            js=self._js,
            log=name,
            group=group,
            stream=self.stream_name(name),
            consumer=name_token(group),
            retry=self.config.retry,
            request_timeout_s=self.config.request_timeout_s,
            buffer_msgs=self.config.member_buffer_msgs,
            buffer_bytes=self.config.member_buffer_bytes,
        )

    async def _consumer_group(
        self, name: str, group: str, settings: GroupSettings
    ) -> ConsumerGroup:
        ref = self._group_ref(name, group)
        what = f"consumer_group {name}/{group}"
        info = await self._retry(what, lambda: self._find_group(ref))
        if info is None:
            start_seq = settings.start_seq
            if settings.start_time_ns is not None:
                start_seq = await self._seq_at_time(name, settings.start_time_ns)
            config = self._group_config(ref, settings, start_seq)
            info = await self._retry(what, lambda: self._create_group(ref, config))
        # Checked against the broker's copy, which every node shares: a join never writes
        # the consumer's configuration, so no member can reset another's settings.
        stored = group_info(ref, info)
        settings.check_join(name, group, stored.ack_wait_s, stored.max_deliver)
        return JetStreamConsumerGroup(ref, stored.ack_wait_s)

    async def _find_group(self, ref: GroupRef) -> api.ConsumerInfo | None:
        try:
            return await lookup_group(ref)
        except GroupNotFound:
            return None

    async def _create_group(self, ref: GroupRef, config: api.ConsumerConfig) -> api.ConsumerInfo:
        try:
            return await self._js.add_consumer(ref.stream, config)
        except nats.js.errors.NotFoundError as exc:
            raise LogNotFound(f"no log {ref.log!r}") from exc
        except nats.js.errors.BadRequestError:
            # Another member created it at the same moment, in a way the broker would not
            # merge with this one: join theirs (the caller then checks the settings). Two
            # first joins the broker can merge race: nats-server 2.9 updates an existing
            # durable's ack_wait and max_deliver in place, so the later creation wins.
            found = await self._find_group(ref)
            if found is None:
                raise
            return found

    async def _seq_at_time(self, name: str, time_ns: int) -> int:
        """The seq of the first record stored at or after ``time_ns`` (or the next one).

        A group starts by sequence even when asked to start by time, so that its stored
        configuration holds nothing that nats-py would round to microseconds. Info first, then
        the read: a record appended in between is either found by the read or numbered after
        ``last_seq``, so none is skipped.
        """
        last_seq = (await self._info(name)).last_seq
        first = await self._read(name, None, time_ns, 1)
        return first[0].seq if first else last_seq + 1

    def _group_config(
        self, ref: GroupRef, settings: GroupSettings, start_seq: int | None
    ) -> api.ConsumerConfig:
        """A new group's consumer configuration (defaults where ``settings`` asks nothing)."""
        policy = api.DeliverPolicy.BY_START_SEQUENCE if start_seq else api.DeliverPolicy.ALL
        return api.ConsumerConfig(
            durable_name=ref.consumer,
            description=f"Airlane consumer group {ref.group} on log {ref.log}",
            deliver_policy=policy,
            opt_start_seq=start_seq,
            ack_policy=api.AckPolicy.EXPLICIT,
            ack_wait=settings.new_ack_wait_s,
            max_deliver=settings.max_deliver or -1,
            max_ack_pending=self.config.max_ack_pending,
        )

    def _token_log(self, token: str) -> str | None:
        stream = _stream_of_ack(token)
        head = f"{self._stream_prefix}_"
        if stream is None or not stream.startswith(head):
            return None
        return name_from_token(stream[len(head) :])

    async def _settle(self, token: str, action: str, delay: float | None) -> None:
        stream = _stream_of_ack(token)
        if stream is None or not stream.startswith(f"{self._stream_prefix}_"):
            # Only ack subjects of this log's streams: a token must not reach other consumers.
            raise InvalidRequest("not a delivery token of this event log")
        if action == "ack":
            # Confirmed, as Delivery.ack is; the broker answers an ack of a delivery that is
            # no longer current too, so a stale token does not hang here.
            timeout = self.config.request_timeout_s
            await self._retry("ack", lambda: self._nc.request(token, b"+ACK", timeout=timeout))
            return
        if action == "nak":
            payload = b"-NAK"
            if delay:
                payload += b" " + orjson.dumps({"delay": int(delay * 1e9)})
        else:
            payload = b"+WPI"
        await self._retry(action, lambda: self._nc.publish(token, payload))

    async def _group_info(self, name: str, group: str) -> GroupInfo:
        ref = self._group_ref(name, group)
        info = await self._retry(f"group_info {name}/{group}", lambda: lookup_group(ref))
        return group_info(ref, info)

    async def _delete_group(self, name: str, group: str) -> None:
        ref = self._group_ref(name, group)
        tried = False

        async def request() -> None:
            nonlocal tried
            try:
                await self._js.delete_consumer(ref.stream, ref.consumer)
            except nats.js.errors.NotFoundError as exc:
                if exc.err_code == ERR_STREAM_NOT_FOUND:
                    raise LogNotFound(f"no log {name!r}") from exc
                if not tried:
                    raise GroupNotFound(f"no group {group!r} on log {name!r}") from exc
            finally:
                tried = True

        await self._retry(f"delete_group {name}/{group}", request)


def _stream_of_ack(token: str) -> str | None:
    """The stream named in a JetStream ack subject, or None if ``token`` is not one."""
    try:
        parse_ack_reply(token)
    except ValueError:
        return None
    tokens = token.split(".")
    return tokens[2] if len(tokens) == 9 else tokens[4]


def _log_info(name: str, info: api.StreamInfo) -> LogInfo:
    state, config = info.state, info.config
    # An empty stream reports first_seq 0 when new and last_seq + 1 once trimmed: normalize.
    first_seq = state.first_seq if state.messages else state.last_seq + 1
    limits = LogLimits(
        max_age_s=config.max_age or None,
        max_bytes=config.max_bytes if config.max_bytes and config.max_bytes > 0 else None,
        max_events=config.max_msgs if config.max_msgs and config.max_msgs > 0 else None,
    )
    return LogInfo(name, first_seq, state.last_seq, state.messages, state.bytes, limits)
