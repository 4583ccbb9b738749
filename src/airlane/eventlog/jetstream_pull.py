"""One pull from a JetStream pull consumer, on an inbox of its own.

nats-py's `PullSubscription.fetch` sends every pull request of a member with the same reply
subject. The broker answers a request until it expires, so an answer that comes just too late
(a stalled event loop, a paused process, a slow link) lands in the member's queue and the
*next* fetch hands it out. Its ack wait started when the broker sent it, so by then another
member may have been given the record again and acked it: the late copy would deliver an
acknowledged record a second time.

Here each request of a fetch subscribes to a fresh inbox and unsubscribes when it is over. An
answer that comes later reaches no one; the broker redelivers that record after its ack wait
like any unacknowledged one. The pull itself is done in two requests, as JetStream clients do:

1. ``no_wait`` for up to ``batch`` records: the broker sends what it has, then a
   ``404 No Messages`` or ``408 Request Timeout`` status that ends the request;
2. when that found nothing, a lingering request for a single record that expires with the
   fetch (or sooner, and then another: see below). A lingering request for more than one
   would stay open on the broker after the first record came and capture records for an
   inbox nobody reads any more; asking for one, the request is spent by the record that
   answers it. The caller's next fetch takes the rest with a ``no_wait`` request.

A stall can also fall *within* a fetch: the broker answered, and the process stopped before
it read the answer. Given the consumer's ack wait, a request hands out nothing read later than
that after it was sent (the record may have gone to another member by then; the broker
redelivers it, here or there, after the ack wait). So a lingering request lasts at most half
the ack wait, and a fetch that waits longer makes one after another, each on its own inbox.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import time

import nats.errors
import nats.js.errors
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import api

__all__ = ["EndOfPull", "pull"]

# Status codes the broker puts in the header of a pull request's answers.
_HEARTBEAT = "100"  # idle heartbeat or flow control: not an answer
_NO_MESSAGES = "404"
_REQUEST_TIMEOUT = "408"
_CONFLICT = "409"  # consumer deleted, leadership change, too many waiting requests
_NO_RESPONDERS = "503"  # no broker serves the subject (stream gone, broker restarting)

_EXPIRES_MARGIN_NS = 1_000_000
"""The lingering request expires this much before the fetch stops listening, so that the
broker's 408 (not a record) is what arrives at the edge when nothing came."""


class EndOfPull(Exception):
    """A status that ends a pull and may mean the consumer or its stream is gone (409, 503):
    the caller checks which before it returns nothing."""

    def __init__(self, status: str, description: str) -> None:
        super().__init__(f"{status} {description}".strip())
        self.status = status


async def pull(
    nc: NATS,
    subject: str,
    batch: int,
    timeout_s: float,
    *,
    buffer_msgs: int,
    buffer_bytes: int,
    ack_wait_s: float | None = None,
) -> list[Msg]:
    """Up to ``batch`` messages from the pull consumer whose next-message API is ``subject``,
    waiting at most ``timeout_s`` for the first. [] when none came.

    Raises `EndOfPull` for a 409 or 503 answer, `nats.js.errors.APIError` for any other
    error status, and nats-py's connection errors when the connection is closed.
    """
    fresh_s = ack_wait_s if ack_wait_s else math.inf
    deadline = time.monotonic() + timeout_s
    ask = functools.partial(
        _ask, nc, subject, fresh_s=fresh_s, buffer_msgs=buffer_msgs, buffer_bytes=buffer_bytes
    )
    msgs = await ask({"batch": batch, "no_wait": True}, batch, deadline)
    while not msgs:
        now = time.monotonic()
        until = min(deadline, now + fresh_s / 2)
        expires_ns = int((until - now) * 1e9) - _EXPIRES_MARGIN_NS
        if expires_ns <= 0:
            break
        msgs = await ask({"batch": 1, "expires": expires_ns}, 1, until)
        if until >= deadline:
            break
    return msgs


async def _ask(
    nc: NATS,
    subject: str,
    request: dict[str, object],
    batch: int,
    until: float,
    *,
    fresh_s: float,
    buffer_msgs: int,
    buffer_bytes: int,
) -> list[Msg]:
    """One pull request on an inbox of its own: the records that answer it by ``until``,
    unless the process read them so late that their ack wait may have run out."""
    inbox = nc.new_inbox()
    sub = await nc.subscribe(
        inbox, pending_msgs_limit=buffer_msgs, pending_bytes_limit=buffer_bytes
    )
    try:
        sent = time.monotonic()
        await nc.publish(subject, json.dumps(request).encode(), inbox)
        return _fresh(await _answers(sub, batch, until), sent + fresh_s)
    finally:
        # Whatever the broker still sends to this inbox reaches no one (see the module doc).
        with contextlib.suppress(nats.errors.Error):
            await sub.unsubscribe()


def _fresh(msgs: list[Msg], stale_at: float) -> list[Msg]:
    """``msgs``, unless their ack wait may have run out while this process did not run (each
    was sent after the request was, so the request's time bounds theirs)."""
    return msgs if time.monotonic() < stale_at else []


async def _answers(sub: Subscription, batch: int, deadline: float) -> list[Msg]:
    """The records answering one request, until ``batch`` came, a status ended it, or the
    deadline passed."""
    msgs: list[Msg] = []
    while len(msgs) < batch:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        try:
            msg = await sub.next_msg(timeout=remaining)
        except TimeoutError:
            break
        headers = msg.headers
        status = headers.get(api.Header.STATUS) if headers else None
        if not status:
            msgs.append(msg)
        elif status == _HEARTBEAT:
            continue
        elif status in (_NO_MESSAGES, _REQUEST_TIMEOUT):
            break
        elif status in (_CONFLICT, _NO_RESPONDERS):
            if msgs:
                break  # the records that came are good; the next fetch meets the status again
            description = headers.get(api.Header.DESCRIPTION, "") if headers else ""
            raise EndOfPull(status, description)
        else:
            raise nats.js.errors.APIError.from_msg(msg)
    return msgs
