"""The RBAC policy language: a TOML file of identities and rules (docs/security.md).

::

    version = 1

    [[identities]]                  # what a client certificate's SPIFFE ID stands for
    spiffe = "spiffe://example.org/ns/ml/*"
    tenant = "ml"
    roles = ["trainer"]

    [[rules]]
    name = "only the trainer posts model updates"
    effect = "allow"                # or "deny": a matching deny rule wins over any allow
    principals = ["spiffe://example.org/ns/ml/sa/ai-trainer"]
    actions = ["artifacts.publish", "logs.append"]
    resources = ["artifacts", "logs/model-updates"]
    methods = ["POST"]              # optional: HTTP methods
    paths = ["/v1/*"]               # optional: HTTP paths or gRPC methods
    metadata = { "x-channel" = "stable" }   # optional: headers / gRPC metadata

Once a policy is set, what no rule allows is denied. A rule matches a request when one of its
``principals`` matches the principal and every other field it sets matches too; all patterns
are shell-style (``*`` matches anything, ``/`` included; ``?`` one character).

Principal patterns: ``*`` (anyone, anonymous included), ``spiffe://...`` (a certificate's
SPIFFE ID), ``key:NAME`` (an API key's name), ``jwt:SUBJECT``, ``name:NAME`` (any kind),
``role:ROLE``, ``tenant:TENANT``, ``claim:CLAIM=VALUE`` (a JWT claim), ``anonymous``.

Resources are what the gateway asks about: a stream's id as its client names it,
``logs/NAME``, ``schemas/SUBJECT``, ``rooms/NAME``, ``yjs/NAME``, ``artifacts/NAME`` and
``artifacts`` (the store, for a rescan); always within the principal's own tenant.

`load_policy` reads and checks a file (`PolicyError` says where and what is wrong);
`Policy.decide` answers a request with the `Decision` and every rule's reason.
"""

from __future__ import annotations

import fnmatch
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airlane.security import Action, Principal, RequestFacts

__all__ = [
    "ACTION_NAMES",
    "Decision",
    "Identity",
    "Policy",
    "PolicyError",
    "Rule",
    "RuleTrace",
    "describe_principal",
    "load_policy",
    "parse_policy",
]

ACTION_NAMES = tuple(action.value for action in Action)
"""Every action a rule can name (`airlane.security.Action`)."""

_PRINCIPAL_KINDS = ("key:", "jwt:", "name:", "role:", "tenant:", "claim:")
_RULE_KEYS = {"name", "effect", "principals", "actions", "resources", "methods", "paths",
              "metadata"}  # fmt: skip
_IDENTITY_KEYS = {"spiffe", "tenant", "roles"}
MAX_RULES = 10_000
"""More rules than this is a mistake (each request is checked against them in turn)."""


class PolicyError(ValueError):
    """A policy file that cannot be used; the text says which file, which entry, and why."""


@dataclass(frozen=True, slots=True)
class Identity:
    """What the client certificates whose SPIFFE ID matches ``spiffe`` stand for."""

    spiffe: str
    tenant: str | None = None
    roles: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Rule:
    """One rule: who (any of ``principals``) may (or may not) do ``actions`` to
    ``resources``, for requests that also match ``methods``, ``paths`` and ``metadata``."""

    name: str
    allow: bool
    principals: tuple[str, ...]
    actions: tuple[str, ...]
    resources: tuple[str, ...] = ("*",)
    methods: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()
    metadata: Mapping[str, str] = field(default_factory=dict)

    def mismatch(self, principal: Principal, action: str, resource: str) -> str | None:
        """Why this rule does not apply to the request (None: it applies)."""
        if not any(_principal_matches(p, principal) for p in self.principals):
            return (
                f"principal {describe_principal(principal)} is not one of {list(self.principals)}"
            )
        if not any(fnmatch.fnmatchcase(action, pattern) for pattern in self.actions):
            return f"action {action} is not one of {list(self.actions)}"
        if not any(fnmatch.fnmatchcase(resource, pattern) for pattern in self.resources):
            return f"resource {resource!r} is not one of {list(self.resources)}"
        request = principal.request
        if self.methods:
            method = request.method if request is not None else None
            if method is None:
                return f"the request has no HTTP method ({_wire(request)}); the rule needs one"
            if method.upper() not in self.methods:
                return f"method {method} is not one of {list(self.methods)}"
        if self.paths:
            path = request.path if request is not None else None
            if path is None:
                return f"the request has no path ({_wire(request)}); the rule needs one"
            if not any(fnmatch.fnmatchcase(path, pattern) for pattern in self.paths):
                return f"path {path} is not one of {list(self.paths)}"
        for key, pattern in self.metadata.items():
            value = request.metadata.get(key) if request is not None else None
            if value is None:
                return f"the request has no {key!r} metadata"
            if not fnmatch.fnmatchcase(value, pattern):
                return f"metadata {key}={value!r} does not match {pattern!r}"
        return None


