"""The audit log: one JSON line for every refusal of the security gate and every admin action.

A record says who (the principal's name and tenant, or what it claimed to be), what (the
action and the resource), the decision and its code, why (the refusal's message, or the policy
that decided), when (UTC, ISO 8601 with microseconds) and from where (the client's address).
It never holds a secret (no key, token or ticket) nor any content (no prompt, no payload).

Records go to a file rotated by size (`AuditConfig`), through a logger of their own that does
not propagate, so they never mix with the operational log; without a file they are only
counted. The counts per decision and code are Prometheus metrics
(``airlane_security_decisions_total``) on ``/metrics``.
"""

from __future__ import annotations

import datetime
import json
import logging
import logging.handlers
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from airlane.core.errors import AirlaneError, ErrorCode
from airlane.security import ANONYMOUS, Action, Principal, SecurityError, SecurityPolicy
from airlane.security.tls import PeerIdentity

__all__ = ["AuditConfig", "AuditLog", "AuditedPolicy", "audit_admin", "audit_not_found"]

_SECRETS = ("key", "token", "ticket", "secret", "password", "authorization")

_NOT_FOUND = frozenset(
    code for code in ErrorCode if code.value == "not_found" or code.value.endswith("_not_found")
)
"""What a lookup in the asker's tenant answers when the name is not there (another tenant's
names included: they are not found rather than forbidden)."""


@dataclass(frozen=True, slots=True)
class AuditConfig:
    """Where the audit records go (``[audit]``)."""

    path: str | None = None
    """The JSON-lines file (unset: records are counted, not written)."""
    max_bytes: int = 10 * 1024 * 1024
    """A file this big is rotated (``audit.log.1`` ...)."""
    backups: int = 5
    """Rotated files kept."""


class AuditLog(Collector):
    """Writes and counts audit records (see the module docstring)."""

    def __init__(self, config: AuditConfig | None = None) -> None:
        self.config = config or AuditConfig()
        self.counts: Counter[tuple[str, str]] = Counter()
        """Records so far, by (decision, code)."""
        self._logger: logging.Logger | None = None
        if self.config.path is not None:
            if self.config.max_bytes < 1024 or self.config.backups < 1:
                raise ValueError("[audit] max_bytes must be at least 1024 and backups at least 1")
            path = Path(self.config.path)
            handler = logging.handlers.RotatingFileHandler(
                path, maxBytes=self.config.max_bytes, backupCount=self.config.backups
            )  # opens the file now: an unwritable path stops the start with its reason
            handler.setFormatter(logging.Formatter("%(message)s"))
            logger = logging.getLogger(f"airlane.audit.{id(self)}")
            logger.propagate = False
            logger.setLevel(logging.INFO)
            logger.handlers = [handler]
            self._logger = logger

    def record(
        self,
        decision: str,
        code: str,
        *,
        principal: str | None = None,
        tenant: str | None = None,
        action: str | None = None,
        resource: str | None = None,
        reason: str | None = None,
        rule: str | None = None,
        origin: str | None = None,
    ) -> None:
        """One record: ``decision`` is ``deny`` or ``admin``; ``code`` the error code (or the
        admin action's name)."""
        self.counts[(decision, code)] += 1
        if self._logger is None:
            return
        entry = {
            "time": datetime.datetime.now(datetime.UTC).isoformat(timespec="microseconds"),
            "decision": decision,
            "code": code,
            "principal": principal,
            "tenant": tenant,
            "action": action,
            "resource": resource,
            "rule": rule,
            "reason": _scrub(reason),
            "from": origin,
        }
        self._logger.info(json.dumps({k: v for k, v in entry.items() if v is not None}))

    def collect(self) -> Iterator[Metric]:
        """``airlane_security_decisions_total{decision, code}``."""
        family = CounterMetricFamily(
            "airlane_security_decisions",
            "Refusals of the security gate and admin actions, by decision and code.",
            labels=["decision", "code"],
        )
        for (decision, code), count in sorted(self.counts.items()):
            family.add_metric([decision, code], count)
        yield family

    def close(self) -> None:
        """Close the file."""
        if self._logger is not None:
            for handler in self._logger.handlers:
                handler.close()
            self._logger.handlers = []


