"""The WebSocket load client: one `websockets` asyncio connection per stream.

Each text message of ``/v1/loadtest/ws`` is one chunk; messages are taken as bytes
(``decode=False``) so no UTF-8 decoding is spent, and only the chunk's head is read
(`airlane.bench.chunk`). The server ends the stream with close code 1000.
"""

from __future__ import annotations

import asyncio
import time

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosedOK, WebSocketException

from airlane.bench.chunk import ChunkFormatError, read_seq_ts
from airlane.bench.tally import StreamTally

__all__ = ["MAX_MESSAGE_BYTES", "run_ws_stream"]

MAX_MESSAGE_BYTES = 1 << 20
"""A chunk is ~1.2 KB; a larger message is refused (close 1009)."""


async def run_ws_stream(url: str, tally: StreamTally, deadline: float) -> None:
    """Read one load-test WebSocket stream into ``tally``; never raises (failures go into
    ``tally.error``). ``deadline`` is on the loop's clock."""
    tally.start_ns = time.monotonic_ns()
    try:
        async with (
            asyncio.timeout_at(deadline),
            connect(
                url,
                compression=None,
                proxy=None,
                max_size=MAX_MESSAGE_BYTES,
                ping_interval=None,  # a bounded run needs no keepalive
                open_timeout=None,  # bounded by the deadline
                user_agent_header="airlane-bench",
            ) as ws,
        ):
            while True:
                try:
                    message = await ws.recv(decode=False)
                except ConnectionClosedOK:
                    break
                now = time.monotonic_ns()
                seq, ts = read_seq_ts(message)
                tally.chunk(seq, ts, len(message), now)
        tally.finished = True
    except TimeoutError:
        tally.error = "timed out"
    except (OSError, WebSocketException, ChunkFormatError) as exc:
        tally.error = f"{type(exc).__name__}: {exc}"
