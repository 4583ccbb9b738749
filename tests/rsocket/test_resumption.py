"""Resumption with Airlane's own client (`airlane.client.RSocketClient`): a connection cut
mid-stream resumes on the same node with nothing lost or repeated; where the node cannot
resume (the client does not ask for it, or another node takes over after the first is killed)
the client sets up anew and subscribes from its last event, with nothing lost or repeated
either."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import httpx
import pytest

from airlane.client import RSocketClient, StreamEvent
from tests.cluster.test_nodes import node, start_generation
from tests.natsserver import NatsServer
from tests.rsocket.conftest import chat
from tests.servers import ServerProcess

pytestmark = pytest.mark.timeout(120)


class Relay:
    """A TCP relay to a target that the test can cut and point elsewhere."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = 0
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def cut(self) -> None:
        """Reset every relayed connection."""
        for writer in list(self._writers):
            writer.transport.abort()

    async def aclose(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            upstream_reader, upstream_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()
            return
        self._writers |= {writer, upstream_writer}
        try:
            await asyncio.gather(_pipe(reader, upstream_writer), _pipe(upstream_reader, writer))
        finally:
            self._writers -= {writer, upstream_writer}
            for end in (writer, upstream_writer):
                end.transport.abort()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError, ConnectionError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    writer.transport.abort()


@contextlib.asynccontextmanager
async def relayed(target: tuple[str, int]) -> AsyncIterator[Relay]:
    relay = Relay(target)
    await relay.start()
    try:
        yield relay
    finally:
        await relay.aclose()


def check_exact(events: list[StreamEvent], snapshot: dict[str, object]) -> None:
    """Seqs only grow, the text is the stream's, and the stream ended."""
    seqs = [event.seq for event in events]
    assert seqs == sorted(set(seqs)), f"a duplicate or a step back: {seqs}"
    text = "".join(event.text for event in events)
    assert text == snapshot["text"]["content"] != ""  # type: ignore[index]
    assert events[-1].kind == "done"


async def read_with_a_cut(stream: object, cut: object, after: int) -> list[StreamEvent]:
    events: list[StreamEvent] = []
    async with asyncio.timeout(60):
        async for event in stream:  # type: ignore[attr-defined]
            events.append(event)
            if len(events) == after:
                cut()  # type: ignore[operator]
    return events


async def test_a_cut_connection_resumes_on_the_same_node(gateway: ServerProcess) -> None:
    assert gateway.rsocket is not None
    client = await RSocketClient.tcp(*gateway.rsocket, keepalive_s=0.05, prefetch=32)
    async with client:
        stream = client.generate(chat("resume me", max_tokens=400))
        events = await read_with_a_cut(stream, client.drop_connection, after=10)
        snapshot = await client.call("streams.snapshot", {"stream_id": stream.stream_id})
    assert client.resumed == 1 and client.fell_back == 0
    check_exact(events, snapshot)


async def test_without_resumption_the_client_subscribes_from_its_last_event(
    gateway: ServerProcess,
) -> None:
    assert gateway.rsocket is not None
    client = await RSocketClient.tcp(*gateway.rsocket, resume=False, prefetch=32)
    async with client:
        stream = client.generate(chat("fall back", max_tokens=400))
        events = await read_with_a_cut(stream, client.drop_connection, after=10)
        snapshot = await client.call("streams.snapshot", {"stream_id": stream.stream_id})
    assert client.resumed == 0 and client.fell_back == 1
    check_exact(events, snapshot)


async def test_a_resume_on_another_node_falls_back_to_the_stream_log(
    nats_server: NatsServer,
) -> None:
    """A reader on node a of a generation produced on node b; node a is killed mid-stream and
    the relay now leads to b, which has never seen the session: RESUME is refused there, and
    the client continues from its last event through the shared stream log."""
    with node(nats_server, "a") as a, node(nats_server, "b") as b:
        assert a.rsocket is not None and b.rsocket is not None
        async with httpx.AsyncClient() as http:
            stream_id = await start_generation(http, b, tokens=150)
        async with relayed(a.rsocket) as relay:
            client = await RSocketClient.tcp("127.0.0.1", relay.port, prefetch=32)
            async with client:
                stream = await client.subscribe(stream_id)

                def move() -> None:
                    relay.target = b.rsocket  # type: ignore[assignment]
                    a.kill()  # the reader's node dies; its connection with it

                events = await read_with_a_cut(stream, move, after=10)
                snapshot = await client.call("streams.snapshot", {"stream_id": stream_id})
        assert client.fell_back == 1 and client.resumed == 0
        check_exact(events, snapshot)
