"""Role-based access control from a policy file, re-read while the server runs.

`RbacPolicy` wraps the policy that authenticates (API keys, JWTs, client certificates): who a
request is stays that policy's answer, except that a client certificate's principal takes the
tenant and roles the file's ``[[identities]]`` give its SPIFFE ID. What a principal may do is
the file's rules' answer alone (`airlane.security.policy`): deny by default.

The file is checked for changes every ``reload_s`` by the server (`RbacPolicy.reload`); a new
version that does not load is reported and the previous one stays in force, so a typo never
opens (or closes) the gateway.
"""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from airlane.security import (
    Action,
    PermissionDenied,
    Principal,
    SecurityPolicy,
)
from airlane.security.policy import Decision, Policy, PolicyError, load_policy

if TYPE_CHECKING:
    from airlane.security.tls import PeerIdentity

__all__ = ["PolicyDenied", "RbacPolicy"]

log = logging.getLogger(__name__)


class PolicyDenied(PermissionDenied):
    """A request the policy file does not allow; ``rule`` names the rule that denied it (None:
    no rule allowed it)."""

    def __init__(self, message: str, rule: str | None) -> None:
        super().__init__(message)
        self.rule = rule


class RbacPolicy:
    """Authentication by ``inner``; authorization by the policy file at ``path``."""

    def __init__(self, inner: SecurityPolicy, path: Path) -> None:
        self.inner = inner
        self.path = path
        self._stamp = _stamp(path)
        self.policy: Policy = load_policy(path)  # PolicyError: the server does not start
        self.reloads = 0
        """How many times a changed file was loaded."""
        self.failed_reloads = 0
        """How many changed versions did not load (the previous policy stayed)."""

    def authenticate(self, bearer: str | None, peer: PeerIdentity | None = None) -> Principal:
        """``inner``'s principal; a certificate's with the tenant and roles the policy's
        identities give it."""
        inner = self.inner
        principal = inner.authenticate(bearer) if peer is None else inner.authenticate(bearer, peer)
        if principal.via != "spiffe":
            return principal
        identity = self.policy.identity_of(principal.name)
        if identity is None:
            return principal
        return replace(
            principal,
            tenant=identity.tenant or principal.tenant,
            roles=principal.roles | identity.roles,
        )

    def decide(self, principal: Principal, action: Action, resource: str) -> Decision:
        """The policy's decision, with every rule's reason."""
        return self.policy.decide(principal, action.value, resource)

    def authorize(self, principal: Principal, action: Action, stream_id: str) -> None:
        """Return when a rule allows it; `PolicyDenied` (403) otherwise."""
        decision = self.policy.decide(principal, action.value, stream_id)
        if not decision.allowed:
            raise PolicyDenied(f"{action.value} on {stream_id!r}: {decision.reason}", decision.rule)

    def reload(self) -> bool:
        """Load the file again if it changed since the last look; whether a new policy is now
        in force. One that fails to load is logged and the previous one stays."""
        stamp = _stamp(self.path)
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        try:
            policy = load_policy(self.path)
        except PolicyError as exc:
            self.failed_reloads += 1
            log.error("policy not reloaded, the previous one stays in force: %s", exc)
            return False
        self.policy = policy
        self.reloads += 1
        log.info("policy reloaded from %s: %d rules", self.path, len(policy.rules))
        return True


def _stamp(path: Path) -> tuple[int, int, int]:
    try:
        st = os.stat(path)
    except OSError:
        return (-1, -1, -1)
    return (st.st_mtime_ns, st.st_size, st.st_ino)
