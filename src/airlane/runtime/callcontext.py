"""`CALL`: who and what a request is about, for backends and logs, whatever wire it came on.

A transport that knows the model and request identity of a call (gRPC metadata
``x-model-id`` / ``x-model-version`` / ``x-request-id``) sets `CALL` while it handles it; a
producer started then inherits it (asyncio copies the context into new tasks).
"""

from __future__ import annotations

import contextvars
import secrets
from dataclasses import dataclass, field

from airlane.core.errors import AirlaneError

__all__ = ["CALL", "CallContext", "new_request_id"]


@dataclass(frozen=True, slots=True)
class CallContext:
    """The identity a call carried."""

    model_id: str | None = None
    """``x-model-id``: the model the caller means."""
    model_version: str | None = None
    """``x-model-version``: the version the caller expects."""
    request_id: str | None = None
    """``x-request-id``, or one made up for the call."""
    rpc: str | None = field(default=None, compare=False)
    """The gRPC method called (``/airlane.v1.Streams/Subscribe``), where the call is one (how
    the call came, not what it is about: not compared)."""
    wire: str = field(default="grpc", compare=False)
    """``grpc`` or ``grpc-web``."""
    refusal: AirlaneError | None = field(default=None, compare=False)
    """Why the call's metadata is malformed: the call is refused with it once the caller is
    authenticated (an unauthenticated caller hears ``unauthenticated`` first)."""


CALL: contextvars.ContextVar[CallContext | None] = contextvars.ContextVar(
    "airlane_call", default=None
)
"""The current call's context (None outside a call that set one)."""


def new_request_id() -> str:
    """A fresh request id."""
    return f"req-{secrets.token_hex(8)}"
