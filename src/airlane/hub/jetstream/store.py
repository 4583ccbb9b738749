"""`JetStreamStore`: JetStream as the hub uses it, and nothing else.

The hub thinks in stream keys, stored batches and metadata; this module knows the NATS API:
which JetStream stream and buckets exist, how a conditional publish is made and retried, how a
subject is read back message by message or followed with an ordered consumer, and which errors
mean "the broker does not answer" (`HubUnavailable`) rather than "no".
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from datetime import datetime
from typing import Any, NamedTuple

import nats
import nats.errors
import nats.js.errors
import orjson
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext, api
from nats.js.kv import KeyValue

from airlane.hub.base import EventTooLarge, HubError, HubUnavailable
from airlane.hub.jetstream.config import JetStreamHubConfig

__all__ = ["Conflict", "JetStreamStore", "StoredBatch"]

log = logging.getLogger("airlane.hub.jetstream")

_WRONG_LAST_SEQUENCE = 10071
"""JetStream's error code for a failed ``Nats-Expected-Last-Subject-Sequence``."""
TELL_FLUSH_S = 3
"""How long a flushed `JetStreamStore.tell` waits for the broker's word that it has it."""

UNREACHABLE = (
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
    nats.errors.ConnectionClosedError,
    nats.errors.ConnectionReconnectingError,
    nats.errors.OutboundBufferLimitError,
    nats.js.errors.ServiceUnavailableError,
    asyncio.TimeoutError,
)
"""Errors that mean the broker did not answer (as opposed to answering no)."""
FOLLOW_HEARTBEAT_S = 2.0
"""Idle heartbeat of the ordered consumers reading history (a stalled one is re-made)."""
FOLLOW_PENDING_MSGS = 4096
FOLLOW_PENDING_BYTES = 16 << 20
"""Bounds on what a followed stream's subscription buffers; past them the client drops
messages (a slow consumer), which the gap check notices and reads back."""


class Conflict(HubError):
    """A conditional publish lost: something was appended to the subject in between."""


class StoredBatch(NamedTuple):
    """One message of a stream's subject as read back."""

    js_seq: int
    payload: bytes
    ts_ns: int
    """When JetStream stored it, on this process's monotonic clock."""
    msg_id: str | None
    prev: int | None = None
    """The sequence of the subject's message before it, where known (republished live, or
    the condition it was published on); a read-back that meets a ``prev`` newer than the
    message it applied last crossed a purge."""


def monotonic_ns_of(wall: datetime | None) -> int:
    """A JetStream timestamp (wall clock) on this process's monotonic clock."""
    if wall is None:
        return time.monotonic_ns()
    age_ns = time.time_ns() - int(wall.timestamp() * 1e9)
    return time.monotonic_ns() - max(0, age_ns)


