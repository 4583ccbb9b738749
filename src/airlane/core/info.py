"""`StreamInfo`: a stream's status, as every API reports it (the hub fills it in)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from airlane.core.position import Position

__all__ = ["StreamInfo"]


@dataclass(frozen=True, slots=True)
class StreamInfo:
    """A stream's status, as the streams API reports it."""

    stream_id: str
    epoch: str
    last_seq: int
    first_retained_seq: int
    ended: bool
    finish_reason: str | None
    subscribers: int
    retained_events: int
    retained_bytes: int
    usage: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-compatible form."""
        return {
            "id": self.stream_id,
            "epoch": self.epoch,
            "last_seq": self.last_seq,
            "first_retained_seq": self.first_retained_seq,
            "resume_token": Position(self.epoch, self.last_seq).token,
            "ended": self.ended,
            "finish_reason": self.finish_reason,
            "subscribers": self.subscribers,
            "retained_events": self.retained_events,
            "retained_bytes": self.retained_bytes,
            "usage": self.usage,
        }