@dataclass(frozen=True, slots=True)
class RuleTrace:
    """One rule's answer to a request, for `airlane policy explain`."""

    rule: Rule
    why_not: str | None
    """Why it does not apply; None when it does."""


@dataclass(frozen=True, slots=True)
class Decision:
    """A policy's answer to one request."""

    allowed: bool
    rule: str | None
    """The rule that decided; None when none applied (denied by default)."""
    reason: str
    trace: tuple[RuleTrace, ...] = ()


@dataclass(frozen=True, slots=True)
class Policy:
    """A checked policy: identities for certificate principals, and the rules."""

    rules: tuple[Rule, ...]
    identities: tuple[Identity, ...] = ()
    source: str = "<policy>"

    def identity_of(self, spiffe_id: str) -> Identity | None:
        """The first identity entry matching a certificate's SPIFFE ID."""
        for identity in self.identities:
            if fnmatch.fnmatchcase(spiffe_id, identity.spiffe):
                return identity
        return None

    def decide(self, principal: Principal, action: str, resource: str) -> Decision:
        """Deny rules first (one that applies denies), then the first allow rule that applies;
        none: denied by default."""
        trace = tuple(
            RuleTrace(rule, rule.mismatch(principal, action, resource)) for rule in self.rules
        )
        for step in trace:
            if step.why_not is None and not step.rule.allow:
                return Decision(False, step.rule.name, f"denied by rule {step.rule.name!r}", trace)
        for step in trace:
            if step.why_not is None:
                return Decision(True, step.rule.name, f"allowed by rule {step.rule.name!r}", trace)
        return Decision(False, None, f"no rule allows {action} there", trace)