class JetStreamStore:
    """The events stream, the metadata and snapshot buckets, and the control subjects."""

    def __init__(self, config: JetStreamHubConfig, node: str) -> None:
        self.config = config
        self.node = node
        self.incarnation = ""
        """Identifies this incarnation of the events stream (set by `connect`)."""
        self._nc: NatsClient | None = None
        self._js: JetStreamContext | None = None
        self._meta: KeyValue | None = None
        self._snapshots: KeyValue | None = None
        # Publish acknowledgements: one subscription for all of them, a future per publish.
        self._ack_prefix = ""
        self._acks: dict[str, asyncio.Future[Msg]] = {}
        self._ack_tokens = itertools.count()
        self.on_missed: Callable[[], None] | None = None
        """Called when live messages may have been lost (reconnect, slow consumer)."""

    # -- connection -------------------------------------------------------------------------

    async def connect(self) -> None:
        """Connect and create the events stream and buckets where missing.

        Raises:
            HubUnavailable: NATS cannot be reached (within ``unavailable_after_s``: the
                client retries a connection it has had for ever, but a first one that never
                succeeds would hold the gateway's start-up without a word).
        """
        cfg = self.config
        where = ", ".join(cfg.servers)
        try:
            self._nc = await asyncio.wait_for(
                nats.connect(
                    list(cfg.servers),
                    name=f"airlane-{self.node}",
                    connect_timeout=cfg.request_timeout_s,
                    reconnect_time_wait=0.25,
                    max_reconnect_attempts=-1,
                    error_cb=self._on_error,
                    reconnected_cb=self._on_reconnected,
                ),
                cfg.unavailable_after_s,
            )
            self._js = self._nc.jetstream(timeout=cfg.request_timeout_s)
            self._ack_prefix = self._nc.new_inbox() + "."
            await self._nc.subscribe(self._ack_prefix + "*", cb=self._on_ack)
            storage = api.StorageType.FILE if cfg.storage == "file" else api.StorageType.MEMORY
            info = await self._events_stream(storage)
            if cfg.layout == "node":
                # The home logs hold the events; their stream names the incarnation.
                info = await self._log_stream(storage)
            self._meta = await self._bucket(cfg.meta_bucket, storage)
            self._snapshots = await self._bucket(cfg.snapshot_bucket, storage)
        except TimeoutError as exc:
            await self.close()
            raise HubUnavailable(
                f"cannot reach NATS at {where} within {cfg.unavailable_after_s:g} s"
            ) from exc
        except (OSError, *UNREACHABLE) as exc:
            await self.close()
            raise HubUnavailable(f"cannot reach NATS at {where}: {exc}") from exc
        # The stream's creation time identifies this incarnation of the history: if it is lost
        # and made again, streams recorded against the old one are gone, and the hub says so.
        created = getattr(info, "created", None)
        self.incarnation = hashlib.sha256(str(created).encode()).hexdigest()[:4]

    async def close(self) -> None:
        """Flush what is pending and disconnect."""
        nc, self._nc = self._nc, None
        if nc is not None and not nc.is_closed:
            with contextlib.suppress(Exception):
                await nc.drain()

    async def _events_stream(self, storage: api.StorageType) -> api.StreamInfo:
        cfg = self.config
        js = self._jetstream()
        republish = api.RePublish(src=f"{cfg.prefix}.s.>", dest=f"{cfg.prefix}.r.>")
        try:
            info = await js.stream_info(cfg.events_stream)
        except nats.js.errors.NotFoundError:
            return await self._add_stream(
                cfg.events_stream, "s", republish, storage, "stream events (one subject each)"
            )
        if info.config.republish is None:  # made by an older release: followers need it
            info = await js.update_stream(info.config.evolve(republish=republish))
        return info

    async def _log_stream(self, storage: api.StorageType) -> api.StreamInfo:
        cfg = self.config
        js = self._jetstream()
        try:
            return await js.stream_info(cfg.log_stream)
        except nats.js.errors.NotFoundError:
            republish = api.RePublish(src=f"{cfg.prefix}.h.>", dest=f"{cfg.prefix}.hr.>")
            return await self._add_stream(
                cfg.log_stream, "h", republish, storage, "home logs (one subject per process)"
            )

    async def _add_stream(
        self,
        name: str,
        token: str,
        republish: api.RePublish,
        storage: api.StorageType,
        what: str,
    ) -> api.StreamInfo:
        """Make a JetStream stream of events on ``<prefix>.<token>.>``: kept
        ``history_ttl_s``, a 120 s duplicate window, direct gets allowed."""
        cfg = self.config
        return await self._jetstream().add_stream(
            name=name,
            subjects=[f"{cfg.prefix}.{token}.>"],
            republish=republish,
            storage=storage,
            num_replicas=cfg.replicas,
            max_age=cfg.history_ttl_s,
            duplicate_window=120.0,
            discard=api.DiscardPolicy.OLD,
            allow_direct=True,
            description=f"Airlane {what}",
        )

    async def _bucket(self, name: str, storage: api.StorageType) -> KeyValue:
        js = self._jetstream()
        try:
            return await js.key_value(name)
        except nats.js.errors.BucketNotFoundError:
            return await js.create_key_value(
                bucket=name,
                history=1,
                ttl=self.config.history_ttl_s,
                storage=storage,
                replicas=self.config.replicas,
            )

    # -- metadata and snapshots -------------------------------------------------------------

    async def create_meta(self, key: str, value: bytes) -> bool:
        """Store a new stream's metadata; False if the key exists (on any node)."""
        try:
            await _answer(self._kv(self._meta).create(key, value))
        except nats.js.errors.KeyWrongLastSequenceError:
            return False
        return True

    async def get_meta(self, key: str) -> bytes | None:
        """A stream's metadata, or None."""
        return await self._get(self._kv(self._meta), key)

    async def put_meta(self, key: str, value: bytes) -> None:
        """Replace a stream's metadata."""
        await _answer(self._kv(self._meta).put(key, value))

    async def get_snapshot(self, key: str) -> bytes | None:
        """A stream's stored folded history, or None."""
        return await self._get(self._kv(self._snapshots), key)

    async def put_snapshot(self, key: str, value: bytes) -> None:
        """Store a stream's folded history."""
        await _answer(self._kv(self._snapshots).put(key, value))

    async def _get(self, bucket: KeyValue, key: str) -> bytes | None:
        try:
            entry = await self._patiently(lambda: bucket.get(key))
        except nats.js.errors.KeyNotFoundError:
            return None
        value: bytes | None = entry.value
        return value or None

    async def forget(self, key: str) -> None:
        """Remove a stream's metadata, snapshot and events."""
        for bucket in (self._meta, self._snapshots):
            with contextlib.suppress(nats.js.errors.NotFoundError):
                await _answer(self._kv(bucket).delete(key))
        await _answer(
            self._jetstream().purge_stream(self.config.events_stream, subject=self.subject(key))
        )

    async def purge_on(self, stream: str, subject: str, js_seq: int) -> None:
        """Drop ``subject``'s messages older than ``js_seq`` (of JetStream stream ``stream``)."""
        if js_seq <= 1:
            # Nothing is older; and a purge with sequence 1 and a subject drops every message
            # of the subject (nats-server 2.9 reads it as no sequence at all).
            return
        await _answer(self._jetstream().purge_stream(stream, seq=js_seq, subject=subject))

    async def purge_below(self, key: str, js_seq: int) -> None:
        """Drop a stream's messages older than ``js_seq``."""
        await self.purge_on(self.config.events_stream, self.subject(key), js_seq)

    # -- events -----------------------------------------------------------------------------

    def subject(self, key: str) -> str:
        """The subject of the stream with ``key``."""
        return f"{self.config.prefix}.s.{key}"

    async def publish(self, key: str, payload: bytes, *, msg_id: str, after: int) -> int:
        """Append ``payload`` to the stream's subject if its newest message is ``after``;
        return the new message's sequence (see `publish_on`)."""
        return await self.publish_on(
            self.config.events_stream, self.subject(key), payload, msg_id=msg_id, after=after
        )

    async def publish_on(
        self, stream: str, subject: str, payload: bytes, *, msg_id: str, after: int
    ) -> int:
        """Append ``payload`` to ``subject`` (of the JetStream stream ``stream``) if the
        subject's newest message is ``after``; return the new message's sequence.

        Retried while JetStream does not answer, for up to ``unavailable_after_s``, under the
        same message id: a try that was stored but not acknowledged is answered by the retry
        with its own sequence instead of being stored twice.

        Raises:
            Conflict: another message was appended after ``after``.
            EventTooLarge: the message is more than the server takes (its ``max_payload``).
            HubUnavailable: JetStream did not answer in time.
            HubError: JetStream refused for another reason.
        """
        headers = {"Nats-Msg-Id": msg_id, "Nats-Expected-Last-Subject-Sequence": str(after)}
        self.check_size(payload, headers)
        deadline = time.monotonic() + self.config.unavailable_after_s
        delay = 0.05
        while True:
            try:
                answer = await self._request_ack(subject, payload, headers)
            except UNREACHABLE as exc:
                if time.monotonic() + delay > deadline:
                    raise HubUnavailable(f"JetStream does not answer: {exc!r}") from exc
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
                continue
            error = answer.get("error")
            if error is None:
                seq = int(answer["seq"])
                if answer.get("duplicate"):
                    await self._confirm_duplicate(stream, subject, seq, payload, msg_id)
                return seq
            if error.get("err_code") == _WRONG_LAST_SEQUENCE:
                raise Conflict(str(error.get("description")))
            if error.get("code") == 503:  # no JetStream leader yet (restart, election)
                if time.monotonic() + delay > deadline:
                    raise HubUnavailable(f"JetStream is not ready: {error}")
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
                continue
            raise HubError(f"JetStream refused an append: {error.get('description')}")

    async def _confirm_duplicate(
        self, stream: str, subject: str, seq: int, payload: bytes, msg_id: str
    ) -> None:
        """JetStream took a publish for one it stored before (same message id, within its
        duplicate window): fine if that is this very publish, stored by an earlier try whose
        acknowledgement was lost; an error otherwise, since acknowledging it would report as
        stored something that is not.

        Raises:
            HubError: the message JetStream holds under that id is not this one.
        """
        try:
            stored = await _answer(self._jetstream().get_msg(stream, seq))
        except nats.js.errors.NotFoundError:
            stored = None
        if stored is None or stored.subject != subject or stored.data != payload:
            raise HubError(
                f"JetStream holds another message under id {msg_id!r} (seq {seq}): "
                "the append was not stored"
            )

    async def _request_ack(
        self, subject: str, payload: bytes, headers: dict[str, str]
    ) -> dict[str, Any]:
        """Publish to a JetStream subject and wait for its acknowledgement.

        What ``JetStreamContext.publish`` does, leaner (a counter instead of a random token,
        orjson, a timer instead of ``wait_for``): it runs once per appended batch.
        """
        nc = self._client()
        if nc.is_reconnecting:
            # Published now, it would wait in the client's buffer and be sent unconditioned
            # by what is appended meanwhile; fail it and let the retry publish it afresh.
            raise nats.errors.ConnectionReconnectingError
        token = str(next(self._ack_tokens))
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[Msg] = loop.create_future()
        self._acks[token] = answer
        timer = loop.call_later(self.config.request_timeout_s, _time_out, answer)
        try:
            await nc.publish(subject, payload, reply=self._ack_prefix + token, headers=headers)
            msg = await answer
        finally:
            timer.cancel()
            self._acks.pop(token, None)
        if msg.headers and msg.headers.get("Status") == "503":
            raise nats.errors.NoRespondersError
        try:
            decoded: dict[str, Any] = orjson.loads(msg.data)
        except orjson.JSONDecodeError as exc:
            raise HubError(f"JetStream answered an append with {msg.data[:200]!r}") from exc
        return decoded

    async def _on_ack(self, msg: Msg) -> None:
        answer = self._acks.get(msg.subject[len(self._ack_prefix) :])
        if answer is not None and not answer.done():
            answer.set_result(msg)

    async def next_after(self, key: str, js_seq: int) -> StoredBatch | None:
        """The stream's first message after ``js_seq``, or None."""
        try:
            msg = await _answer(
                self._jetstream().get_msg(
                    self.config.events_stream, js_seq + 1, self.subject(key), next=True
                )
            )
        except nats.js.errors.NotFoundError:
            return None
        headers = msg.headers or {}
        return StoredBatch(
            msg.seq, msg.data or b"", monotonic_ns_of(msg.time), headers.get("Nats-Msg-Id")
        )

    async def newest_after(self, stream: str, subject: str, after: int) -> int:
        """The sequence of ``subject``'s newest message if one is newer than ``after``, else
        ``after``.

        A direct get of the next message first: when there is none (the usual answer for a
        node that follows the subject live) the broker answers "not found" without reading a
        message, where asking for the newest one would send a whole (large) message back.
        """
        try:
            await self._patiently(
                lambda: self._jetstream().get_msg(
                    stream, after + 1, subject, next=True, direct=True
                )
            )
        except nats.js.errors.NotFoundError:
            return after
        return max(after, await self.last_seq_on(stream, subject))

    async def last_seq(self, key: str) -> int:
        """The sequence of the stream's newest message (0 if it has none); see `last_seq_on`."""
        return await self.last_seq_on(self.config.events_stream, self.subject(key))

    async def last_seq_on(self, stream: str, subject: str) -> int:
        """The sequence of ``subject``'s newest message (0 if it has none).

        A direct get: the message comes as it is stored, not base64 in JSON (it is read for
        its sequence only). With replicas, a follower may answer from a little behind; every
        caller reads on from what it learns (a live subscription, the next conflict).
        """
        try:
            msg = await self._patiently(
                lambda: self._jetstream().get_msg(stream, subject=subject, direct=True)
            )
        except nats.js.errors.NotFoundError:
            return 0
        return int(msg.seq or 0)

    async def read_until(
        self, key: str, after: int, until: int, deliver: Callable[[StoredBatch], None]
    ) -> None:
        """`read_until_on` the stream's subject."""
        await self.read_until_on(
            self.config.events_stream, self.subject(key), after, until, deliver
        )

    async def read_until_on(
        self,
        stream: str,
        subject: str,
        after: int,
        until: int,
        deliver: Callable[[StoredBatch], None],
    ) -> None:
        """Call ``deliver`` with every message after ``after`` up to ``until``, read in bulk
        through a short-lived ordered consumer (one request per message would cost a round
        trip each when a node first loads a long stream).

        Raises:
            HubUnavailable: they did not all arrive within ``unavailable_after_s``.
        """
        if until <= after:
            return
        arrived = asyncio.get_running_loop().create_future()

        def take(batch: StoredBatch) -> None:
            deliver(batch)
            if batch.js_seq >= until and not arrived.done():
                arrived.set_result(None)

        subscription = await self._read(stream, subject, after, take)
        try:
            await asyncio.wait_for(arrived, self.config.unavailable_after_s)
        except TimeoutError as exc:
            raise HubUnavailable(f"JetStream did not deliver {subject} in time") from exc
        finally:
            with contextlib.suppress(Exception):
                await subscription.unsubscribe()

    async def follow(self, key: str, deliver: Callable[[StoredBatch], None]) -> Subscription:
        """Call ``deliver`` with each message appended to the stream from now on.

        JetStream republishes every stored message on ``<prefix>.r.<key>`` (a plain NATS
        subject: no consumer on the server, no flow control) with its sequence and the
        sequence of the subject's previous message, so a follower sees at once if it missed
        one (at-most-once delivery, a reconnect) and reads it back. What was stored before
        this call is `read_until`'s business.
        """
        return await self._follow_subject(f"{self.config.prefix}.r.{key}", deliver)

    async def _follow_subject(
        self, subject: str, deliver: Callable[[StoredBatch], None]
    ) -> Subscription:
        """Subscribe to republished messages on ``subject``."""

        async def on_message(msg: Msg) -> None:
            headers = msg.headers or {}
            try:
                js_seq = int(headers["Nats-Sequence"])
                prev = int(headers.get("Nats-Last-Sequence", "0"))
            except (KeyError, ValueError):
                return  # not a republished message: nothing this hub wrote
            batch = StoredBatch(
                js_seq, msg.data, time.monotonic_ns(), headers.get("Nats-Msg-Id"), prev
            )
            deliver(batch)

        subscription: Subscription = await self._client().subscribe(
            subject,
            cb=on_message,
            pending_msgs_limit=FOLLOW_PENDING_MSGS,
            pending_bytes_limit=FOLLOW_PENDING_BYTES,
        )
        return subscription

    async def _read(
        self,
        stream: str,
        subject: str,
        after: int,
        deliver: Callable[[StoredBatch], None],
    ) -> JetStreamContext.PushSubscription:
        """An ordered consumer delivering ``subject``'s messages after ``after``."""

        async def on_message(msg: Msg) -> None:
            meta = msg.metadata
            headers = msg.headers or {}
            # Every publish is conditional on the subject's message before it, and JetStream
            # keeps that header: a reader sees where messages were purged in between.
            expected = headers.get("Nats-Expected-Last-Subject-Sequence", "")
            deliver(
                StoredBatch(
                    meta.sequence.stream,
                    msg.data,
                    monotonic_ns_of(meta.timestamp),
                    headers.get("Nats-Msg-Id"),
                    int(expected) if expected.isdigit() else None,
                )
            )

        config = api.ConsumerConfig(
            deliver_policy=api.DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=after + 1
        )
        subscription: JetStreamContext.PushSubscription = await _answer(
            self._jetstream().subscribe(
                subject,
                stream=stream,
                cb=on_message,
                ordered_consumer=True,
                config=config,
                idle_heartbeat=FOLLOW_HEARTBEAT_S,
            )
        )
        return subscription

    # -- home logs (the "node" layout) -----------------------------------------------------

    def log_subject(self, node: str, run: str) -> str:
        """The home log of the process ``run`` of ``node``."""
        return f"{self.config.prefix}.h.{_token(node)}.{run}"

    async def follow_log(
        self, subject: str, deliver: Callable[[StoredBatch], None]
    ) -> Subscription:
        """Call ``deliver`` with each message appended to the home log ``subject`` from now
        on, as `follow` does for a stream's subject (``prev`` is the log's previous message)."""
        tail = subject[len(self.config.prefix) + 3 :]  # past "<prefix>.h."
        return await self._follow_subject(f"{self.config.prefix}.hr.{tail}", deliver)

    async def serve(self, subject: str, handler: Callable[[bytes], Awaitable[bytes]]) -> None:
        """Answer every request on ``subject`` with what ``handler`` returns (a task each:
        the handler may wait for the broker)."""
        nc = self._client()
        tasks: set[asyncio.Task[None]] = set()

        async def answer(msg: Msg) -> None:
            with contextlib.suppress(*UNREACHABLE):
                await msg.respond(await handler(msg.data))

        async def on_message(msg: Msg) -> None:
            if not msg.reply:
                return
            task = asyncio.create_task(answer(msg))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

        await nc.subscribe(subject, cb=on_message, pending_msgs_limit=FOLLOW_PENDING_MSGS)

    async def ask(self, subject: str, payload: bytes, timeout_s: float) -> bytes | None:
        """A request to whoever serves ``subject``; None when nobody does (no responders).

        Raises:
            HubUnavailable: the broker, or the one serving, did not answer in time.
        """
        try:
            msg = await self._client().request(subject, payload, timeout=timeout_s)
        except nats.errors.NoRespondersError:
            return None
        except UNREACHABLE as exc:
            raise HubUnavailable(f"{subject} did not answer: {exc!r}") from exc
        data: bytes = msg.data
        return data

    # -- control messages between nodes -----------------------------------------------------

    async def listen(self, what: str, handler: Callable[[bytes], Awaitable[None] | None]) -> None:
        """Call ``handler`` with every control message ``what`` from any node."""

        async def on_message(msg: Msg) -> None:
            result = handler(msg.data)
            if result is not None:
                await result

        await self._client().subscribe(f"{self.config.prefix}.ctl.{what}", cb=on_message)

    async def tell(self, what: str, payload: bytes, *, flushed: bool = False) -> None:
        """Send a control message to every node (at most once: nothing waits for it); with
        ``flushed``, return once the broker has it, or after `TELL_FLUSH_S`."""
        nc = self._nc
        if nc is None or nc.is_closed:
            return
        with contextlib.suppress(*UNREACHABLE):
            await nc.publish(f"{self.config.prefix}.ctl.{what}", payload)
            if flushed:
                await nc.flush(timeout=TELL_FLUSH_S)

    # -- plumbing ---------------------------------------------------------------------------

    async def _patiently(self, request: Callable[[], Awaitable[Any]]) -> Any:
        """An idempotent request (a read), tried again while JetStream does not answer, for
        up to ``unavailable_after_s``: a reader waits out a busy or restarting broker as an
        append does, rather than failing after one ``request_timeout_s``."""
        deadline = time.monotonic() + self.config.unavailable_after_s
        delay = 0.05
        while True:
            try:
                return await request()
            except UNREACHABLE as exc:
                if time.monotonic() + delay > deadline:
                    raise HubUnavailable(f"JetStream does not answer: {exc!r}") from exc
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)

    @property
    def max_payload(self) -> int:
        """The largest message the connected server takes (its ``max_payload``)."""
        return self._client().max_payload

    def check_size(self, payload: bytes, headers: dict[str, str] | None = None) -> None:
        """Raise `EventTooLarge` unless the server takes ``payload`` with ``headers`` in one
        message. It counts the headers in (nats-py checks the payload alone, and a message
        the server refuses costs the connection); nats-py's own MaxPayloadError, from deep
        in a publish, would read as a broker that is gone, worth trying again."""
        size = len(payload)
        if headers:  # as nats-py writes them: the status line, "key: value" lines, a blank
            size += 12 + sum(len(k) + len(v) + 4 for k, v in headers.items())
        if size > self.max_payload:
            raise EventTooLarge(
                f"an append of {size} bytes (as stored) is more than the broker takes in "
                f"one message (its max_payload, {self.max_payload} bytes)"
            )

    async def _on_error(self, exc: Exception) -> None:
        # The client reconnects by itself; requests made meanwhile fail and are retried.
        log.debug("NATS: %r", exc)
        if isinstance(exc, nats.errors.SlowConsumerError) and self.on_missed is not None:
            self.on_missed()  # live messages were dropped: followers read them back

    async def _on_reconnected(self) -> None:
        # Live messages published while disconnected never arrive: followers read them back.
        if self.on_missed is not None:
            self.on_missed()

    def _client(self) -> NatsClient:
        if self._nc is None:
            raise HubUnavailable("the JetStream hub is not connected")
        return self._nc

    def _jetstream(self) -> JetStreamContext:
        if self._js is None:
            raise HubUnavailable("the JetStream hub is not connected")
        return self._js

    @staticmethod
    def _kv(bucket: KeyValue | None) -> KeyValue:
        if bucket is None:
            raise HubUnavailable("the JetStream hub is not connected")
        return bucket


def _token(name: str) -> str:
    """``name`` as one subject token (node ids may hold ``.``)."""
    return base64.urlsafe_b64encode(name.encode()).rstrip(b"=").decode()


def _time_out(answer: asyncio.Future[Msg]) -> None:
    if not answer.done():
        answer.set_exception(nats.errors.TimeoutError())


async def _answer(call: Coroutine[Any, Any, Any]) -> Any:
    """Await one JetStream request; no answer becomes `HubUnavailable` at once."""
    try:
        return await call
    except UNREACHABLE as exc:
        raise HubUnavailable(f"JetStream does not answer: {exc!r}") from exc
