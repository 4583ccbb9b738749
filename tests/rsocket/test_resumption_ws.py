"""RSocket resumption over the WebSocket transport (docs/rsocket.md, "Resumption"): "A
`RESUME` with the token, on a TCP or WebSocket connection to the same node, gets `RESUME_OK`,
then every frame the client had not received; the client sends again what the server had not,
and every request goes on, with nothing lost or repeated."

`test_resumption.py` checks this over RSocket/TCP with Airlane's own client, which speaks TCP
only; here a bare peer speaks the protocol over ``ws://.../v1/rsocket`` (one frame per binary
message, no length prefix) with the ``websockets`` library and Airlane's frame codec, doing by
hand what a resuming client does: count positions, keep what it sent until the server's
KEEPALIVE acknowledges it, and send RESUME with both positions on a new socket."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from websockets.asyncio.client import ClientConnection, connect

from airlane.wire.rsocket import Frame, FrameType, decode_frame, encode_frame
from airlane.wire.rsocket.frames import FLAG_COMPLETE, FLAG_NEXT, FLAG_RESPOND, resumable
from tests.client.conftest import PACED_SYNTHETIC
from tests.rsocket.conftest import chat
from tests.rsocket.raw import metadata, setup_frame
from tests.servers import ServerProcess, run_server

pytestmark = pytest.mark.timeout(60)

UNBOUNDED = (1 << 31) - 1
CUT_AFTER = 10
"""Events read before the socket is cut."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A gateway of its own (about 2 ms per token) whose log is kept: a resume must leave no
    traceback behind."""
    log_file: Path = tmp_path_factory.mktemp("log") / "server.log"
    with log_file.open("w") as log, run_server(config=PACED_SYNTHETIC, stderr=log) as running:
        yield running
    assert "Traceback" not in log_file.read_text()


def ws_url(server: ServerProcess) -> str:
    return server.url.replace("http://", "ws://") + "/v1/rsocket"


class WsPeer:
    """One RSocket session over WebSocket sockets, one socket at a time: positions counted as
    the protocol counts them (resumable frames, by size), sent frames kept until
    acknowledged."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.token = secrets.token_bytes(16)  # at least 16 bytes: the server refuses less
        self.socket: ClientConnection | None = None
        self.sent = 0  # bytes of resumable frames sent
        self.received = 0  # bytes of resumable frames received
        self.kept: list[tuple[int, bytes]] = []  # (end position, frame) not acknowledged

    async def open(self, first: Frame) -> None:
        self.socket = await asyncio.wait_for(connect(self.url), 5)
        await self.socket.send(encode_frame(first))

    async def send(self, frame: Frame, *, lost: bool = False) -> None:
        """Send ``frame``; with ``lost``, count and keep it but never write it, as a frame
        written into a connection that is dying never arrives."""
        encoded = encode_frame(frame)
        if resumable(frame.type, frame.stream_id):
            self.sent += len(encoded)
            self.kept.append((self.sent, encoded))
        if not lost:
            assert self.socket is not None
            await self.socket.send(encoded)

    def acknowledged(self, position: int) -> None:
        self.kept = [(end, encoded) for end, encoded in self.kept if end > position]

    async def next(self, timeout: float = 5.0) -> Frame:
        """The next frame (a TimeoutError if none comes: a stalled stream fails the test)."""
        assert self.socket is not None
        message = await asyncio.wait_for(self.socket.recv(), timeout)
        assert isinstance(message, bytes), f"a text message on /v1/rsocket: {message!r:.80}"
        frame = decode_frame(message)
        if resumable(frame.type, frame.stream_id):
            self.received += frame.size
        if frame.type is FrameType.KEEPALIVE:  # the server's position: let go of that much
            self.acknowledged(frame.position)
        return frame

    def cut(self) -> None:
        """Drop the socket as a network fault would: no WebSocket close, no RSocket ERROR."""
        assert self.socket is not None
        self.socket.transport.abort()

    async def resume(self) -> Frame:
        """RESUME on a new socket with both positions; what the server answers. After
        RESUME_OK, whatever it says it had not received is sent again."""
        oldest = self.kept[0][0] - len(self.kept[0][1]) if self.kept else self.sent
        await self.open(Frame(FrameType.RESUME, resume_token=self.token,
                              position=self.received, first_position=oldest))  # fmt: skip
        answer = await self.next()
        if answer.type is FrameType.RESUME_OK:
            self.acknowledged(answer.position)
            assert self.socket is not None
            for _, encoded in self.kept:
                await self.socket.send(encoded)
        return answer

    async def answer(self, stream_id: int) -> Any:
        """The PAYLOAD answering request-response ``stream_id``, decoded."""
        for _ in range(10):  # past KEEPALIVE answers, if any
            frame = await self.next()
            if frame.type is not FrameType.KEEPALIVE:
                assert frame.type is FrameType.PAYLOAD and frame.stream_id == stream_id, frame
                return orjson.loads(frame.data)
        pytest.fail("no answer within 10 frames")

    async def close(self) -> None:
        if self.socket is not None:
            await asyncio.wait_for(self.socket.close(), 5)


def request(kind: FrameType, stream_id: int, route: str, body: Any, n: int = 0) -> Frame:
    return Frame(kind, stream_id, metadata=metadata(route), data=orjson.dumps(body), request_n=n)


