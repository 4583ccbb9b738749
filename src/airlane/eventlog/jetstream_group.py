"""Consumer groups on JetStream: one durable pull consumer per (log, group).

Every member pulls from the same durable consumer; JetStream hands each
message to one pull request at a time and redelivers it when ``ack_wait`` passes without an
ack, up to ``max_deliver`` times. The group's position lives in the broker, so a member that
comes back (in this process or another) continues where the group stands.

Settling: ``ack`` waits for the broker's confirmation (JetStream's double ack), so an acked
record is not handed out again while the broker runs. nats-server flushes a consumer's ack
state to disk asynchronously (within about 100 ms on 2.9), so a broker *crash* right after an
ack can redeliver that record once: delivery is at least once. ``nak`` and ``in_progress``
are not confirmed; losing one only moves a redelivery earlier or later.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar, cast

import nats.errors
import nats.js.errors
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.js import api
from nats.js.client import JetStreamContext

from airlane.eventlog.base import ConsumerGroup, Delivery, GroupInfo
from airlane.eventlog.errors import EventLogUnavailable, GroupNotFound, LogNotFound
from airlane.eventlog.jetstream_pull import EndOfPull, pull
from airlane.eventlog.nats_codec import decode_record, parse_ack_reply
from airlane.eventlog.nats_retry import RetryPolicy, with_retries

__all__ = ["GroupRef", "JetStreamConsumerGroup", "group_info", "lookup_group"]

T = TypeVar("T")

# JetStream API error codes (nats-server errors.json).
ERR_STREAM_NOT_FOUND = 10059
ERR_CONSUMER_NOT_FOUND = 10014

MIN_FETCH_WAIT_S = 0.05
"""A fetch waits at least this long: the no-wait pull and its reply need a round trip."""


@dataclass(frozen=True, slots=True)
class GroupRef:
    """Where a group lives on the broker, and how to talk to it."""

    nc: NATS
    js: JetStreamContext
    log: str
    group: str
    stream: str
    consumer: str
    retry: RetryPolicy
    request_timeout_s: float
    buffer_msgs: int
    """The most records one fetch's inbox holds before nats-py drops (they are redelivered)."""
    buffer_bytes: int

    async def retrying(self, what: str, request: Callable[[], Awaitable[T]]) -> T:
        """``request()`` with this log's retry policy, once connected."""
        return await with_retries(
            self.retry, what, request, nc=self.nc, connect_timeout_s=self.request_timeout_s
        )


async def lookup_group(ref: GroupRef) -> api.ConsumerInfo:
    """The group's consumer info; `LogNotFound` or `GroupNotFound` if either is gone."""
    try:
        return cast(api.ConsumerInfo, await ref.js.consumer_info(ref.stream, ref.consumer))
    except nats.js.errors.NotFoundError as exc:
        if exc.err_code == ERR_STREAM_NOT_FOUND:
            raise LogNotFound(f"no log {ref.log!r}") from exc
        raise GroupNotFound(f"no group {ref.group!r} on log {ref.log!r}") from exc


def group_info(ref: GroupRef, info: api.ConsumerInfo) -> GroupInfo:
    """The contract's view of a consumer's info."""
    delivered = info.delivered.stream_seq if info.delivered is not None else 0
    max_deliver = info.config.max_deliver
    return GroupInfo(
        log=ref.log,
        group=ref.group,
        next_seq=delivered + 1,
        pending_acks=info.num_ack_pending or 0,
        redelivered=info.num_redelivered or 0,
        unprocessed=info.num_pending or 0,
        ack_wait_s=info.config.ack_wait or 0.0,
        max_deliver=max_deliver if max_deliver is not None and max_deliver > 0 else None,
    )


class JetStreamConsumerGroup(ConsumerGroup):
    """A member of the group: each fetch is one pull on the group's durable consumer, on an
    inbox of its own (`airlane.eventlog.jetstream_pull`), so the member holds nothing on the
    broker between fetches."""

    def __init__(self, ref: GroupRef, ack_wait_s: float) -> None:
        super().__init__(ref.log, ref.group)
        self._ref = ref
        self._ack_wait_s = ack_wait_s
        """The group's, fixed when it was created: a pull hands out nothing it read later
        than this after asking."""
        self._next = f"{ref.js._prefix}.CONSUMER.MSG.NEXT.{ref.stream}.{ref.consumer}"

    async def _fetch(self, max_events: int, timeout_s: float) -> list[Delivery]:
        ref = self._ref
        try:
            msgs = await pull(
                ref.nc,
                self._next,
                max_events,
                max(timeout_s, MIN_FETCH_WAIT_S),
                buffer_msgs=ref.buffer_msgs,
                buffer_bytes=ref.buffer_bytes,
                ack_wait_s=self._ack_wait_s,
            )
        except (nats.errors.ConnectionClosedError, nats.errors.ConnectionDrainingError) as exc:
            raise EventLogUnavailable("fetch: the NATS connection is closed") from exc
        except EndOfPull:
            # 409 "Consumer Deleted", 503 no responders: say which is gone, else nothing came.
            msgs = []
        except nats.js.errors.APIError:
            # Another error status: say which is gone, else report the broker's.
            await ref.retrying("fetch", lambda: lookup_group(ref))
            raise
        if not msgs:
            # Nothing came: an idle log, or a group, log or broker that is gone. Telling
            # these apart costs one info request, paid only when a fetch comes back empty.
            await ref.retrying("fetch", lambda: lookup_group(ref))
        return [_JetStreamDelivery(msg, ref) for msg in msgs]

    async def info(self) -> GroupInfo:
        """The group's state (`GroupNotFound` once deleted)."""
        info = await self._ref.retrying("group info", lambda: lookup_group(self._ref))
        return group_info(self._ref, info)


class _JetStreamDelivery(Delivery):
    __slots__ = ("_msg", "_ref")

    def __init__(self, msg: Msg, ref: GroupRef) -> None:
        seq, deliveries, time_ns = parse_ack_reply(msg.reply)
        super().__init__(decode_record(ref.log, seq, time_ns, msg.headers, msg.data), deliveries)
        self._msg = msg
        self._ref = ref

    async def _ack(self) -> None:
        async def confirmed_ack() -> None:
            try:
                await self._msg.ack_sync(timeout=self._ref.request_timeout_s)
            except nats.errors.NoRespondersError:
                await lookup_group(self._ref)  # GroupNotFound / LogNotFound if it is gone
                raise  # else the broker is restarting: retry

        await self._ref.retrying("ack", confirmed_ack)

    async def _nak(self, delay: float | None) -> None:
        await self._ref.retrying("nak", lambda: self._msg.nak(delay=delay))

    async def _in_progress(self) -> None:
        await self._ref.retrying("in_progress", self._msg.in_progress)

    @property
    def token(self) -> str:
        # The ack subject itself: any connection to the broker can settle the delivery.
        reply: str = self._msg.reply
        return reply
