"""``airlane policy``: check an RBAC policy file, and explain which rule decides a request
and why each other rule does not (docs/security.md)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

if TYPE_CHECKING:
    from airlane.security import Principal
    from airlane.security.policy import Policy

__all__ = ["policy_app"]

policy_app = typer.Typer(help="Check and explain RBAC policy files.", no_args_is_help=True)


@policy_app.command("check")
def check_command(
    file: Annotated[Path, typer.Argument(help="The policy file (TOML).")],
) -> None:
    """Say whether the policy file loads, and what it holds (exit 2 and the reason if not)."""
    policy = _load(file, "check")
    typer.echo(
        f"{file}: {len(policy.rules)} rules, {len(policy.identities)} identities; "
        "what no rule allows is denied"
    )


@policy_app.command("explain")
def explain_command(
    file: Annotated[Path, typer.Argument(help="The policy file (TOML).")],
    principal: Annotated[
        str,
        typer.Option(
            help="Who asks: key:NAME (NAME@TENANT too), jwt:SUBJECT, spiffe://..., or anonymous."
        ),
    ],
    action: Annotated[str, typer.Option(help="What it asks to do: generate, logs.append, ...")],
    resource: Annotated[
        str, typer.Option(help="What it asks it of: a stream id, logs/NAME, artifacts, ...")
    ],
    tenant: Annotated[
        str | None, typer.Option(help="Its tenant, where the principal does not say.")
    ] = None,
    role: Annotated[list[str] | None, typer.Option(help="A role it has (repeatable).")] = None,
    claim: Annotated[
        list[str] | None, typer.Option(help="A JWT claim, NAME=VALUE (repeatable).")
    ] = None,
    wire: Annotated[str, typer.Option(help="http, ws, grpc, grpc-web or airc.")] = "http",
    method: Annotated[str | None, typer.Option(help="The HTTP method.")] = None,
    path: Annotated[str | None, typer.Option(help="The HTTP path or gRPC method.")] = None,
    header: Annotated[
        list[str] | None, typer.Option(help="A header or metadata entry, NAME=VALUE (repeatable).")
    ] = None,
) -> None:
    """Print the decision on one request, the rule that made it, and each rule's reason.
    Exit 0 when allowed, 1 when denied, 2 when the file or an option is wrong."""
    from airlane.security import Action, RequestFacts

    policy = _load(file, "explain")
    if action not in {a.value for a in Action}:
        _fail("explain", f"--action {action!r}: one of {', '.join(a.value for a in Action)}")
    who = _principal(policy, principal, tenant, role or [], _pairs("--claim", claim or []))
    facts = RequestFacts.of(wire, _pairs("--header", header or []).items(), method, path)
    who = replace(who, request=facts)
    decision = policy.decide(who, action, resource)
    verdict = "ALLOWED" if decision.allowed else "DENIED"
    typer.echo(f"{verdict}: {decision.reason}")
    from airlane.security.policy import describe_principal

    typer.echo(f"principal: {describe_principal(who)}")
    request = " ".join(part for part in (wire, method, path) if part)
    typer.echo(f"request:   {action} on {resource!r} ({request})")
    typer.echo("rules, in the order they are weighed (deny rules first):")
    steps = sorted(decision.trace, key=lambda step: step.rule.allow)  # stable: file order kept
    for step in steps:
        effect = "allow" if step.rule.allow else "deny "
        mark = "-> " if step.rule.name == decision.rule else "   "
        why = "applies" if step.why_not is None else f"does not apply: {step.why_not}"
        typer.echo(f"{mark}{effect} {step.rule.name!r}: {why}")
    raise typer.Exit(0 if decision.allowed else 1)


def _load(file: Path, command: str) -> Policy:
    from airlane.security.policy import PolicyError, load_policy

    try:
        return load_policy(file)
    except PolicyError as exc:
        _fail(command, str(exc))


def _principal(
    policy: Policy, spec: str, tenant: str | None, roles: list[str], claims: dict[str, str]
) -> Principal:
    """The principal the server would see for ``spec``."""
    from airlane.security import DEFAULT_TENANT, Principal, principal_named

    try:
        if spec == "anonymous":
            who = Principal("anonymous")
        elif spec.startswith("key:"):
            who = principal_named(spec[4:])
        elif spec.startswith("jwt:") and len(spec) > 4:
            who = Principal(spec[4:], via="jwt", claims=claims)
        elif spec.startswith("spiffe://"):
            who = Principal(spec, via="spiffe")
            identity = policy.identity_of(spec)
            if identity is not None:  # as the server maps a certificate's principal
                who = replace(who, tenant=identity.tenant or who.tenant, roles=identity.roles)
        else:
            _fail("explain", f"--principal {spec!r}: key:NAME, jwt:SUBJECT, spiffe://... or "
                             "anonymous")  # fmt: skip
        if tenant is not None:
            who = replace(who, tenant=tenant)
            Principal(who.name, tenant=who.tenant)  # checks the tenant's spelling
        elif who.via == "jwt":
            who = replace(who, tenant=DEFAULT_TENANT)
    except ValueError as exc:
        _fail("explain", str(exc))
    return replace(who, roles=who.roles | frozenset(roles))


def _pairs(option: str, items: list[str]) -> dict[str, str]:
    pairs = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name:
            _fail("explain", f"{option} {item!r}: NAME=VALUE")
        pairs[name] = value
    return pairs


def _fail(command: str, message: str) -> NoReturn:
    typer.echo(f"airlane policy {command}: {message}", err=True)
    raise typer.Exit(2)