async def read_across_a_cut(peer: WsPeer, route: str, body: Any, *, headers: int = 0
                            ) -> list[dict[str, Any]]:  # fmt: skip
    """Request-stream ``route`` on stream 1, cut the socket after `CUT_AFTER` events, resume,
    and read to the end; every payload, decoded (``headers``: payloads before the events).

    The first grant covers only two events past the cut, and the grant for the rest is lost
    with the dying socket: the stream can end only if the resume sends it again."""
    await peer.open(replace(setup_frame(), resume_token=peer.token))
    await peer.send(request(FrameType.REQUEST_STREAM, 1, route, body, n=headers + CUT_AFTER + 2))
    payloads: list[dict[str, Any]] = []
    cut = False
    for _ in range(1000):  # bounded: the streams here have well under 1,000 payloads
        frame = await peer.next()
        if frame.type is FrameType.KEEPALIVE:
            continue
        assert frame.stream_id == 1 and frame.type is FrameType.PAYLOAD, frame
        if frame.has(FLAG_NEXT):
            payloads.append(orjson.loads(frame.data))
        if frame.has(FLAG_COMPLETE):
            break
        events = len(payloads) - headers
        if events == CUT_AFTER // 2:
            # Ask the server for its position: it lets go of what it kept for us, and we of
            # what we sent, so the RESUME's positions are not both 0.
            await peer.send(Frame(FrameType.KEEPALIVE, flags=FLAG_RESPOND,
                                  position=peer.received))  # fmt: skip
        if events == CUT_AFTER and not cut:
            await peer.send(Frame(FrameType.REQUEST_N, 1, request_n=UNBOUNDED), lost=True)
            peer.cut()
            cut = True
            answer = await peer.resume()
            assert answer.type is FrameType.RESUME_OK, (
                f"RESUME over WebSocket answered {answer.type.name} code={answer.error_code!r} "
                f"{answer.data!r:.300}"
            )
            # The server says it lacks exactly the lost grant: one frame to send again.
            assert len(peer.kept) == 1, f"server position {answer.position}, sent {peer.sent}"
    else:
        pytest.fail("the stream did not complete within 1,000 frames")
    assert cut, "the stream ended before the cut"
    assert len(payloads) > headers + CUT_AFTER + 2, "nothing arrived past the first grant"
    return payloads


async def test_a_cut_websocket_resumes_a_subscription_with_every_event_once(
    server: ServerProcess,
) -> None:
    # Message events are never merged (docs/streams.md): each of the 40 must arrive itself,
    # seq 1 to 41 with the done, none twice, none missing. The stream is all in the log, so
    # the server has sent the whole grant by the cut: what the dead socket lost must come
    # again from what the session kept.
    stream_id = f"ws-resume/{secrets.token_hex(4)}"
    published = [{"kind": "message", "payload": {"n": n}} for n in range(1, 41)]
    async with httpx.AsyncClient(timeout=10) as http:
        response = await http.post(f"{server.url}/v1/streams/{stream_id}/events",
                                   json={"events": [*published, {"kind": "done"}]})  # fmt: skip
        assert response.status_code in (200, 201), response.text
    peer = WsPeer(ws_url(server))
    events = await read_across_a_cut(peer, "streams.subscribe", {"stream_id": stream_id})
    assert [event["seq"] for event in events] == list(range(1, 42))
    assert [event["payload"] for event in events[:-1]] == [e["payload"] for e in published]
    assert events[-1]["kind"] == "done"
    # The resumed session goes on serving requests.
    await peer.send(
        request(FrameType.REQUEST_RESPONSE, 3, "streams.info", {"stream_id": stream_id})
    )
    info = await peer.answer(3)
    assert info["id"] == stream_id and info["last_seq"] == 41 and info["ended"], info
    await peer.close()


async def test_a_cut_websocket_resumes_a_generation_with_nothing_lost_or_repeated(
    server: ServerProcess,
) -> None:
    # A live generation (~2 ms per token) cut after 10 events: it goes on while the session
    # waits, detached, and its request must go on from where the credit stopped it. Deltas a
    # reader fell behind on come merged (docs/streams.md), so "every event once" is: seqs
    # only grow, and the texts join to exactly the stream's text, as its snapshot has it.
    peer = WsPeer(ws_url(server))
    started, *events = await read_across_a_cut(
        peer, "chat.completions", chat("resume me over a websocket", max_tokens=400), headers=1
    )
    assert started["kind"] == "started"
    seqs = [event["seq"] for event in events]
    assert seqs == sorted(set(seqs)) and seqs[0] == 1, f"a duplicate or a step back: {seqs}"
    assert events[-1]["kind"] == "done", events[-1]
    await peer.send(request(FrameType.REQUEST_RESPONSE, 3, "streams.snapshot",
                            {"stream_id": started["stream_id"]}))  # fmt: skip
    snapshot = await peer.answer(3)
    text = "".join(event["text"] for event in events if event["kind"] == "delta")
    assert text == snapshot["text"]["content"] != ""
    await peer.close()

    # The server kept serving: a new session over WebSocket streams a generation to its end.
    fresh = WsPeer(ws_url(server))
    await fresh.open(setup_frame())
    await fresh.send(request(FrameType.REQUEST_STREAM, 1, "chat.completions",
                             chat("and again", max_tokens=20), n=UNBOUNDED))  # fmt: skip
    last: dict[str, Any] = {}
    for _ in range(200):
        frame = await fresh.next()
        assert frame.type is FrameType.PAYLOAD, frame
        if frame.has(FLAG_NEXT):
            last = orjson.loads(frame.data)
        if frame.has(FLAG_COMPLETE):
            break
    else:
        pytest.fail("the fresh stream did not complete within 200 frames")
    assert last.get("kind") == "done", last
    await fresh.close()
