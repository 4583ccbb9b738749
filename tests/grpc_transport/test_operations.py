"""What operators and tools rely on: standard health checking, server reflection (grpcurl,
Postman), keepalive settings that tolerate pinging clients, and the end of open calls when the
gateway shuts down."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import AsyncIterator

import grpc
import httpx
import pytest
from google.protobuf import descriptor_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from airlane.transports.grpc import GrpcServerConfig
from airlane.transports.grpc.server import server_options
from airlane.v1 import events_pb2, service_pb2
from tests.client.conftest import PACED_SYNTHETIC
from tests.servers import run_server

from .conftest import SHORT_REQUEST, airlane_stub, generate_request, payload_of, read_all

PINGING_CLIENT = [
    ("grpc.keepalive_time_ms", 1000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
]
"""A client that pings its idle connection every second."""


async def test_health_check_says_serving(channel: grpc.aio.Channel) -> None:
    health = health_pb2_grpc.HealthStub(channel)
    for service in ("", "airlane.v1.Airlane"):
        answer = await health.Check(health_pb2.HealthCheckRequest(service=service))
        assert answer.status == health_pb2.HealthCheckResponse.SERVING, service
    with pytest.raises(grpc.aio.AioRpcError) as unknown:
        await health.Check(health_pb2.HealthCheckRequest(service="no.such.Service"))
    assert unknown.value.code() == grpc.StatusCode.NOT_FOUND


async def test_health_watch_says_serving_then_not_serving_at_shutdown() -> None:
    # Clients that health-check with Watch (a streaming call whose handler writes with
    # context.write) see SERVING at once, and NOT_SERVING when the gateway begins to stop,
    # before the call ends: not straight from SERVING to UNAVAILABLE.
    with run_server(config=PACED_SYNTHETIC) as gateway:
        assert gateway.grpc is not None
        async with grpc.aio.insecure_channel(gateway.grpc) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            watch = health.Watch(health_pb2.HealthCheckRequest(service=""))
            first = await asyncio.wait_for(watch.read(), 10)
            assert first.status == health_pb2.HealthCheckResponse.SERVING
            gateway.process.send_signal(signal.SIGINT)
            seen = []
            try:
                while (answer := await asyncio.wait_for(watch.read(), 15)) is not grpc.aio.EOF:
                    seen.append(answer.status)
            except grpc.aio.AioRpcError:
                pass  # the call may end with the server, after what it wrote
    assert health_pb2.HealthCheckResponse.NOT_SERVING in seen


async def test_reflection_lists_and_describes_the_services(channel: grpc.aio.Channel) -> None:
    reflection = reflection_pb2_grpc.ServerReflectionStub(channel)

    async def requests() -> AsyncIterator[reflection_pb2.ServerReflectionRequest]:
        yield reflection_pb2.ServerReflectionRequest(list_services="")
        yield reflection_pb2.ServerReflectionRequest(file_containing_symbol="airlane.v1.Airlane")

    listed, described = [answer async for answer in reflection.ServerReflectionInfo(requests())]
    names = {service.name for service in listed.list_services_response.service}
    assert {"airlane.v1.Airlane", "grpc.health.v1.Health"} <= names
    files = {
        proto.name: proto
        for proto in map(
            descriptor_pb2.FileDescriptorProto.FromString,
            described.file_descriptor_response.file_descriptor_proto,
        )
    }
    assert "airlane/v1/events.proto" in files  # its dependencies come along
    methods = {method.name for method in files["airlane/v1/service.proto"].service[0].method}
    assert methods == {
        "Generate",
        "Subscribe",
        "Publish",
        "PublishStream",
        "Cancel",
        "Info",
        "Session",
    }


def test_default_keepalive_accepts_clients_pinging_every_10_s() -> None:
    options = dict(server_options(GrpcServerConfig()))
    assert options["grpc.http2.min_recv_ping_interval_without_data_ms"] <= 10_000
    assert options["grpc.http2.min_ping_interval_without_data_ms"] <= 10_000
    assert options["grpc.keepalive_permit_without_calls"] == 1
    assert options["grpc.max_receive_message_length"] == 4 << 20
    assert options["grpc.max_send_message_length"] == 4 << 20


async def watch_idle(address: str, seconds: float) -> list[grpc.ChannelConnectivity]:
    """Connect a pinging client, make one call, stay idle for ``seconds``, then generate;
    return the connectivity states of the idle spell: the first, then each as the channel
    changes to it."""
    async with grpc.aio.insecure_channel(address, options=PINGING_CLIENT) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        await health.Check(health_pb2.HealthCheckRequest(service=""))
        states = [channel.get_state()]
        # The spell itself is real time: it is what the server's keepalive policy judges the
        # client's pings over, on its own clock.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                while True:
                    await channel.wait_for_state_change(states[-1])
                    states.append(channel.get_state())
        stub = airlane_stub(channel)
        events = await read_all(stub.Generate(generate_request(SHORT_REQUEST)))
        assert events[-1].event.kind == events_pb2.KIND_DONE
        return states


async def test_keepalive_min_ping_interval_is_configurable() -> None:
    tolerant = PACED_SYNTHETIC + "\n[grpc]\nkeepalive_min_ping_s = 0.5\n"
    with (
        run_server(config=tolerant) as configured,
        run_server(config=PACED_SYNTHETIC) as default,
    ):
        assert configured.grpc is not None and default.grpc is not None
        kept, dropped = await asyncio.gather(
            watch_idle(configured.grpc, 4.5), watch_idle(default.grpc, 4.5)
        )
    # Pings every second are within the configured 0.5 s: the connection stays up.
    assert set(kept) == {grpc.ChannelConnectivity.READY}
    # The control: the default (5 s) answers them with GOAWAY too_many_pings, and the channel
    # goes idle (it reconnects for the next call, as the Generate above shows).
    assert grpc.ChannelConnectivity.IDLE in dropped


async def test_shutdown_ends_an_open_subscribe_call() -> None:
    with run_server(config=PACED_SYNTHETIC) as gateway:
        assert gateway.grpc is not None
        # A named stream with no producer never ends on its own.
        published = httpx.post(
            f"{gateway.url}/v1/streams/agents/grpc-shutdown/events",
            json={"kind": "message", "payload": {"step": 1}},
            timeout=10,
        )
        assert published.status_code == 200, published.text
        async with grpc.aio.insecure_channel(gateway.grpc) as channel:
            stub = airlane_stub(channel)
            call = stub.Subscribe(service_pb2.SubscribeRequest(stream_id="agents/grpc-shutdown"))
            assert payload_of(await call.read()) == {"step": 1.0}
            started = time.monotonic()
            gateway.process.send_signal(signal.SIGINT)
            # No terminal event and no early notice: grpcio's graceful stop refuses new calls,
            # gives open ones 2 s (GrpcServer.aclose), then cancels them: UNAVAILABLE.
            with pytest.raises(grpc.aio.AioRpcError) as ended:
                async with asyncio.timeout(15):
                    await call.read()
            assert ended.value.code() == grpc.StatusCode.UNAVAILABLE
            assert 1.5 < time.monotonic() - started < 10
        assert gateway.process.wait(15) == 130  # as after Ctrl-C
