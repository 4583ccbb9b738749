"""Each tenant's own namespace of stream ids.

A client names a stream (``alice/private``, ``chatcmpl-...``); the hub stores it under a key
that says whose it is: the id itself for the default tenant (so a single-tenant gateway's
streams keep the ids clients gave them, in memory and in JetStream alike), and
``@<tenant>/<id>`` for every other tenant. Clients cannot write an ``@`` in a stream id, so no
name a client sends reaches another tenant's key: another tenant's stream is not found rather
than forbidden, and two tenants can each have a stream called ``notes``.

Errors the hub raises name its key; `client_names` puts the client's id back before they
reach a transport, so a message never shows a tenant's key.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

from airlane.core import StreamInfo, valid_stream_id
from airlane.hub import InvalidStreamId
from airlane.security import DEFAULT_TENANT, Principal

__all__ = ["client_info", "client_names", "hub_key"]


def hub_key(principal: Principal, stream_id: str) -> str:
    """Where ``principal``'s tenant keeps the stream it calls ``stream_id``;
    `InvalidStreamId` if that is no stream id a client may use."""
    if not valid_stream_id(stream_id):
        raise InvalidStreamId(
            f"invalid stream id {stream_id[:80]!r}: use 1-200 of A-Z a-z 0-9 . _ : / -"
        )
    if principal.tenant == DEFAULT_TENANT:
        return stream_id
    return f"@{principal.tenant}/{stream_id}"


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
