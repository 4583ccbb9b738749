"""Tenant scopes: how a name a tenant's client gives is kept apart from other tenants' names.

A client names things (a stream, an event log, a schema subject) in its tenant's namespace; the
gateway turns the name into the one its store keeps: the name itself for the default tenant,
``@<tenant>/<name>`` for every other. No client name may hold an ``@``, so no name a client
sends reaches another tenant's. Stores that have to write names in a narrower alphabet (NATS
subjects, stream names, key-value keys) encode the two parts with a separator of their own
that plain names never contain.
"""

from __future__ import annotations

import re

__all__ = ["SCOPED_PATTERN", "TENANT_PATTERN", "scoped", "split_scope"]

TENANT_PATTERN = re.compile(r"[A-Za-z0-9._-]{1,64}")
"""What a tenant's name may look like."""

SCOPED_PATTERN = re.compile(r"@([A-Za-z0-9._-]{1,64})/(.*)", re.DOTALL)
"""A scoped name: the tenant, then the client's name."""


def scoped(tenant: str | None, name: str) -> str:
    """``name`` in ``tenant``'s scope (None: the default tenant, whose names are kept as
    they are)."""
    return name if tenant is None else f"@{tenant}/{name}"


def split_scope(name: str) -> tuple[str | None, str]:
    """The tenant (None for the default one) and the client's name of a stored ``name``."""
    match = SCOPED_PATTERN.fullmatch(name) if name.startswith("@") else None
    if match is None:
        return None, name
    return match.group(1), match.group(2)
