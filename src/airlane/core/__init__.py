"""The pure core of Airlane: events, stream logs, cursors, retention, usage and orphan policy.

Nothing here does I/O or reads a clock; time is always passed in.
"""

from airlane.core.events import TERMINAL_KINDS, Channel, Event, Kind, Lane
from airlane.core.log import Cursor, ResumeOutOfRange, StreamClosed, StreamLog
from airlane.core.orphan import OrphanMode, OrphanPolicy, OrphanTracker
from airlane.core.position import BadResumeToken, Position, valid_stream_id
from airlane.core.retention import Folded, Retention
from airlane.core.usage import LatencyHistogram, UsageLedger

__all__ = [
    "TERMINAL_KINDS",
    "BadResumeToken",
    "Channel",
    "Cursor",
    "Event",
    "Folded",
    "Kind",
    "Lane",
    "LatencyHistogram",
    "OrphanMode",
    "OrphanPolicy",
    "OrphanTracker",
    "Position",
    "ResumeOutOfRange",
    "Retention",
    "StreamClosed",
    "StreamLog",
    "UsageLedger",
    "valid_stream_id",
]
