"""`ServerState`: what one server's connections share (the application, the settings, the
live connections and their tasks), and `Connection`, what the server asks of each."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Protocol

from airlane.runtime.handoff import Handoff
from airlane.runtime.loadboard import LoadBoard
from airlane.runtime.plain import plain_context
from airlane.transports.http.asgi import ASGIApp
from airlane.transports.http.server.settings import ServerSettings
from airlane.transports.http.server.status import DateHeader

if TYPE_CHECKING:  # the gateway loads with the application, not with this server
    from airlane.gateway import ServerTls

__all__ = ["Connection", "ServerState", "cancel_later", "log"]

log = logging.getLogger("airlane.http.server")
"""The server's logger: errors an application let escape (once, with the request), and at
DEBUG what each connection does."""


class Connection(Protocol):
    """A live connection as the server sees it (an HTTP or a WebSocket protocol)."""

    def shutdown(self) -> None:
        """The server is stopping: finish what is in flight, take nothing new."""

    def abort(self) -> None:
        """Close now, whatever is in flight."""


class ServerState:
    """Shared by every connection of one server."""

    __slots__ = (
        "_forget",
        "alt_svc_line",
        "app",
        "app_state",
        "board",
        "connections",
        "date",
        "handoff",
        "loop",
        "settings",
        "stopping",
        "tasks",
        "tls",
    )

    def __init__(
        self,
        app: ASGIApp,
        settings: ServerSettings,
        loop: asyncio.AbstractEventLoop,
        tls: ServerTls | None = None,
    ) -> None:
        self.app = app
        self.settings = settings
        self.alt_svc_line = (
            b"alt-svc: %b\r\n" % settings.alt_svc.encode("latin-1") if settings.alt_svc else b""
        )
        """The ``Alt-Svc`` header line of every response (empty: none), made once."""
        self.loop = loop
        self.tls = tls
        """The server's TLS (its connections' identities come from it), or None."""
        self.connections: set[Connection] = set()
        """Connections open now (HTTP and WebSocket)."""
        self.tasks: dict[asyncio.Task[None], set[asyncio.Task[None]]] = {}
        """The applications' tasks running now, one per request or WebSocket, each with its
        connection's set (which holds it too): the server waits for them on shutdown, then
        cancels what is left."""
        self.app_state: dict[str, Any] = {}
        """The ASGI lifespan ``state``, copied into every request's scope."""
        self.date = DateHeader()
        self.stopping = False
        """Shutdown has begun: connections take no new requests."""
        self.handoff: Handoff | None = None
        """Where connections go to sibling processes and come from them (None: this
        process has none)."""
        self.board: LoadBoard | None = None
        """Where this process and its siblings compare their loads, to place new streams
        (with `handoff`; None: nowhere)."""
        self._forget = self._task_done  # one bound method, every task's done call-back

    def start_task(self, coro: Any, owner: set[asyncio.Task[None]]) -> asyncio.Task[None]:
        """Run an application coroutine in a task owned by ``owner`` (its connection's set)
        and by this server."""
        task: asyncio.Task[None] = self.loop.create_task(coro)
        self.tasks[task] = owner
        owner.add(task)
        # The same call-back object for every task, in a context kept for none of them: a
        # task that waits (an idle reader's) holds nothing more for its end.
        task.add_done_callback(self._forget, context=plain_context())
        return task

    def _task_done(self, task: asyncio.Task[None]) -> None:
        owner = self.tasks.pop(task, None)
        if owner is not None:
            owner.discard(task)


def cancel_later(
    loop: asyncio.AbstractEventLoop, tasks: set[asyncio.Task[None]], delay: float
) -> None:
    """Cancel whatever of ``tasks`` is still running ``delay`` seconds from now: a
    connection that is gone gives its tasks that long to finish after being told."""
    if tasks:
        loop.call_later(delay, _cancel, list(tasks))


def _cancel(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        task.cancel()
