"""Content topics kept in event logs (``[[waku.logs]]``), both ways.

A Waku message on a routed content topic is appended to its log as a record of type
``waku.message``: the payload as the record's data (``application/json`` when it is JSON,
else ``application/octet-stream``), the Waku facts as headers (``waku-content-topic``,
``waku-pubsub-topic``, ``waku-hash``, ``waku-timestamp``, ``waku-meta`` in base64,
``waku-ephemeral``), and its hash as the idempotency key, so a message relayed or pushed twice
is one record. Going the other way, every record of the log is a Waku message: the original
for one that came from Waku, else a message whose payload is the record's data and whose
timestamp is the record's time to the millisecond. Logs have no live tail for readers, so a
routed topic's feed reads the log every `POLL_S`.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from typing import TYPE_CHECKING

import orjson

from airlane.core.errors import AirlaneError, ErrorCode
from airlane.gateway import NewEvent, Principal, Record
from airlane.wire.waku import WakuMessage

if TYPE_CHECKING:
    from airlane.gateway import Gateway

__all__ = ["RECORD_TYPE", "LogTopics", "message_from_record", "record_from_message"]

RECORD_TYPE = "waku.message"
POLL_S = 0.05
"""How often a followed log is read for new records."""
PAGE = 1000
"""Records read at once."""
HISTORY_LIMIT = 100_000
"""Records read for one store query at most."""


def record_from_message(message: WakuMessage, pubsub_topic: str, digest: bytes) -> NewEvent:
    """The record a Waku message becomes."""
    headers = {
        "waku-content-topic": message.content_topic,
        "waku-pubsub-topic": pubsub_topic,
        "waku-hash": digest.hex(),
    }
    if message.timestamp is not None:
        headers["waku-timestamp"] = str(message.timestamp)
    if message.meta is not None:
        headers["waku-meta"] = base64.b64encode(message.meta).decode()
    if message.ephemeral:
        headers["waku-ephemeral"] = "true"
    try:
        orjson.loads(message.payload)
        content_type = "application/json"
    except orjson.JSONDecodeError:
        content_type = "application/octet-stream"
    return NewEvent(RECORD_TYPE, message.payload, content_type, headers, digest.hex())


def message_from_record(record: Record, content_topic: str) -> WakuMessage:
    """The Waku message a record is."""
    headers = record.headers
    if "waku-hash" not in headers:  # appended through Airlane: a new Waku message
        stamp = record.time_ns - record.time_ns % 1_000_000
        return WakuMessage(record.data, content_topic, timestamp=stamp or None)
    timestamp = headers.get("waku-timestamp")
    meta = headers.get("waku-meta")
    return WakuMessage(
        record.data,
        headers.get("waku-content-topic", content_topic),
        timestamp=int(timestamp)
        if timestamp is not None and timestamp.lstrip("-").isdigit()
        else None,
        meta=base64.b64decode(meta) if meta is not None else None,
        ephemeral=headers.get("waku-ephemeral") == "true",
    )


def _meta(text: str | None) -> bytes | None:
    # Headers are anyone's to write over the HTTP API: a bad one is left out, not fatal.
    if text is None:
        return None
    try:
        return base64.b64decode(text, validate=True)[:64]
    except (binascii.Error, ValueError):
        return None


class LogTopics:
    """The routed content topics' logs, through the gateway as the node's principal."""

    def __init__(self, gateway: Gateway, principal: Principal, routes: dict[str, str]) -> None:
        self.gateway = gateway
        self.principal = principal
        self.routes = routes
        """Content topic -> log."""
        self._known: set[str] = set()

    def log_for(self, content_topic: str) -> str | None:
        """The log a content topic is kept in, if it is routed to one."""
        return self.routes.get(content_topic)

    async def append(self, log: str, event: NewEvent) -> None:
        """Append one record (creating the log the first time).

        Raises:
            AirlaneError: the gateway refused.
        """
        logs = self.gateway.logs
        try:
            await logs.append(self.principal, log, [event])
        except AirlaneError as exc:
            if exc.code is not ErrorCode.LOG_NOT_FOUND or log in self._known:
                raise
            await logs.create(self.principal, log)
            self._known.add(log)
            await logs.append(self.principal, log, [event])

    async def read(self, log: str, from_seq: int) -> list[Record]:
        """Records from ``from_seq`` (at most `PAGE`); none if the log does not exist."""
        try:
            return await self.gateway.logs.read(self.principal, log, from_seq=from_seq, limit=PAGE)
        except AirlaneError as exc:
            if exc.code is ErrorCode.LOG_NOT_FOUND:
                return []
            raise

    async def next_seq(self, log: str) -> int:
        """The seq the next record will have (1 for a log that does not exist yet)."""
        try:
            return (await self.gateway.logs.info(self.principal, log)).last_seq + 1
        except AirlaneError as exc:
            if exc.code is ErrorCode.LOG_NOT_FOUND:
                return 1
            raise

    async def history(self, log: str) -> list[Record]:
        """Every retained record, oldest first (at most `HISTORY_LIMIT`)."""
        records: list[Record] = []
        seq = 1
        while len(records) < HISTORY_LIMIT:
            page = await self.read(log, seq)
            if not page:
                break
            records += page
            seq = page[-1].seq + 1
        return records

    async def wait(self) -> None:
        """The pause between two reads of a followed log."""
        await asyncio.sleep(POLL_S)
