"""`HttpServer`: one listening socket served over HTTP/1.1 and WebSocket to an ASGI app.

``start`` runs the application's lifespan start-up, then takes connections through an
`Acceptor` (`airlane.runtime.acceptor`: batches of accepts per readiness, rather than
uvloop's one a loop turn), each with an `HttpProtocol`; it returns once the server takes
connections, so readiness is the end of an ``await``, not a flag to poll. ``shutdown`` stops
in order: no new connections; idle keep-alive connections closed; requests in flight given
`ServerSettings.graceful_s` to finish (their connections close after them) while open
WebSockets are closed with 1012; then whatever still runs is cancelled, what is still open is
closed, and the lifespan shutdown runs the application's hooks.

Given a `airlane.runtime.handoff.Handoff` (the workers of ``airlane serve --workers``), the
server also adopts the connections its siblings hand over, each with the request they read on
it, and offers its own requests' applications the ``airlane.hand_over`` extension; where the
handoff has a `airlane.runtime.loadboard.LoadBoard`, the ``airlane.place`` extension too.

The socket is bound and configured by the caller (`airlane.server.run.bind_socket`: TCP
keepalive and ``TCP_NODELAY`` are set on it, and accepted sockets inherit them). Plain TCP
only: nothing here wraps connections in TLS.
"""

from __future__ import annotations

import asyncio
import socket
from typing import TYPE_CHECKING

from airlane.runtime.acceptor import Acceptor
from airlane.runtime.handoff import Handoff
from airlane.transports.http.asgi import ASGIApp
from airlane.transports.http.http_protocol import HttpProtocol
from airlane.transports.http.server.lifespan import Lifespan
from airlane.transports.http.server.settings import ServerSettings
from airlane.transports.http.server.state import ServerState, log

if TYPE_CHECKING:  # the gateway loads with the application, not with this server
    from airlane.gateway import ServerTls

__all__ = ["CANCEL_WAIT_S", "HttpServer"]

CANCEL_WAIT_S = 2.0
"""How long shutdown waits for cancelled tasks to end before it goes on without them."""


class HttpServer:
    """Serves ``app`` on a bound, listening socket (see the module docstring)."""

    def __init__(
        self,
        app: ASGIApp,
        settings: ServerSettings | None = None,
        *,
        tls: ServerTls | None = None,
        handoff: Handoff | None = None,
    ) -> None:
        self.app = app
        self.settings = settings or ServerSettings()
        self.tls = tls
        """TLS for every connection (HTTPS, WSS), with client certificates when it asks for
        them; None: plain HTTP."""
        self.handoff = handoff
        """Where this process passes connections to its siblings and takes theirs
        (``airlane serve --workers``; not with TLS); None: it has none."""
        self.lifespan = Lifespan(app)
        self.acceptor: Acceptor | None = None
        """Takes the connections, once started (its counts go to ``/metrics``)."""
        self._state: ServerState | None = None
        self._forced = asyncio.Event()
        self._stopped = False

    @property
    def connections(self) -> int:
        """Connections open now."""
        return len(self._state.connections) if self._state is not None else 0

    async def start(self, sock: socket.socket) -> None:
        """Start the application, then take connections on ``sock`` (its owner closes it).
        Raises `LifespanFailed` when the application cannot start."""
        loop = asyncio.get_running_loop()
        state = self._state = ServerState(self.app, self.settings, loop, self.tls)
        await self.lifespan.startup()
        state.app_state = self.lifespan.state
        tls = self.tls
        self.acceptor = Acceptor(
            sock,
            lambda: HttpProtocol(state),
            tls=None if tls is None else lambda: tls.context,
            on_refused=None if tls is None else tls.refused,
        )
        self.acceptor.start()
        if self.handoff is not None and tls is None:
            state.handoff = self.handoff
            acceptor = self.acceptor

            def adopt(conn: socket.socket, request: bytes) -> None:
                acceptor.adopt(conn, lambda: HttpProtocol(state, preface=request))

            self.handoff.start(adopt)
            board = self.handoff.board
            if board is not None:
                try:
                    board.start(lambda: len(state.connections))
                except OSError as exc:  # streams then start where their requests arrive
                    log.warning("cannot share load with sibling processes: %s", exc)
                else:
                    state.board = board

    def force(self) -> None:
        """Cut a shutdown's grace short: cancel what is in flight now."""
        self._forced.set()

    async def shutdown(self) -> None:
        """Stop (see the module docstring); a second call does nothing."""
        if self._stopped:
            return
        self._stopped = True
        state = self._state
        if state is not None and state.board is not None:
            state.board.close()  # siblings start no more streams here
            state.board = None
        if state is not None and state.handoff is not None:
            state.handoff.close()  # siblings serve what they would have handed over
            state.handoff = None
        if self.acceptor is not None:
            self.acceptor.close()
            await self.acceptor.wait_closed()
        if state is not None:
            state.stopping = True
            for connection in list(state.connections):
                connection.shutdown()
            await self._drain(state)
            for connection in list(state.connections):
                connection.abort()
        await self.lifespan.shutdown()

    async def _drain(self, state: ServerState) -> None:
        """Wait for the applications' tasks, within the grace; then cancel the rest."""
        tasks = set(state.tasks)
        if tasks and not self._forced.is_set():
            log.info(
                "waiting up to %.0f s for %d requests and WebSockets to finish",
                self.settings.graceful_s,
                len(tasks),
            )
            waiting = asyncio.ensure_future(asyncio.wait(tasks, timeout=self.settings.graceful_s))
            forced = asyncio.ensure_future(self._forced.wait())
            try:
                await asyncio.wait((waiting, forced), return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiting.cancel()
                forced.cancel()
        left = [task for task in state.tasks if not task.done()]
        if not left:
            return
        log.info("cancelling %d requests and WebSockets still running", len(left))
        for task in left:
            task.cancel()
        _, stuck = await asyncio.wait(left, timeout=CANCEL_WAIT_S)
        if stuck:
            log.warning("%d application tasks did not end when cancelled", len(stuck))
