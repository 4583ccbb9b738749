"""Artifacts per tenant, on a real gateway serving a real store.

The store holds a shared artifact ``base`` (at its root), acme's own ``tuned`` and acme's own
``base`` (under ``@acme/``). Acme sees its own ``base`` (it hides the shared one) and
``tuned``; beta sees only the shared ``base`` and cannot reach acme's artifacts by any name.
Announcements follow: acme's ``artifacts/tuned`` stream is acme's; beta reads the shared
``artifacts/base``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest

from airlane.artifacts.packer import pack
from tests.artifacts.support import checkpoint
from tests.servers import ServerProcess, run_server

ACME, BETA = "sk-acme-1", "sk-beta-2"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("artifacts")
    store = root / "store"
    small = {"layers": 1, "hidden": 32}
    pack([checkpoint(root / "a.safetensors", seed=1, **small)], store, name="base", version="1")
    acme = store / "@acme"
    for name, seed in (("tuned", 2), ("base", 3)):
        source = checkpoint(root / f"{name}.safetensors", seed=seed, **small)
        pack([source], acme, name=name, version="7")
    keys = ["--api-key", f"ann@acme={ACME}", "--api-key", f"bo@beta={BETA}"]
    with run_server("--artifacts", str(store), *keys) as running:
        yield running


def client(server: ServerProcess, key: str) -> httpx.Client:
    return httpx.Client(base_url=server.url, headers={"authorization": f"Bearer {key}"}, timeout=20)


def test_a_tenant_lists_its_own_and_the_shared_artifacts(server: ServerProcess) -> None:
    with client(server, ACME) as acme, client(server, BETA) as beta:
        mine = {
            a["name"]: (a["latest"], a["shared"])
            for a in acme.get("/v1/artifacts").json()["artifacts"]
        }
        theirs = {
            a["name"]: (a["latest"], a["shared"])
            for a in beta.get("/v1/artifacts").json()["artifacts"]
        }
    assert mine == {"base": ("7", False), "tuned": ("7", False)}  # its own base hides the shared
    assert theirs == {"base": ("1", True)}


def test_another_tenant_s_artifact_is_not_there(server: ServerProcess) -> None:
    with client(server, ACME) as acme, client(server, BETA) as beta:
        own = acme.get("/v1/artifacts/tuned/latest/manifest.json")
        assert own.status_code == 200 and own.json()["version"] == "7"
        for path in ("/v1/artifacts/tuned", "/v1/artifacts/tuned/7/manifest.json"):
            missing = beta.get(path)
            assert missing.status_code == 404, (path, missing.text)
        for name in ("@acme", "%40acme", ".."):
            refused = beta.get(f"/v1/artifacts/{name}")
            assert refused.status_code in (404, 422), (name, refused.text)
            assert "tuned" not in refused.text
        assert beta.get("/v1/artifacts/base/latest/manifest.json").json()["version"] == "1"
        assert acme.get("/v1/artifacts/base/latest/manifest.json").json()["version"] == "7"


def announced(http: httpx.Client, name: str) -> str | int:
    """The version the first announcement on ``artifacts/<name>`` names (SSE, read until
    that event), or the status code that refused the read."""
    with http.stream("GET", f"/v1/streams/artifacts/{name}/events") as events:
        if events.status_code != 200:
            return events.status_code
        for line in events.iter_lines():
            if line.startswith("data:") and "artifact.version" in line:
                return str(json.loads(line[5:])["payload"]["version"])
    raise AssertionError("the stream ended without an announcement")


def test_announcements_follow_the_artifact(server: ServerProcess) -> None:
    with client(server, ACME) as acme, client(server, BETA) as beta:
        assert announced(acme, "tuned") == "7"
        assert announced(beta, "tuned") == 404
        assert announced(beta, "base") == "1"  # the shared artifact's
        assert announced(acme, "base") == "7"  # its own
