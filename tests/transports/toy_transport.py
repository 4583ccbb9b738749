"""A whole transport, to show what one needs: newline-delimited JSON over TCP.

Each request is one JSON line, ``{"op": "chat", "request": {...}}`` or ``{"op": "subscribe",
"stream": ID, "from": "<epoch>:<seq>"}``; the answer is one line per event, then
``{"end": true}``, or one ``{"error": code, "message": ...}`` line. Everything else (parsing the
chat body, orphan policy, authorization, producing, resuming, error codes) is the gateway's.
It imports the service layer and the pure core, nothing else.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from airlane.core import Event, Position
from airlane.core.errors import AirlaneError, BadRequest, ErrorCode
from airlane.gateway import Gateway, Principal

# The wire's one error table: every code as this wire reports it (its own name).
TOY_ERROR = {code: code.value for code in ErrorCode}


async def serve_toy(gateway: Gateway, host: str = "127.0.0.1", port: int = 0) -> asyncio.Server:
    """Listen for toy clients; the caller closes the server."""

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                for reply in await answer(gateway, line):
                    writer.write(orjson.dumps(reply) + b"\n")
                await writer.drain()
        finally:
            writer.close()

    return await asyncio.start_server(connection, host, port, limit=1 << 20)


async def answer(gateway: Gateway, line: bytes) -> list[dict[str, Any]]:
    """The lines that answer one request line."""
    try:
        message = orjson.loads(line)
        principal = gateway.authenticate(message.get("token"))
        if message.get("op") == "chat":
            info = (await gateway.start_chat(principal, message.get("request"))).info
            return await read(gateway, principal, info.stream_id, None)
        if message.get("op") == "subscribe":
            after = Position.parse(message["from"]) if message.get("from") else None
            return await read(gateway, principal, str(message.get("stream")), after)
        raise BadRequest("op must be 'chat' or 'subscribe'", code=ErrorCode.UNKNOWN_OP)
    except orjson.JSONDecodeError:
        return [{"error": TOY_ERROR[ErrorCode.INVALID_JSON], "message": "not JSON"}]
    except AirlaneError as exc:
        return [{"error": TOY_ERROR[exc.code], "message": str(exc)}]


async def read(
    gateway: Gateway, principal: Principal, stream_id: str, after: Position | None
) -> list[dict[str, Any]]:
    """Every event of ``stream_id`` after ``after``, to its end."""
    lines: list[dict[str, Any]] = []
    async with await gateway.subscribe(principal, stream_id, resume=after) as subscription:
        while batch := await subscription.next_batch(64):
            epoch = subscription.position.epoch
            lines.extend(_event(stream_id, epoch, event) for event in batch)
    return [*lines, {"end": True}]


def _event(stream_id: str, epoch: str, event: Event) -> dict[str, Any]:
    return {
        "stream": stream_id,
        "id": f"{epoch}:{event.seq}",
        "kind": event.kind.value,
        "text": event.text,
    }
