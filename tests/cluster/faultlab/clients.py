"""HTTP helpers the lab's clients share."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

import httpx
import orjson

__all__ = ["path", "sse"]


def path(stream_id: str) -> str:
    return quote(stream_id, safe="")


async def sse(
    client: httpx.AsyncClient, url: str, resume: str | None = None
) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """``(id, event)`` for each SSE event of ``url`` until the response ends."""
    headers = {"last-event-id": resume} if resume else {}
    async with client.stream("GET", url, headers=headers) as response:
        if response.status_code != 200:
            return
        event_id = ""
        async for line in response.aiter_lines():
            if line.startswith("id:"):
                event_id = line[3:].strip()
            elif line.startswith("data:"):
                yield event_id, orjson.loads(line[5:])
