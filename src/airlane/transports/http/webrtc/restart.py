"""`IceRestart`: a new ICE session under a connected peer connection's DTLS and SCTP.

A client restarts ICE when its network changes (Wi-Fi to cellular, a new address): new ICE
credentials, new candidates, new connectivity checks, while DTLS and the data channels carry
on. aiortc cannot: it neither renegotiates ICE nor lets its ICE transport change connection.
What it does expose is enough to do it beside it:

1. the client's restart arrives as a trickle fragment with a new ``ice-ufrag`` and
   ``ice-pwd`` (and its candidates), RFC 9725's way;
2. a new aioice connection gathers with the same STUN and TURN servers, learns the client's
   credentials and candidates, and runs its checks; the fragment the gateway answers carries
   its new credentials and candidates;
3. once the new connection is nominated, the peer's ICE transport is pointed at it: what DTLS
   sends goes the new way, what arrives on it reaches DTLS, and the old connection is closed.

Step 3 reaches into aiortc and aioice's private state (the ICE transport's connection, its
``_recv`` / ``_send``, its monitor task; the connection's datagram queue): `supported` checks
for all of it first, and where a newer aiortc has moved something the restart is refused as
before (``IceRestartUnsupported``, a 422) and the client falls back to a new peer connection.
The new connection's datagrams go into the old connection's queue from the start, because
DTLS is already waiting on that queue and would otherwise not see them; the old connection's
own wake-up on close is sent to a queue no one reads, so that closing it does not end DTLS.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import Any

__all__ = ["IceRestart", "RemoteIce", "parse_fragment", "supported"]

log = logging.getLogger("airlane.webrtc")

_MONITOR = "_RTCIceTransport__monitor_task"  # aiortc's name-mangled attribute


@dataclass(slots=True)
class RemoteIce:
    """What a trickle fragment says: ICE credentials (None if it names none), its media
    section's ``mid`` (None if not named), candidate lines (without ``a=``), and whether it
    ends the candidates."""

    ufrag: str | None
    pwd: str | None
    candidates: list[str]
    ended: bool
    mid: str | None = None


def parse_fragment(fragment: str) -> RemoteIce:
    """Read an ``application/trickle-ice-sdpfrag`` body."""
    ufrag = pwd = mid = None
    candidates: list[str] = []
    ended = False
    for raw in fragment.splitlines():
        line = raw.strip()
        if line.startswith("a=ice-ufrag:"):
            ufrag = line[len("a=ice-ufrag:") :]
        elif line.startswith("a=ice-pwd:"):
            pwd = line[len("a=ice-pwd:") :]
        elif line.startswith("a=mid:"):
            mid = line[len("a=mid:") :]
        elif line.startswith("a=candidate:"):
            candidates.append(line[len("a=") :])
        elif line == "a=end-of-candidates":
            ended = True
    return RemoteIce(ufrag, pwd, candidates, ended, mid)


def supported(ice_transport: Any) -> bool:
    """Whether this aiortc's ICE transport has what a restart needs (see the module
    docstring)."""
    connection = getattr(ice_transport, "_connection", None)
    return (
        hasattr(ice_transport, "_recv")
        and hasattr(ice_transport, "_send")
        and hasattr(ice_transport, _MONITOR)
        and isinstance(getattr(connection, "_queue", None), asyncio.Queue)
    )


class IceRestart:
    """One ICE restart of one peer connection: `begin` answers the client, then the checks
    run in a task; `aclose` abandons it."""

    def __init__(
        self,
        ice_transport: Any,
        ice_servers: list[Any],
        timeout_s: float,
        outcomes: dict[str, int] | None = None,
        *,
        mid: str = "0",
    ) -> None:
        from aioice import Connection
        from aiortc.rtcicetransport import connection_kwargs

        self._ice = ice_transport
        self._timeout_s = timeout_s
        self._mid = mid
        self.connection = Connection(ice_controlling=False, **connection_kwargs(ice_servers))
        self.done = asyncio.Event()
        """Set once the restart has switched over, failed or been abandoned."""
        self.switched = False
        self._task: asyncio.Task[None] | None = None
        self._outcomes = outcomes if outcomes is not None else {}

    async def begin(self, remote: RemoteIce) -> str:
        """Gather, take the client's credentials and candidates, start the checks; the
        fragment to answer with (the gateway's new credentials and candidates)."""
        from aiortc.rtcicetransport import candidate_from_aioice
        from aiortc.sdp import candidate_to_sdp

        connection = self.connection
        # From now on the new path's datagrams reach DTLS, which waits on the old queue.
        connection._queue = self._ice._connection._queue
        await connection.gather_candidates()
        connection.remote_username = remote.ufrag
        connection.remote_password = remote.pwd
        await self.add_candidates(remote)
        self._task = asyncio.create_task(self._run(), name="webrtc ice restart")
        lines = [
            f"a=ice-ufrag:{connection.local_username}",
            f"a=ice-pwd:{connection.local_password}",
            "m=application 9 UDP/DTLS/SCTP webrtc-datachannel",
            f"a=mid:{self._mid}",
        ]
        for candidate in connection.local_candidates:
            lines.append("a=candidate:" + candidate_to_sdp(candidate_from_aioice(candidate)))
        lines.append("a=end-of-candidates")
        return "\r\n".join(lines) + "\r\n"

    async def add_candidates(self, remote: RemoteIce) -> int:
        """The client's candidates for the new session; how many were taken."""
        from aiortc.rtcicetransport import candidate_to_aioice
        from aiortc.sdp import candidate_from_sdp

        connection = self.connection
        for line in remote.candidates:
            candidate = candidate_to_aioice(candidate_from_sdp(line))
            await connection.add_remote_candidate(candidate)
        # With no candidate at all (Chromium gathers none for a restart on an unchanged
        # network) the checks still meet: the gateway learns the client's address from the
        # client's own checks (peer-reflexive). Saying "no more candidates" to aioice then
        # would fail the restart at once, before any check arrives.
        if remote.ended and connection.remote_candidates:
            await connection.add_remote_candidate(None)
        return len(remote.candidates)

    async def _run(self) -> None:
        try:
            async with asyncio.timeout(self._timeout_s):
                await self.connection.connect()
        except (ConnectionError, TimeoutError) as exc:
            log.info("webrtc: ICE restart failed (%s); the old path stays", exc or "timeout")
            self._outcomes["failed"] = self._outcomes.get("failed", 0) + 1
            await self._discard()
        else:
            await self._switch()
        finally:
            self.done.set()

    async def _switch(self) -> None:
        ice, new = self._ice, self.connection
        old = ice._connection
        ice._connection, ice._recv, ice._send = new, new.recv, new.send
        # Closing the old connection wakes its receivers with None: not DTLS's queue.
        old._queue = asyncio.Queue()
        # aiortc's monitor marks the transport failed when the connection it watches closes:
        # watch the new one instead.
        monitor = getattr(ice, _MONITOR)
        if monitor is not None:
            monitor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await monitor
        setattr(ice, _MONITOR, asyncio.ensure_future(ice._monitor()))
        self.switched = True
        self._outcomes["switched"] = self._outcomes.get("switched", 0) + 1
        with contextlib.suppress(Exception):
            await old.close()
        log.info("webrtc: ICE restarted")

    async def _discard(self) -> None:
        # Its datagrams must not reach DTLS's queue once it is abandoned.
        self.connection._queue = asyncio.Queue()
        with contextlib.suppress(Exception):
            await self.connection.close()

    async def aclose(self) -> None:
        """Abandon the restart (the peer closes, or the client restarted again)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if not self.switched:
            await self._discard()
        self.done.set()
