"""``python -m tests.transports.failing_gateway``: a real gateway (every listener, as
``airlane serve`` runs them) whose hub fails on purpose.

Reading stream ``fail/<code>`` (its status, or a subscription to it) raises
``AirlaneError(code=<code>)`` from inside the hub, below every transport: what any layer under
the transports may raise, with its code and no wire knowledge. The error-table tests walk
every code through every wire with it. It prints the line ``airlane serve`` prints when ready.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

from airlane.core import Position, StreamInfo
from airlane.core.errors import AirlaneError, ErrorCode
from airlane.hub import Hub, MemoryHub, Subscription
from airlane.server import Listening, ServerConfig, compose, serve

PREFIX = "fail/"


def failing_stream(code: ErrorCode) -> str:
    """The stream id whose reading fails with ``code``."""
    return PREFIX + code.value


class FailingHub(MemoryHub):
    """A `MemoryHub` that raises the error a ``fail/<code>`` stream id names."""

    @staticmethod
    def _fail(stream_id: str) -> None:
        if stream_id.startswith(PREFIX):
            code = ErrorCode(stream_id[len(PREFIX) :])
            raise AirlaneError(f"{code.value} on purpose", code=code)

    async def info(self, stream_id: str) -> StreamInfo:
        self._fail(stream_id)
        return await super().info(stream_id)

    async def subscribe(
        self, stream_id: str, *, resume: Position | None = None, subscriber: str | None = None
    ) -> Subscription:
        self._fail(stream_id)
        return await super().subscribe(stream_id, resume=resume, subscriber=subscriber)


def main() -> None:
    def failing_hub(config: ServerConfig) -> Hub:
        return FailingHub()

    compose.build_hub = failing_hub  # type: ignore[assignment]

    def ready(listening: Listening) -> None:
        airc = f", AIRC on {listening.airc}" if listening.airc else ""
        grpc = f", gRPC on {listening.grpc}" if listening.grpc else ""
        rsocket = f", RSocket on {listening.rsocket}" if listening.rsocket else ""
        print(
            f"airlane listening on {listening.http} (failing hub){airc}{grpc}{rsocket}",
            flush=True,
        )

    options: dict[str, Any] = {"port": 0, "log_level": "warning"}
    try:
        asyncio.run(serve(ServerConfig(**options), on_ready=ready))
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
