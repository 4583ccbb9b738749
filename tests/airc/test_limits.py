"""The two bounds an AIRC session keeps on what one client makes it hold, each produced for
real: requests in progress at once (``max_requests``, held by a paused broker), and replies a
client leaves unacknowledged on the signalling stream (``GOAWAY FLOW_CONTROL``)."""

from __future__ import annotations

import asyncio
import signal
import socket
from collections.abc import AsyncIterator

import pytest

from airlane.backends.synthetic import SyntheticBackend, SyntheticConfig
from airlane.client import AircClient, RequestRejected
from airlane.gateway import Gateway
from airlane.hub import MemoryHub
from airlane.hub.jetstream import jetstream_hub
from airlane.transports.airc import AircServerConfig, AircTcpServer
from airlane.wire.airc import (
    SIGNALLING_STREAM,
    AircConfig,
    CancelStream,
    ErrorCode,
    Flags,
    Frame,
    encode_frame,
    encode_signal,
)
from tests.hub.test_jetstream import hub_config
from tests.natsserver import NatsServer

from .test_bad_input import goaway_in

REQUEST = {"model": "m", "messages": [{"role": "user", "content": "limits"}], "max_tokens": 8}


async def test_past_max_requests_a_request_is_refused_and_those_in_progress_finish(
    nats_server: NatsServer,
) -> None:
    """With the broker stopped (SIGSTOP), a generation's set-up waits for it: two requests
    are in progress, and a third on the same connection is refused ``too_many_requests`` at
    once instead of being held too. Once the broker goes on, both finish whole, and the
    connection takes new requests."""
    hub = jetstream_hub(hub_config(nats_server, node_timeout_s=30.0))
    await hub.start()
    gateway = Gateway(hub, SyntheticBackend(SyntheticConfig(speed=0)))
    await gateway.start()
    airc = AircTcpServer(gateway, AircServerConfig(max_requests=2))
    sock = socket.create_server(("127.0.0.1", 0))
    sock.setblocking(False)
    await airc.start(sock)
    process = nats_server.process
    assert process is not None
    try:
        async with await AircClient.tcp(*airc.address) as client:
            await read_whole(await client.generate(REQUEST))  # the hub is up and serving
            process.send_signal(signal.SIGSTOP)
            try:
                held = [asyncio.create_task(client.generate(REQUEST)) for _ in range(2)]
                await asyncio.sleep(0.3)  # both are in progress, waiting for the broker
                assert not any(task.done() for task in held)
                with pytest.raises(RequestRejected) as refused:
                    await asyncio.wait_for(client.generate(REQUEST), 5)
                assert refused.value.code == "too_many_requests"
                assert "at most 2 requests" in refused.value.message
            finally:
                process.send_signal(signal.SIGCONT)
            streams = await asyncio.wait_for(asyncio.gather(*held), 30)
            for stream in streams:
                await read_whole(stream)
            await read_whole(await asyncio.wait_for(client.generate(REQUEST), 30))
    finally:
        await airc.aclose()
        await gateway.aclose()
        await hub.aclose()


async def read_whole(stream: AsyncIterator[object]) -> None:
    events = [event async for event in stream]
    assert getattr(events[-1], "kind", None) == "done"


async def test_a_client_that_never_acknowledges_replies_is_ended_with_flow_control() -> None:
    """A raw client sends requests on stream 255 and never acknowledges the replies: the
    replies it leaves unread fill the connection's send queue (here 32 KiB), and the
    gateway ends the connection with ``GOAWAY FLOW_CONTROL`` instead of holding more for it
    (or raising). Every request is cheap and answered at once, so ``max_requests`` never
    holds it back: only the queue bound does. Another client is served on."""
    gateway = Gateway(MemoryHub(), SyntheticBackend(SyntheticConfig(speed=0)))
    await gateway.start()
    config = AircServerConfig(connection=AircConfig(max_queued_bytes=32 << 10))
    airc = AircTcpServer(gateway, config)
    sock = socket.create_server(("127.0.0.1", 0))
    sock.setblocking(False)
    await airc.start(sock)
    try:
        reader, writer = await asyncio.open_connection(*airc.address)
        try:
            # Each CANCEL_STREAM of an unknown stream is answered at once (an ERROR or a
            # Cancelled, tens of bytes); 64 leave in the send window, the rest queue up.
            requests = [
                encode_frame(
                    Frame(
                        SIGNALLING_STREAM,
                        seq,
                        0,
                        encode_signal(CancelStream(seq, f"never-{seq:05d}" + "x" * 40)),
                        Flags.EOM | Flags.PRIORITY,
                    )
                )
                for seq in range(1, 4001)
            ]
            writer.write(b"".join(requests))
            await writer.drain()
            received = await asyncio.wait_for(reader.read(), 20)  # until the gateway closes
        finally:
            writer.close()
        goaway = goaway_in(received)
        assert goaway.code is ErrorCode.FLOW_CONTROL
        assert "not acknowledged" in goaway.reason
        async with await AircClient.tcp(*airc.address) as client:
            await read_whole(await client.generate(REQUEST))
    finally:
        await airc.aclose()
        await gateway.aclose()
