"""AIRC and gRPC ask the loop's admission before they set up a generation, as HTTP does: a
new stream waits while paced work is due, then streams as usual. Real servers and clients in
this process (the admission belongs to the event loop they share)."""

from __future__ import annotations

import socket

import grpc

from airlane.backends.synthetic import SyntheticBackend, SyntheticConfig
from airlane.client.airc import AircClient
from airlane.gateway import Gateway
from airlane.hub import MemoryHub
from airlane.runtime.admission import Admission
from airlane.transports.airc import AircTcpServer
from airlane.transports.grpc import GrpcServer
from airlane.v1 import events_pb2
from tests.grpc_transport.conftest import SHORT_REQUEST, airlane_stub, generate_request, read_all

QUICK = SyntheticConfig(ttft_ms=0, itl_ms=0, itl_jitter_ms=0)


class AlwaysDue:
    """A deadline source with work due for as long as the test holds it."""

    def overdue(self, now_ns: int) -> bool:
        return True


async def test_an_airc_generation_waits_for_admission_then_streams() -> None:
    gateway = Gateway(MemoryHub(), SyntheticBackend(QUICK))
    await gateway.start()
    server = AircTcpServer(gateway)
    sock = socket.create_server(("127.0.0.1", 0))
    await server.start(sock)
    admission = Admission.for_loop()
    source = AlwaysDue()
    admission.register(source)
    before = admission.deferred
    try:
        host, port = server.address
        async with await AircClient.tcp(host, port) as client:
            stream = await client.generate(
                {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
            )
            events = [event async for event in stream]
        assert events[-1].kind == "done"
        assert admission.deferred == before + 1
    finally:
        del source
        await server.aclose()
        await gateway.aclose()


async def test_a_grpc_generate_waits_for_admission_then_streams() -> None:
    gateway = Gateway(MemoryHub(), SyntheticBackend(QUICK))
    await gateway.start()
    server = GrpcServer(gateway)
    port = await server.start("127.0.0.1", 0)
    admission = Admission.for_loop()
    source = AlwaysDue()
    admission.register(source)
    before = admission.deferred
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = airlane_stub(channel).Generate(generate_request(SHORT_REQUEST))
            events = await read_all(call)
        assert events[-1].event.kind == events_pb2.KIND_DONE
        assert admission.deferred == before + 1
    finally:
        del source
        await server.aclose(0.5)
        await gateway.aclose()