def load_policy(path: Path) -> Policy:
    """Read and check the policy file at ``path`` (`PolicyError` when it cannot be used)."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise PolicyError(f"cannot read the policy {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise PolicyError(f"the policy {path} is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise PolicyError(f"the policy {path} is not valid TOML: {exc}") from None
    return parse_policy(data, str(path))


def parse_policy(data: Mapping[str, Any], source: str = "<policy>") -> Policy:
    """Check a parsed policy document (`PolicyError` naming the entry and the problem)."""
    unknown = set(data) - {"version", "rules", "identities"}
    if unknown:
        raise PolicyError(f"{source}: unknown top-level keys {sorted(unknown)}")
    if data.get("version", 1) != 1:
        raise PolicyError(f"{source}: version {data['version']!r} is not supported (1 is)")
    rules = _entries(data, "rules", source)
    if not rules:
        raise PolicyError(f"{source}: no [[rules]]: a policy with none would deny everything")
    if len(rules) > MAX_RULES:
        raise PolicyError(f"{source}: {len(rules)} rules; at most {MAX_RULES}")
    parsed = tuple(_rule(entry, f"{source}: rules[{n}]") for n, entry in enumerate(rules))
    names = [rule.name for rule in parsed]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise PolicyError(f"{source}: rule names must differ; repeated: {duplicates}")
    identities = tuple(
        _identity(entry, f"{source}: identities[{n}]")
        for n, entry in enumerate(_entries(data, "identities", source))
    )
    return Policy(parsed, identities, source)


def _entries(data: Mapping[str, Any], key: str, source: str) -> list[Mapping[str, Any]]:
    entries = data.get(key, [])
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise PolicyError(f"{source}: {key} must be an array of tables ([[{key}]])")
    return entries


def _rule(entry: Mapping[str, Any], where: str) -> Rule:
    unknown = set(entry) - _RULE_KEYS
    if unknown:
        raise PolicyError(
            f"{where}: unknown keys {sorted(unknown)}; a rule has {sorted(_RULE_KEYS)}"
        )
    name = entry.get("name")
    if not isinstance(name, str) or not name.strip():
        raise PolicyError(f'{where}: every rule needs a name (name = "...")')
    where = f"{where} ({name!r})"
    effect = entry.get("effect", "allow")
    if effect not in ("allow", "deny"):
        raise PolicyError(f"{where}: effect is 'allow' or 'deny', not {effect!r}")
    principals = _strings(entry, "principals", where, required=True)
    for pattern in principals:
        _check_principal(pattern, where)
    actions = _strings(entry, "actions", where, required=True)
    for pattern in actions:
        if not any(fnmatch.fnmatchcase(known, pattern) for known in ACTION_NAMES):
            raise PolicyError(
                f"{where}: no action is named {pattern!r}; actions: {', '.join(ACTION_NAMES)}"
            )
    methods = tuple(method.upper() for method in _strings(entry, "methods", where))
    metadata = entry.get("metadata", {})
    if not isinstance(metadata, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
    ):
        raise PolicyError(f'{where}: metadata is a table of strings ({{ "x-name" = "value" }})')
    return Rule(
        name=name,
        allow=effect == "allow",
        principals=principals,
        actions=actions,
        resources=_strings(entry, "resources", where) or ("*",),
        methods=methods,
        paths=_strings(entry, "paths", where),
        metadata={key.lower(): value for key, value in metadata.items()},
    )


def _identity(entry: Mapping[str, Any], where: str) -> Identity:
    unknown = set(entry) - _IDENTITY_KEYS
    if unknown:
        raise PolicyError(f"{where}: unknown keys {sorted(unknown)}; an identity has "
                          f"{sorted(_IDENTITY_KEYS)}")  # fmt: skip
    spiffe = entry.get("spiffe")
    if not isinstance(spiffe, str) or not spiffe.startswith("spiffe://"):
        raise PolicyError(f"{where}: spiffe must be a SPIFFE ID pattern (spiffe://domain/...)")
    tenant = entry.get("tenant")
    if tenant is not None:
        try:
            Principal("check", tenant=tenant)
        except (TypeError, ValueError) as exc:
            raise PolicyError(f"{where}: tenant: {exc}") from None
    return Identity(spiffe, tenant, frozenset(_strings(entry, "roles", where)))


def _strings(entry: Mapping[str, Any], key: str, where: str, *, required: bool = False
             ) -> tuple[str, ...]:  # fmt: skip
    value = entry.get(key)
    if value is None:
        if required:
            raise PolicyError(f"{where}: {key} is required (a list of patterns)")
        return ()
    if isinstance(value, str):
        value = [value]
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(item, str) and item for item in value)
    ):
        raise PolicyError(f"{where}: {key} must be a non-empty list of strings")
    return tuple(value)


def _check_principal(pattern: str, where: str) -> None:
    if pattern in ("*", "anonymous") or pattern.startswith("spiffe://"):
        return
    if pattern.startswith("claim:"):
        if "=" not in pattern[6:] or pattern.index("=") == 6:
            raise PolicyError(f"{where}: {pattern!r}: a claim pattern is claim:NAME=VALUE")
        return
    if not any(pattern.startswith(kind) and len(pattern) > len(kind) for kind in
               _PRINCIPAL_KINDS):  # fmt: skip
        raise PolicyError(
            f"{where}: principal {pattern!r} is not *, anonymous, spiffe://..., or one of "
            f"{', '.join(kind + '...' for kind in _PRINCIPAL_KINDS)}"
        )


def _principal_matches(pattern: str, principal: Principal) -> bool:
    if pattern == "*":
        return True
    if pattern == "anonymous":
        return principal.via == "anonymous"
    if pattern.startswith("spiffe://"):
        return principal.via == "spiffe" and fnmatch.fnmatchcase(principal.name, pattern)
    kind, _, value = pattern.partition(":")
    if kind in ("key", "jwt"):
        return principal.via == kind and fnmatch.fnmatchcase(principal.name, value)
    if kind == "name":
        return fnmatch.fnmatchcase(principal.name, value)
    if kind == "role":
        return any(fnmatch.fnmatchcase(role, value) for role in principal.roles)
    if kind == "tenant":
        return fnmatch.fnmatchcase(principal.tenant, value)
    if kind == "claim":
        claim, _, wanted = value.partition("=")
        found = principal.claims.get(claim)
        return found is not None and fnmatch.fnmatchcase(found, wanted)
    return False


def describe_principal(principal: Principal) -> str:
    """How `airlane policy explain` and refusals name a principal: ``via:name (tenant...)``."""
    roles = f", roles {sorted(principal.roles)}" if principal.roles else ""
    who = principal.name if principal.via in ("spiffe", "anonymous") else f"{principal.via}:"
    who = who if who == principal.name else who + principal.name
    return f"{who} (tenant {principal.tenant}{roles})"


def _wire(request: RequestFacts | None) -> str:
    return "no request facts" if request is None else f"wire {request.wire}"
