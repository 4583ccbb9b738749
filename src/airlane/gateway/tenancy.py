"""Each tenant's own namespace of names: stream ids, event logs, schema subjects.

A client names a stream (``alice/private``, ``chatcmpl-...``), a log or a subject; the store
keeps it under a key that says whose it is (`airlane.core.scope`): the name itself for the
default tenant (so a single-tenant gateway's names stay the ones clients gave, in memory and in
JetStream alike), and ``@<tenant>/<name>`` for every other tenant. Clients cannot write an
``@`` in a name, so no name a client sends reaches another tenant's key: another tenant's
stream, log or subject is not found rather than forbidden, and two tenants can each have one
called ``notes``.

Errors the stores raise name the key; `client_names` puts the client's name back before they
reach a transport, so a message never shows a tenant's key.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

from airlane.core import StreamInfo, valid_stream_id
from airlane.core.scope import scoped, split_scope
from airlane.hub import InvalidStreamId
from airlane.security import DEFAULT_TENANT, Action, Principal, SecurityPolicy
from airlane.security.audit import audit_not_found

__all__ = [
    "client_info",
    "client_names",
    "finding",
    "hub_key",
    "own_names",
    "scope_of",
    "scoped_name",
]


def scope_of(principal: Principal) -> str | None:
    """The scope ``principal``'s names are kept in (None: the default tenant's, none)."""
    return None if principal.tenant == DEFAULT_TENANT else principal.tenant


def scoped_name(principal: Principal, name: str) -> str:
    """The key ``principal``'s tenant keeps ``name`` under (checked by the caller: a name a
    client may use holds no ``@``)."""
    return scoped(scope_of(principal), name)


def own_names(principal: Principal, keys: list[str]) -> list[str]:
    """Of the stored ``keys``, those of ``principal``'s tenant, as its clients name them."""
    tenant = scope_of(principal)
    return [name for owner, name in map(split_scope, keys) if owner == tenant]


def hub_key(principal: Principal, stream_id: str) -> str:
    """Where ``principal``'s tenant keeps the stream it calls ``stream_id``;
    `InvalidStreamId` if that is no stream id a client may use."""
    if not valid_stream_id(stream_id):
        raise InvalidStreamId(
            f"invalid stream id {stream_id[:80]!r}: use 1-200 of A-Z a-z 0-9 . _ : / -"
        )
    return scoped_name(principal, stream_id)


def client_info(info: StreamInfo, stream_id: str) -> StreamInfo:
    """``info`` as the client that calls the stream ``stream_id`` sees it."""
    return info if info.stream_id == stream_id else replace(info, stream_id=stream_id)


@contextmanager
def client_names(key: str, stream_id: str) -> Iterator[None]:
    """Errors raised inside name the stream ``stream_id``, as the client does, not ``key``."""
    try:
        yield
    except Exception as exc:
        if key != stream_id:
            exc.args = tuple(
                arg.replace(key, stream_id) if isinstance(arg, str) else arg for arg in exc.args
            )
        raise


@contextmanager
def finding(
    security: SecurityPolicy,
    principal: Principal,
    action: Action,
    key: str,
    name: str,
    resource: str | None = None,
) -> Iterator[None]:
    """`client_names` for a lookup of what ``principal`` calls ``name`` (kept under ``key``)
    for ``action``; a not-found is also an audit record (`audit_not_found`), on ``resource``
    (default ``name``): another tenant's name is a 404 on every wire, and a record."""
    try:
        with client_names(key, name):
            yield
    except Exception as exc:
        audit_not_found(security, principal, action, resource or name, exc)
        raise
