"""The AIRC transport's one error table: every `ErrorCode` as the ``ERROR`` frame that
answers a refused request.

A refused request (``GEN_REQ``, ``OPEN``, ``CANCEL``, ``AUTH``) is answered with an ``ERROR``
signalling message (`airlane.wire.airc.Error`) carrying the request's id, the code's name
(`AIRC_ERROR`, at most 64 bytes: every name fits) and the message, with the offending
parameter in front when there is one; the connection stays open. Only a protocol violation ends
it, with ``GOAWAY`` and AIRC's own codes (`airlane.wire.airc.ErrorCode`), which are not
refusals of a request and not in this table.
"""

from __future__ import annotations

from collections.abc import Mapping

from airlane.core.errors import AirlaneError, ErrorCode
from airlane.wire.airc import Error

__all__ = ["AIRC_ERROR", "MAX_CODE_BYTES", "MAX_MESSAGE_CHARS", "error_frame"]

MAX_CODE_BYTES = 64
"""The longest code an ``ERROR`` frame carries."""
MAX_MESSAGE_CHARS = 1000
"""The longest message an ``ERROR`` frame carries (cut beyond)."""

AIRC_ERROR: Mapping[ErrorCode, str] = {code: code.value for code in ErrorCode}
"""The code an ``ERROR`` frame names for each `ErrorCode`: its own name, so that every wire
reports the same word."""


def error_frame(request_id: int, exc: AirlaneError) -> Error:
    """The ``ERROR`` that answers request ``request_id`` refused with ``exc``."""
    message = f"{exc.param}: {exc}" if exc.param else str(exc)
    return Error(request_id, AIRC_ERROR[exc.code][:MAX_CODE_BYTES], message[:MAX_MESSAGE_CHARS])
