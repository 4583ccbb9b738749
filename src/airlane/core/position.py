"""Stream positions and resume tokens.

A reader's position in a stream is ``(epoch, seq)``: the last event it has seen. On the wire it
is the token ``"<epoch>:<seq>"``, used verbatim as the SSE ``id:`` field, so a browser's
``EventSource`` sends it back as ``Last-Event-ID`` when it reconnects.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from airlane.core.errors import BadRequest, ErrorCode
from airlane.core.numbers import decimal

__all__ = [
    "HUB_STREAM_ID_PATTERN",
    "STREAM_ID_PATTERN",
    "BadResumeToken",
    "Position",
    "valid_hub_stream_id",
    "valid_stream_id",
]

STREAM_ID_PATTERN = re.compile(r"[A-Za-z0-9._:/-]{1,200}")
"""docs/streams.md: what a stream id may look like."""

HUB_STREAM_ID_PATTERN = re.compile(r"(?:@[A-Za-z0-9._-]{1,64}/)?[A-Za-z0-9._:/-]{1,200}")
"""What a hub stores a stream under: a client's id, after ``@<tenant>/`` for every tenant but
the default one (``airlane.gateway.tenancy``). Clients cannot write the ``@`` themselves."""

_EPOCH_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")
_MAX_SEQ = 2**63 - 1


def valid_stream_id(stream_id: str) -> bool:
    """True if ``stream_id`` follows the stream id syntax (what clients name)."""
    return STREAM_ID_PATTERN.fullmatch(stream_id) is not None


def valid_hub_stream_id(stream_id: str) -> bool:
    """True if a hub may store a stream under ``stream_id`` (a client's id, maybe scoped to
    a tenant)."""
    return HUB_STREAM_ID_PATTERN.fullmatch(stream_id) is not None


class BadResumeToken(BadRequest, ValueError):
    """A resume token that is not ``<epoch>:<seq>``; the client sent garbage."""

    code = ErrorCode.BAD_RESUME_TOKEN


@dataclass(frozen=True, slots=True)
class Position:
    """The last event a reader has seen: ``seq`` 0 means "nothing yet"."""

    epoch: str
    """The history this position belongs to."""
    seq: int
    """The last sequence number seen."""

    @property
    def token(self) -> str:
        """The wire form, ``"<epoch>:<seq>"``."""
        return f"{self.epoch}:{self.seq}"

    @classmethod
    def parse(cls, token: str) -> Position:
        """Parse a resume token; raise `BadResumeToken` with the reason if it is malformed."""
        epoch, sep, seq_text = token.strip().rpartition(":")
        if not sep or not _EPOCH_PATTERN.fullmatch(epoch):
            raise BadResumeToken(f"resume token {token[:80]!r} is not '<epoch>:<seq>'")
        seq = decimal(seq_text)  # ASCII digits only ("٣" is not 3)
        if seq is None or seq > _MAX_SEQ:
            raise BadResumeToken(f"resume token {token[:80]!r} has no valid sequence number")
        return cls(epoch, seq)
