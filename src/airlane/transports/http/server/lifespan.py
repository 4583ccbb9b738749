"""`Lifespan`: the ASGI lifespan protocol, the application's start and stop.

The server runs the application once with a ``lifespan`` scope for its whole life: it sends
``lifespan.startup`` before taking connections and ``lifespan.shutdown`` after the last one,
and waits for the application's answer to each. `AirlaneApp` starts the gateway on the first
and runs its ``on_shutdown`` hooks (AIRC's GOAWAY, gRPC's stop, the Yjs rooms) and closes
the gateway on the second.

An application that ends (returns or raises) without reading its first lifespan message does
not support the protocol: the server goes on without one, as the ASGI specification asks. One
that fails after reading ``lifespan.startup`` could not start, and the server does not either.
"""

from __future__ import annotations

import asyncio
from typing import Any

from airlane.transports.http.asgi import ASGIApp
from airlane.transports.http.server.state import log

__all__ = ["CANCEL_WAIT_S", "Lifespan", "LifespanFailed"]

CANCEL_WAIT_S = 5.0
"""How long a cancelled start-up may take to unwind."""
_ASGI = {"version": "3.0", "spec_version": "2.0"}


class LifespanFailed(RuntimeError):
    """The application could not start (it said ``lifespan.startup.failed``, or raised)."""


class Lifespan:
    """Runs ``app``'s lifespan in a task of its own: `startup`, then `shutdown`."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.state: dict[str, Any] = {}
        """The lifespan ``state``: what the application keeps there is copied into every
        request's scope."""
        # At most the two messages a lifespan ever gets.
        self._inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=2)
        self._task: asyncio.Task[None] | None = None
        self._answers: dict[str, asyncio.Future[None]] = {}
        self._supported = False  # the application read a lifespan message

    async def startup(self) -> None:
        """Start the application; raises `LifespanFailed` if it cannot (its own error is
        the cause)."""
        loop = asyncio.get_running_loop()
        self._answers = {"startup": loop.create_future(), "shutdown": loop.create_future()}
        self._task = loop.create_task(self._run(), name="asgi lifespan")
        await self._ask("startup")

    async def shutdown(self) -> None:
        """Stop the application (once started); a failure is logged, not raised: the
        process is stopping either way. A start-up that has not completed (the server was
        stopped during it) is cancelled instead: there is nothing to shut down yet, and the
        application would not read the message while it starts."""
        task = self._task
        if task is None or task.done():
            return
        if not self._answers["startup"].done():
            task.cancel()
            await asyncio.wait((task,), timeout=CANCEL_WAIT_S)
            return
        try:
            await self._ask("shutdown")
        except LifespanFailed as exc:
            log.error("the application failed to shut down: %s", exc, exc_info=exc.__cause__)

    async def _ask(self, phase: str) -> None:
        task = self._task
        assert task is not None
        answer = self._answers[phase]
        self._inbox.put_nowait({"type": f"lifespan.{phase}"})
        await asyncio.wait((answer, task), return_when=asyncio.FIRST_COMPLETED)
        if answer.done():
            answer.result()  # raises LifespanFailed for a "failed" answer
            return
        error = task.exception() if not task.cancelled() else None
        if not self._supported:
            log.debug("the application does not support the lifespan protocol", exc_info=error)
            return
        if error is not None:
            raise LifespanFailed(str(error) or type(error).__name__) from error
        raise LifespanFailed(f"the application ended its lifespan before {phase} completed")

    async def _run(self) -> None:
        scope = {"type": "lifespan", "asgi": _ASGI, "state": self.state}
        await self.app(scope, self._receive, self._send)

    async def _receive(self) -> dict[str, Any]:
        self._supported = True
        return await self._inbox.get()

    async def _send(self, message: Any) -> None:
        kind: str = message["type"]
        for phase in ("startup", "shutdown"):
            answer = self._answers[phase]
            if kind == f"lifespan.{phase}.complete":
                if not answer.done():
                    answer.set_result(None)
                return
            if kind == f"lifespan.{phase}.failed":
                if not answer.done():
                    answer.set_exception(LifespanFailed(message.get("message") or phase))
                return
        raise RuntimeError(f"unexpected ASGI lifespan message {kind!r}")
