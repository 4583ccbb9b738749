"""What a node keeps for RSocket resumption is bounded (docs/rsocket.md, "Configuration"):
4 MiB of unacknowledged frames per session (`resume_buffer_bytes`), past which the session
cannot resume, and 1,000 dropped sessions at once (`max_detached`), past which a dropped
session is closed at once. Both with the defaults, on a gateway of their own (a thousand
sessions waiting for their RESUME would get in other tests' way)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import replace

import pytest

from airlane.transports.rsocket.config import RSocketServerConfig
from airlane.wire.rsocket import ErrorCode, Frame, FrameType
from airlane.wire.rsocket.frames import FLAG_COMPLETE
from tests.rsocket.raw import RawPeer, raw_peer, setup_frame
from tests.servers import ServerProcess, run_server

pytestmark = pytest.mark.timeout(120)

UNBOUNDED = (1 << 31) - 1
MIB = 1 << 20


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with run_server() as running:
        assert running.rsocket is not None
        yield running


def resumable(token: bytes) -> Frame:
    return replace(setup_frame(), resume_token=token)


def resume(token: bytes, position: int) -> Frame:
    return Frame(FrameType.RESUME, resume_token=token, position=position, first_position=0)


async def received_bytes(peer: RawPeer, *, frames: int = UNBOUNDED, at_least: int = 0) -> int:
    """Read ``frames`` of the stream's frames, or until ``at_least`` bytes of them came; the
    position resumption counts (PAYLOAD and a stream's ERROR, by size)."""
    position = 0
    for _ in range(frames):
        frame = await peer.next(10)
        assert frame is not None, "the server closed the connection"
        assert frame.type in (FrameType.PAYLOAD, FrameType.ERROR), frame
        position += frame.size
        if at_least and position >= at_least:
            break
    return position


async def test_a_session_that_acknowledges_nothing_past_4_mib_cannot_resume(
    server: ServerProcess,
) -> None:
    assert server.rsocket is not None
    assert RSocketServerConfig().resume_buffer_bytes == 4 * MIB
    # Within the bound: 800 chunks of ~1.2 KB, never acknowledged, then a cut: it resumes.
    token = b"within-the-bound-0001"
    async with raw_peer(*server.rsocket, resumable(token)) as peer:
        peer.request(FrameType.REQUEST_STREAM, 1, "loadtest.stream",
                     {"chunks": 800, "mode": "burst"}, n=800)  # fmt: skip
        position = await received_bytes(peer, frames=800)
    async with raw_peer(*server.rsocket, resume(token, position)) as again:
        frame = await again.next()
        assert frame is not None and frame.type is FrameType.RESUME_OK, frame
    # Past it: 5,000 chunks (~6 MB), none acknowledged: the session lost its right to resume.
    token = b"past-the-bound-000001"
    async with raw_peer(*server.rsocket, resumable(token)) as peer:
        peer.request(FrameType.REQUEST_STREAM, 1, "loadtest.stream",
                     {"chunks": 5000, "mode": "burst"}, n=UNBOUNDED)  # fmt: skip
        position = await received_bytes(peer, at_least=4 * MIB + MIB // 2)
    async with raw_peer(*server.rsocket, resume(token, position)) as late:
        frame = await late.next()
        assert frame is not None and frame.error_code == ErrorCode.REJECTED_RESUME, frame


async def test_at_most_1000_dropped_sessions_wait_for_their_resume(
    server: ServerProcess,
) -> None:
    assert server.rsocket is not None
    assert RSocketServerConfig().max_detached == 1000
    tokens = [b"detached-%012d" % n for n in range(1001)]

    async def set_up_and_drop(token: bytes) -> None:
        async with raw_peer(*server.rsocket, resumable(token)) as peer:  # type: ignore[misc]
            # One answer: the SETUP was taken before the connection drops.
            peer.request(FrameType.REQUEST_RESPONSE, 1, "streams.info", {"stream_id": "none"})
            assert await peer.next() is not None

    for token in tokens[:1000]:
        await set_up_and_drop(token)
    await asyncio.sleep(1.0)  # every drop seen: 1,000 sessions wait
    await set_up_and_drop(tokens[1000])
    await asyncio.sleep(0.5)
    async with raw_peer(*server.rsocket, resume(tokens[1000], 0)) as refused:
        frame = await refused.next()
        assert frame is not None and frame.error_code == ErrorCode.REJECTED_RESUME, frame
    async with raw_peer(*server.rsocket, resume(tokens[0], 0)) as first:
        frame = await first.next()
        assert frame is not None and frame.type is FrameType.RESUME_OK, frame


async def test_a_refused_resume_leaves_the_connected_session_serving(server: ServerProcess) -> None:
    # A RESUME naming a session whose connection is still up, with a position it cannot
    # serve (a stale or confused client), is refused; the session on its own connection goes
    # on. It used to be closed too: its stream stopped, with no ERROR and the socket open.
    assert server.rsocket is not None
    token = b"still-connected-00001"
    async with raw_peer(*server.rsocket, resumable(token)) as peer:
        peer.request(FrameType.REQUEST_STREAM, 1, "loadtest.stream",
                     {"chunks": 100, "mode": "paced", "interval_ms": 20}, n=UNBOUNDED)  # fmt: skip
        await received_bytes(peer, frames=5)
        async with raw_peer(*server.rsocket, resume(token, 1 << 40)) as stale:
            frame = await stale.next()
            assert frame is not None and frame.error_code == ErrorCode.REJECTED_RESUME, frame
        rest = []
        while not rest or not rest[-1].has(FLAG_COMPLETE):
            frame = await peer.next(5)
            assert frame is not None, "the server closed the connection"
            assert frame.type is FrameType.PAYLOAD, frame
            rest.append(frame)
        assert len(rest) >= 95 - 5  # every chunk after the first five, then the end
