"""`Quotas`: how much each principal and each tenant may ask of this node.

Four limits, all off unless configured (``[quotas]``):

- **requests**: a token bucket per principal and one per tenant (a rate per second and a
  burst), spent by every authenticated request (an HTTP request, a WebSocket or AIRC
  connection, a gRPC call);
- **concurrent streams**: generations a principal, and a tenant, may have running at once;
- **generated tokens**: completion tokens per minute per principal and per tenant, from the
  usage ledger. A generation is charged what it produced when it ends (a running one is never
  cut short); a new one starts only while neither budget is spent.
- **bytes delivered**: a token bucket of bytes per principal and one per tenant, spent by what
  readers are handed (a stream's events as retention counts them, the same on every wire; event
  log records' payloads; artifact bytes served). A reader in debt is slowed, not cut: its next
  events wait until the buckets have refilled (`airlane.gateway.metered`); a new
  subscription, generation, log read or artifact download is refused until then.

A request over a limit is refused with ``quota_exceeded`` (HTTP 429 with ``Retry-After``,
WebSocket close 4429, gRPC ``RESOURCE_EXHAUSTED``, an AIRC ``ERROR``), saying which limit and
when to try again; the connection is never dropped. Counts are per node: behind a load
balancer over N nodes a client gets up to N times the rate. The buckets are bounded
(`MAX_BUCKETS`, least recently used dropped first, which only forgets a spender's debt).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from airlane.core.errors import AirlaneError, ErrorCode
from airlane.gateway.buckets import TokenBuckets
from airlane.security import Principal

__all__ = ["MAX_BUCKETS", "QuotaConfig", "QuotaExceeded", "Quotas"]

MAX_BUCKETS = 100_000
"""Token buckets kept per kind (principals, tenants)."""


class QuotaExceeded(AirlaneError):
    """A principal or tenant asked for more than its quota; ``retry_after_s`` says when it can
    ask again."""

    code = ErrorCode.QUOTA_EXCEEDED


@dataclass(frozen=True, slots=True)
class QuotaConfig:
    """``[quotas]``: 0 turns a limit off."""

    requests_per_s: float = 0.0
    """Authenticated requests per second per principal."""
    requests_burst: int = 0
    """Requests a principal may make at once above its rate (0: one second's worth)."""
    tenant_requests_per_s: float = 0.0
    """Authenticated requests per second per tenant, all its principals together."""
    tenant_requests_burst: int = 0
    """As ``requests_burst``, per tenant."""
    concurrent_streams: int = 0
    """Generations a tenant may have running at once."""
    principal_concurrent_streams: int = 0
    """Generations one principal may have running at once."""
    tenant_tokens_per_min: float = 0.0
    """Completion tokens a tenant's generations may produce per minute."""
    tenant_tokens_burst: int = 0
    """Tokens a tenant may spend at once above its rate (0: one minute's worth)."""
    tokens_per_min: float = 0.0
    """Completion tokens one principal's generations may produce per minute."""
    tokens_burst: int = 0
    """As ``tenant_tokens_burst``, per principal."""
    bytes_per_s: float = 0.0
    """Bytes delivered per second to each principal's readers, all of them together."""
    bytes_burst: int = 0
    """Bytes a principal may be delivered at once above its rate (0: one second's worth)."""
    tenant_bytes_per_s: float = 0.0
    """Bytes delivered per second to a tenant's readers, all its principals together."""
    tenant_bytes_burst: int = 0
    """As ``bytes_burst``, per tenant."""

    def __post_init__(self) -> None:
        for name in ("requests_per_s", "requests_burst", "tenant_requests_per_s",
                     "tenant_requests_burst", "concurrent_streams", "tenant_tokens_per_min",
                     "tenant_tokens_burst", "bytes_per_s", "bytes_burst", "tenant_bytes_per_s",
                     "tenant_bytes_burst", "principal_concurrent_streams", "tokens_per_min",
                     "tokens_burst"):  # fmt: skip
            if getattr(self, name) < 0:
                raise ValueError(f"[quotas] {name} must be 0 (off) or more")


def _nothing() -> None:
    """What ends a generation that no limit counts."""


def _who(principal: Principal) -> str:
    """A principal's key in the buckets (names are per tenant)."""
    return f"{principal.tenant}/{principal.name}"


def _per_minute(rate: float, burst: int, clock: Callable[[], float]) -> TokenBuckets:
    """Buckets of ``rate`` tokens a minute (``burst``: 0 is one minute's worth)."""
    return TokenBuckets(rate / 60.0, burst or math.ceil(rate), clock, MAX_BUCKETS)


class Quotas:
    """This node's quotas (see the module docstring); ``clock`` is for tests."""

    def __init__(
        self, config: QuotaConfig | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.config = c = config or QuotaConfig()
        self._principals = TokenBuckets(c.requests_per_s, c.requests_burst, clock, MAX_BUCKETS)
        self._tenants = TokenBuckets(
            c.tenant_requests_per_s, c.tenant_requests_burst, clock, MAX_BUCKETS
        )
        self._tenant_streams: dict[str, int] = {}
        self._principal_streams: dict[str, int] = {}
        self._tenant_tokens = _per_minute(c.tenant_tokens_per_min, c.tenant_tokens_burst, clock)
        self._principal_tokens = _per_minute(c.tokens_per_min, c.tokens_burst, clock)
        self._principal_bytes = TokenBuckets(c.bytes_per_s, c.bytes_burst, clock, MAX_BUCKETS)
        self._tenant_bytes = TokenBuckets(
            c.tenant_bytes_per_s, c.tenant_bytes_burst, clock, MAX_BUCKETS
        )
        self.refused = 0
        """Requests refused so far."""

    def admit(self, principal: Principal) -> None:
        """Count a request of ``principal``; `QuotaExceeded` if it is over a rate."""
        c = self.config
        if c.requests_per_s:
            wait = self._principals.take(_who(principal))
            if wait:
                self._refuse(f"{principal.name} is over {c.requests_per_s:g} requests/s", wait)
        if c.tenant_requests_per_s:
            wait = self._tenants.take(principal.tenant)
            if wait:
                rate = c.tenant_requests_per_s
                self._refuse(f"tenant {principal.tenant} is over {rate:g} requests/s", wait)

    def start_stream(self, principal: Principal) -> Callable[[], None]:
        """Count a generation of ``principal`` (and its tenant); the call-back that ends it.
        `QuotaExceeded` if either has as many running as it may, has generated its tokens
        for now, or is repaying bytes delivered."""
        self.check_bytes(principal)  # a generation is started to be read
        c, who, tenant = self.config, _who(principal), principal.tenant
        if c.tokens_per_min:
            self._check_tokens(
                self._principal_tokens, who, f"{principal.name} has generated its "
                f"{c.tokens_per_min:g} tokens/min",
            )  # fmt: skip
        if c.tenant_tokens_per_min:
            self._check_tokens(
                self._tenant_tokens, tenant, f"tenant {tenant} has generated its "
                f"{c.tenant_tokens_per_min:g} tokens/min",
            )  # fmt: skip
        counts: list[tuple[dict[str, int], str]] = []
        for running, key, limit, name in (
            (self._principal_streams, who, c.principal_concurrent_streams, principal.name),
            (self._tenant_streams, tenant, c.concurrent_streams, f"tenant {tenant}"),
        ):
            if limit:  # no count kept where there is no limit to keep it for
                now = running.get(key, 0)
                if now >= limit:
                    self._refuse(f"{name} has {now} generations running, its limit", 1.0)
                counts.append((running, key))
        if not counts:
            return _nothing
        for running, key in counts:
            running[key] = running.get(key, 0) + 1
        done = False

        def release() -> None:
            nonlocal done
            if done:
                return
            done = True
            for running, key in counts:
                left = running[key] - 1
                if left:
                    running[key] = left
                else:
                    del running[key]

        return release

    @property
    def counts_tokens(self) -> bool:
        """Whether generated tokens are limited (and so must be charged)."""
        return self.config.tenant_tokens_per_min > 0 or self.config.tokens_per_min > 0

    def charge_tokens(self, principal: Principal, tokens: int) -> None:
        """Charge a finished generation's completion tokens to ``principal`` and its tenant."""
        if tokens > 0:
            if self.config.tokens_per_min:
                self._principal_tokens.spend(_who(principal), tokens)
            if self.config.tenant_tokens_per_min:
                self._tenant_tokens.spend(principal.tenant, tokens)

    def _check_tokens(self, buckets: TokenBuckets, key: str, why: str) -> None:
        balance = buckets.balance(key)
        if balance < 1.0:
            self._refuse(why, buckets.wait(balance))

    @property
    def counts_bytes(self) -> bool:
        """Whether bytes delivered are limited (and so must be charged)."""
        return self.config.bytes_per_s > 0 or self.config.tenant_bytes_per_s > 0

    def bytes_wait(self, principal: Principal) -> float:
        """Seconds until ``principal`` and its tenant may be delivered bytes again (0.0: now).
        Delivery goes on while a bucket holds anything, so a batch may take it into debt."""
        wait = 0.0
        if self.config.bytes_per_s:
            balance = self._principal_bytes.balance(_who(principal))
            if balance <= 0:
                wait = self._principal_bytes.wait(balance)
        if self.config.tenant_bytes_per_s:
            balance = self._tenant_bytes.balance(principal.tenant)
            if balance <= 0:
                wait = max(wait, self._tenant_bytes.wait(balance))
        return wait

    def check_bytes(self, principal: Principal) -> None:
        """`QuotaExceeded` while ``principal`` or its tenant repays bytes delivered."""
        if self.counts_bytes and (wait := self.bytes_wait(principal)):
            self._refuse(
                f"{principal.name} (or tenant {principal.tenant}) was delivered the bytes its "
                "quota allows for now",
                wait,
            )

    def charge_bytes(self, principal: Principal, delivered: int) -> None:
        """Charge ``delivered`` bytes to ``principal`` and its tenant."""
        if delivered > 0:
            if self.config.bytes_per_s:
                self._principal_bytes.spend(_who(principal), delivered)
            if self.config.tenant_bytes_per_s:
                self._tenant_bytes.spend(principal.tenant, delivered)

    def _refuse(self, why: str, wait_s: float) -> None:
        self.refused += 1
        raise QuotaExceeded(f"quota exceeded: {why}; retry in {wait_s:.1f} s", retry_after_s=wait_s)
