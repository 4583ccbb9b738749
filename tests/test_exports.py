"""The public surface is deliberate: every package's ``__all__`` names exist and are exactly
what is documented here."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

import airlane

PACKAGES = [
    "airlane",
    "airlane.core",
    "airlane.wire",
    "airlane.hub",
    "airlane.hub.jetstream",
    "airlane.eventlog",
    "airlane.registry",
    "airlane.sync",
    "airlane.sync.yjs",
    "airlane.sync.rooms",
    "airlane.backends",
    "airlane.security",
    "airlane.gateway",
    "airlane.gateway.arbiter",
    "airlane.gateway.chat_request",
    "airlane.gateway.eventsourcing",
    "airlane.gateway.rules",
    "airlane.runtime.acceptor",
    "airlane.runtime.admission",
    "airlane.runtime.callcontext",
    "airlane.runtime.drains",
    "airlane.runtime.eager",
    "airlane.runtime.heartbeats",
    "airlane.runtime.lazy",
    "airlane.runtime.timers",
    "airlane.transports.http",
    "airlane.transports.http.webrtc",
    "airlane.transports.airc",
    "airlane.transports.grpc",
    "airlane.wire.airc",
    "airlane.client",
    "airlane.client.airc",
    "airlane.bench",
    "airlane.server",
    "airlane.server.address",
    "airlane.server.compose",
    "airlane.server.config",
    "airlane.server.fdtable",
    "airlane.server.gcpacer",
    "airlane.server.run",
    "airlane.artifacts",
    "airlane.v1.generate",
]


@pytest.mark.parametrize("name", PACKAGES)
def test_every_exported_name_exists_and_is_documented(name):
    module = importlib.import_module(name)
    assert module.__all__, f"{name} exports nothing"
    for attr in module.__all__:
        value = getattr(module, attr)
        if callable(value) and not attr.startswith("__"):
            assert value.__doc__, f"{name}.{attr} has no docstring"


def test_top_level_api():
    assert set(airlane.__all__) == {
        "AirlaneApp",
        "AirlaneError",
        "ApiKeyPolicy",
        "Backend",
        "BackendError",
        "Channel",
        "ErrorCode",
        "Event",
        "Gateway",
        "GatewayConfig",
        "GenerationRequest",
        "HttpConfig",
        "Hub",
        "Kind",
        "Lane",
        "MemoryHub",
        "OpenAIUpstreamBackend",
        "OrphanMode",
        "OrphanPolicy",
        "Position",
        "Principal",
        "Retention",
        "SyntheticBackend",
        "SyntheticConfig",
        "__version__",
        "create_app",
    }


def test_embedding_in_another_asgi_app_needs_only_the_public_api():
    gateway = airlane.Gateway(airlane.MemoryHub(), airlane.SyntheticBackend())
    app = airlane.create_app(gateway, airlane.HttpConfig(cors_origins=("*",)))
    assert callable(app)


def test_the_in_memory_default_does_not_load_the_nats_client():
    # NATS (and the aiohttp it pulls in) is for --hub nats://...: a CLI start or an embedding
    # app on the default should not pay for importing it.
    code = (
        "import sys, airlane, airlane.server, airlane.cli.main, airlane.eventlog, "
        "airlane.registry, airlane.hub.jetstream; print('nats' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "False"


def test_the_gateway_and_cli_load_no_artifact_machinery_until_asked():
    # numpy, xxhash, cryptography and safetensors are for `airlane artifacts` and a gateway
    # serving a store: `airlane --help` and a plain gateway do not pay for them.
    code = (
        "import sys, airlane, airlane.server, airlane.cli.main, airlane.artifacts; "
        "print(sorted(m for m in ('numpy', 'xxhash', 'cryptography', 'safetensors') "
        "if m in sys.modules))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "[]"


def _loaded_after(code: str, modules: tuple[str, ...]) -> list[str]:
    """Which of ``modules`` a fresh interpreter has loaded after running ``code``."""
    probe = (
        f"{code}\nimport json, sys\n"
        f"print(json.dumps(sorted(m for m in {modules!r} if m in sys.modules)))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    loaded: list[str] = json.loads(result.stdout)
    return loaded


SERVER_STACK = (
    "airlane.gateway",
    "airlane.server.compose",
    "airlane.server.run",
    "httptools",
    "grpc",
    "websockets",
    "httpx",
)


def test_the_package_re_exports_load_on_first_use():
    # `import airlane` (and so every `import airlane.<module>`) does not pay for the server.
    assert _loaded_after("import airlane", SERVER_STACK) == []
    assert _loaded_after("import airlane.core", SERVER_STACK) == []
    loaded = _loaded_after("from airlane import Gateway", SERVER_STACK)
    assert "airlane.gateway" in loaded
    # Every exported name is listed and resolves; an unknown one is an AttributeError.
    assert set(airlane.__all__) <= set(dir(airlane))
    for name in airlane.__all__:
        assert getattr(airlane, name) is not None
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        airlane.Nope  # noqa: B018 - the look-up is the test


def test_a_command_loads_only_what_it_runs():
    # `airlane logs ...` and `airlane --help` need neither the server, nor the benchmark's
    # load clients, nor the stream clients' transports.
    heavy = (*SERVER_STACK[:-1], "airlane.bench.runner", "airlane.client.sse", "airlane.client.ws")
    assert _loaded_after("import airlane.cli.main", heavy) == []


def test_a_client_loads_only_its_own_transport():
    transports = ("httpx", "websockets", "grpc")
    assert _loaded_after("import airlane.client", transports) == []
    assert _loaded_after("from airlane.client import AirlaneClient", transports) == ["httpx"]
    assert "websockets" in _loaded_after("from airlane.client import WsClient", transports)
    import airlane.client

    for name in airlane.client.__all__:
        assert getattr(airlane.client, name).__module__.startswith("airlane.client.")
