"""The public surfaces of `airlane.client` and `airlane.bench` are deliberate."""

from __future__ import annotations

import importlib
import inspect

import airlane.bench
import airlane.client

CLIENT_MODULES = [
    "accumulator", "airc", "chat", "errors", "events", "grpc", "retry", "rsocket", "sse",
    "subscription", "ws",
]  # fmt: skip
BENCH_MODULES = [
    "chunk", "config", "cpu", "plot", "report", "rsocket_load", "runner", "spawn", "sse_load",
    "sse_parser", "stats", "tally", "ws_load",
]  # fmt: skip


def test_client_exports() -> None:
    assert sorted(airlane.client.__all__) == [
        "AircClient",
        "AirlaneClient",
        "ChatDelta",
        "ClientClosed",
        "ClientError",
        "ConnectFailed",
        "ConnectionLost",
        "GatewayOverloaded",
        "GrpcClient",
        "H3Client",
        "H3Response",
        "ProtocolViolation",
        "RSocketClient",
        "RSocketStream",
        "RequestRejected",
        "ResumeFailed",
        "RetryPolicy",
        "StreamEvent",
        "StreamFailed",
        "StreamNotFound",
        "TextAccumulator",
        "WebTransportClient",
        "WsClient",
        "WsSubscription",
    ]


def test_bench_exports() -> None:
    assert sorted(airlane.bench.__all__) == [
        "BenchConfig",
        "GatewayStartError",
        "LocalGateway",
        "Percentiles",
        "TransportResult",
        "bench_document",
        "client_bound",
        "gateway_pid",
        "loopback_address",
        "pin_process",
        "pinning_plan",
        "results_table",
        "run_bench",
        "run_transport",
        "write_plot",
    ]


def test_every_exported_name_exists_and_is_documented() -> None:
    modules = [airlane.client, airlane.bench]
    modules += [importlib.import_module(f"airlane.client.{m}") for m in CLIENT_MODULES]
    modules += [importlib.import_module(f"airlane.bench.{m}") for m in BENCH_MODULES]
    for module in modules:
        assert module.__doc__, module.__name__
        for name in module.__all__:
            value = getattr(module, name)
            if inspect.isclass(value) or inspect.isfunction(value):
                assert value.__doc__, f"{module.__name__}.{name} has no docstring"


def test_every_client_error_is_a_client_error() -> None:
    from airlane.client import errors

    for name in errors.__all__:
        assert issubclass(getattr(errors, name), errors.ClientError)