def _scrub(reason: str | None) -> str | None:
    """A refusal's message, bounded; messages never carry credentials, but one that mentions
    a secret-looking word keeps only its first words, to be safe."""
    if reason is None:
        return None
    reason = reason[:300]
    lowered = reason.lower()
    if any(f"{word}=" in lowered or f"{word}:" in lowered for word in _SECRETS):
        return reason.split(":", 1)[0]
    return reason


class AuditedPolicy:
    """A security policy whose refusals are audited: wraps ``policy`` (kept as `policy`)."""

    def __init__(self, policy: SecurityPolicy, audit: AuditLog) -> None:
        self.policy = policy
        self.audit = audit

    def authenticate(self, bearer: str | None, peer: PeerIdentity | None = None) -> Principal:
        """The wrapped policy's answer (refusals are audited by the gateway, which knows
        where the request came from)."""
        if peer is None:
            return self.policy.authenticate(bearer)
        return self.policy.authenticate(bearer, peer)

    def authorize(self, principal: Principal, action: Action, stream_id: str) -> None:
        """The wrapped policy's decision; a refusal is audited."""
        try:
            self.policy.authorize(principal, action, stream_id)
        except SecurityError as exc:
            self._deny(principal, action, stream_id, exc, _rule_of(exc, self.policy))
            raise

    def not_found(
        self, principal: Principal, action: Action, resource: str, refusal: AirlaneError
    ) -> None:
        """Audit a name ``principal`` looked for in its tenant and did not find: a probe for
        another tenant's resource looks like this (its answer is the same 404, so that no
        answer tells whether another tenant has the name). Requests without credentials
        (`ANONYMOUS`, a gateway without keys) are not recorded: no tenant to probe."""
        if principal is not ANONYMOUS:
            self._deny(principal, action, resource, refusal, "tenant-scope")

    def _deny(
        self,
        principal: Principal,
        action: Action,
        resource: str,
        refusal: AirlaneError,
        rule: str,
    ) -> None:
        self.audit.record(
            "deny",
            refusal.code.value,
            principal=principal.name,
            tenant=principal.tenant,
            action=action.value,
            resource=resource,
            reason=str(refusal),
            rule=rule,
            origin=principal.origin,
        )

    def admin(self, principal: Principal, action: str, resource: str) -> None:
        """Audit an admin action ``principal`` was allowed to take."""
        self.audit.record(
            "admin",
            action,
            principal=principal.name,
            tenant=principal.tenant,
            action=action,
            resource=resource,
            rule=type(self.policy).__name__,
            origin=principal.origin,
        )


def _rule_of(refusal: SecurityError, policy: SecurityPolicy) -> str:
    """What decided a refusal: the policy file's rule, ``default-deny`` when none of its rules
    allowed it, else the kind of policy (``ApiKeyPolicy``)."""
    rule: str | None = getattr(refusal, "rule", "")
    if rule is None:
        return "default-deny"
    return rule or type(policy).__name__


def audit_admin(security: SecurityPolicy, principal: Principal, action: str, resource: str) -> None:
    """Audit an admin action through ``security`` when it is an `AuditedPolicy`."""
    if isinstance(security, AuditedPolicy):
        security.admin(principal, action, resource)


def audit_not_found(
    security: SecurityPolicy,
    principal: Principal,
    action: Action,
    resource: str,
    refusal: BaseException,
) -> None:
    """Audit ``refusal`` through ``security`` when it says a name was not found (and
    ``security`` is an `AuditedPolicy`)."""
    if (
        isinstance(security, AuditedPolicy)
        and isinstance(refusal, AirlaneError)
        and refusal.code in _NOT_FOUND
    ):
        security.not_found(principal, action, resource, refusal)
