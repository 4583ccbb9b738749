"""An AIRC connection closed for a protocol error is freed when it closes, not at the next
full garbage collection: nothing of its session is left in a reference cycle."""

from __future__ import annotations

import asyncio
import gc
import socket

from airlane.backends.synthetic import SyntheticBackend
from airlane.gateway import Gateway
from airlane.hub import MemoryHub
from airlane.transports.airc.tcp import AircTcpServer


async def test_a_refused_connection_leaves_no_cycle() -> None:
    gateway = Gateway(MemoryHub(), SyntheticBackend())
    await gateway.start()
    server = AircTcpServer(gateway)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    await server.start(sock)
    gc.collect()
    gc.disable()
    try:
        for _ in range(10):
            reader, writer = await asyncio.open_connection(*server.address)
            writer.write(b"NOT-AIRC" * 8)  # a bad magic: GOAWAY, then the socket closes
            async with asyncio.timeout(10):
                await reader.read()
            writer.close()
            await writer.wait_closed()
        async with asyncio.timeout(10):
            while server.sessions:
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)  # the sessions' release tasks
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        kinds = {type(item).__name__ for item in gc.garbage}
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
        await server.aclose()
        await gateway.aclose()
    left = kinds & {"AircSession", "AircConnection", "FrameDecoder", "AircProtocolError"}
    assert not left, left
