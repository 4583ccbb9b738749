"""The pure core of Airlane: events, stream logs, cursors, retention, usage, orphan policy,
stream status and the error model (`errors`).

Nothing here does I/O or reads a clock; time is always passed in.
"""

from airlane.core.errors import AirlaneError, BadRequest, ErrorCode, NotFound
from airlane.core.events import TERMINAL_KINDS, Channel, Event, Kind, Lane
from airlane.core.info import StreamInfo
from airlane.core.log import Cursor, ResumeOutOfRange, StreamClosed, StreamLog, StreamTooLarge
from airlane.core.orphan import OrphanMode, OrphanPolicy, OrphanTracker
from airlane.core.position import (
    BadResumeToken,
    Position,
    valid_hub_stream_id,
    valid_stream_id,
)
from airlane.core.retention import Folded, Retention
from airlane.core.usage import LatencyHistogram, UsageLedger

__all__ = [
    "TERMINAL_KINDS",
    "AirlaneError",
    "BadRequest",
    "BadResumeToken",
    "Channel",
    "Cursor",
    "ErrorCode",
    "Event",
    "Folded",
    "Kind",
    "Lane",
    "LatencyHistogram",
    "NotFound",
    "OrphanMode",
    "OrphanPolicy",
    "OrphanTracker",
    "Position",
    "ResumeOutOfRange",
    "Retention",
    "StreamClosed",
    "StreamInfo",
    "StreamLog",
    "StreamTooLarge",
    "UsageLedger",
    "valid_hub_stream_id",
    "valid_stream_id",
]
