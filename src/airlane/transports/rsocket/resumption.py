"""`DetachedSessions`: the resumable RSocket sessions of one gateway whose connection dropped,
kept for a while for a RESUME to pick up.

A session set up with a resume token (at least `MIN_TOKEN_BYTES`: it is the only thing that
names the session on a new connection, so it must not be guessable) is not closed when its
connection drops: it is detached and kept ``[rsocket] resume_keep_s``, its requests paused
where the client's credit stopped them. A RESUME with its token, on a TCP or WebSocket
connection of this node, re-attaches it (`RSocketSession.attach`). One that is not resumed in
time is closed, its cursors released. At most ``[rsocket] max_detached`` are kept; past that a
dropped session simply ends. The TCP listener and the WebSocket path share one store per
gateway (`detached_sessions`).

A RESUME for a token this node does not hold (another node's session, or one that expired) is
refused with ``REJECTED_RESUME``: the client then sets up anew and subscribes again from the
last event it received, which the stream log makes exact on any node.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import TYPE_CHECKING

from airlane.gateway import Gateway
from airlane.transports.rsocket.config import RSocketServerConfig

if TYPE_CHECKING:
    from airlane.transports.rsocket.session import RSocketSession

__all__ = ["MIN_TOKEN_BYTES", "DetachedSessions", "detached_sessions"]

MIN_TOKEN_BYTES = 16
"""The shortest resume token a session is kept for (a UUID's 16 bytes)."""

_stores: weakref.WeakKeyDictionary[Gateway, DetachedSessions] = weakref.WeakKeyDictionary()


class DetachedSessions:
    """Detached sessions by resume token; see the module docstring."""

    def __init__(self, config: RSocketServerConfig) -> None:
        self.config = config
        self._sessions: dict[bytes, tuple[RSocketSession, asyncio.TimerHandle]] = {}
        self._live: dict[bytes, RSocketSession] = {}  # resumable sessions still connected
        self._closing: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._sessions)

    def holds(self, token: bytes) -> bool:
        """Whether a session with ``token`` is kept or connected (a new SETUP may not take
        its token)."""
        return token in self._sessions or token in self._live

    def register(self, session: RSocketSession, token: bytes) -> None:
        """A resumable session set up: a RESUME may take it over even before its old
        connection is seen to drop (the client knows first)."""
        if len(token) >= MIN_TOKEN_BYTES:
            self._live[token] = session

    def forget(self, session: RSocketSession, token: bytes) -> None:
        """``session`` is closed."""
        if self._live.get(token) is session:
            del self._live[token]

    def keep(self, session: RSocketSession, token: bytes) -> bool:
        """Keep ``session`` (detached) for a RESUME with ``token``; False if it may not be."""
        if (
            len(token) < MIN_TOKEN_BYTES
            or token in self._sessions
            or len(self._sessions) >= self.config.max_detached
        ):
            return False
        loop = asyncio.get_running_loop()
        expiry = loop.call_later(self.config.resume_keep_s, self._expire, token)
        self._sessions[token] = (session, expiry)
        return True

    def take(self, token: bytes) -> RSocketSession | None:
        """The session for ``token``, detached or still connected, no longer kept (None if
        there is none)."""
        kept = self._sessions.pop(token, None)
        if kept is None:
            return self._live.get(token)
        session, expiry = kept
        expiry.cancel()
        return session

    def discard(self, session: RSocketSession) -> None:
        """Close a session `take` returned that could not resume (in a task owned here)."""
        self._close(session)

    def _expire(self, token: bytes) -> None:
        kept = self._sessions.pop(token, None)
        if kept is not None:
            self._close(kept[0])

    def _close(self, session: RSocketSession) -> None:
        task = asyncio.get_running_loop().create_task(session.aclose())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def aclose(self) -> None:
        """Close every kept session and wait for them."""
        for token in list(self._sessions):
            session, expiry = self._sessions.pop(token)
            expiry.cancel()
            self._close(session)
        while self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)


def detached_sessions(gateway: Gateway, config: RSocketServerConfig) -> DetachedSessions:
    """The one store of ``gateway``'s detached RSocket sessions."""
    store = _stores.get(gateway)
    if store is None:
        store = _stores[gateway] = DetachedSessions(config)
    return store
