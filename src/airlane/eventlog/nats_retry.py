"""Bounded retries around NATS requests, and the translation of nats-py's exceptions.

A request is retried when the failure says "the broker may answer soon": a timeout, no
responders (JetStream restarting, or a stream leader election), a 503, a connection that is
reconnecting. It is not retried when the connection is closed for good. After the last
attempt the caller gets `EventLogUnavailable`. Other broker errors become `BrokerError`
unless the operation translated them more precisely first (`LogNotFound`, ...).

Retrying an append is safe because every append carries a ``Nats-Msg-Id``
(`airlane.eventlog.nats_codec.message_headers`): a retry of an append whose reply was lost
is deduplicated by JetStream and answered with the original sequence.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

import nats.errors
import nats.js.errors
from nats.aio.client import Client as NATS

from airlane.eventlog.errors import BrokerError, EventLogUnavailable, EventTooLarge

__all__ = ["RETRIABLE", "RetryPolicy", "wait_connected", "with_retries"]

T = TypeVar("T")

RETRIABLE: tuple[type[BaseException], ...] = (
    TimeoutError,  # nats.errors.TimeoutError and FetchTimeoutError are subclasses
    nats.errors.NoRespondersError,
    nats.errors.StaleConnectionError,
    nats.errors.OutboundBufferLimitError,
    nats.errors.ConnectionReconnectingError,
    nats.js.errors.NoStreamResponseError,
    nats.js.errors.ServiceUnavailableError,
)
"""Failures after which the same request may well succeed."""

_CLOSED = (nats.errors.ConnectionClosedError, nats.errors.ConnectionDrainingError)

# JetStream's "message size exceeds maximum allowed" (the stream's max_msg_size).
_ERR_MESSAGE_TOO_LARGE = 10054


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how patiently a request is retried.

    Worst case before `EventLogUnavailable`: ``attempts`` times the request timeout, plus
    the backoffs (about 1.5 s with the defaults: 0.1, 0.2, 0.4, 0.8 s, each with up to 50 %
    jitter off, so that many clients do not retry in lockstep).
    """

    attempts: int = 5
    """Tries in all, the first included."""
    first_backoff_s: float = 0.1
    """Pause after the first failure; doubled after each further one."""
    max_backoff_s: float = 1.0
    """Longest pause between two tries."""

    def backoff(self, failures: int) -> float:
        """The pause after ``failures`` failed tries (1, 2, ...)."""
        ceiling = min(self.first_backoff_s * 2.0 ** (failures - 1), self.max_backoff_s)
        return ceiling * random.uniform(0.5, 1.0)  # jitter, not security


_CONNECTED_POLL_S = 0.02


async def wait_connected(nc: NATS, timeout_s: float) -> None:
    """Return once ``nc`` is connected; raise a retriable error after ``timeout_s``, or
    ConnectionClosedError if it is closed for good.

    Requests are not sent while the client reconnects: nats-py would buffer them and send
    them after the reconnect, so an append reported as failed could still be stored later.
    (nats-py has no public "connected" event short of the caller's own callbacks: poll.)
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not nc.is_connected:
        if nc.is_closed:
            raise nats.errors.ConnectionClosedError
        if loop.time() >= deadline:
            raise nats.errors.ConnectionReconnectingError
        await asyncio.sleep(_CONNECTED_POLL_S)


async def with_retries(
    policy: RetryPolicy,
    what: str,
    request: Callable[[], Awaitable[T]],
    *,
    nc: NATS | None = None,
    connect_timeout_s: float = 0.0,
) -> T:
    """Await ``request()`` until it succeeds, retrying per ``policy``; translate failures.

    With ``nc``, each attempt first waits up to ``connect_timeout_s`` for it to be connected
    (`wait_connected`)."""
    last: BaseException | None = None
    for attempt in range(1, policy.attempts + 1):
        try:
            if nc is not None:
                await wait_connected(nc, connect_timeout_s)
            return await request()
        except _CLOSED as exc:
            raise EventLogUnavailable(f"{what}: the NATS connection is closed") from exc
        except RETRIABLE as exc:
            last = exc
        except nats.errors.MaxPayloadError as exc:
            raise EventTooLarge(f"{what}: over the server's max_payload") from exc
        except nats.js.errors.APIError as exc:
            if exc.err_code == _ERR_MESSAGE_TOO_LARGE:
                raise EventTooLarge(f"{what}: {exc.description}") from exc
            raise BrokerError(f"{what}: {exc.description} (JetStream {exc.err_code})") from exc
        except nats.errors.Error as exc:
            raise BrokerError(f"{what}: {exc}") from exc
        if attempt < policy.attempts:
            await asyncio.sleep(policy.backoff(attempt))
    raise EventLogUnavailable(
        f"{what}: no answer from NATS after {policy.attempts} attempts ({last!r})"
    ) from last
