"""`Gateway.list_streams` (``GET /v1/streams``): a caller sees its own tenant's streams that it
may read, newest first, by prefix and up to a limit; what a policy keeps from it is left out
without being recorded as a refusal, and reading it directly is still refused (and audited)."""

from __future__ import annotations

import httpx
import pytest

import airlane
from airlane.security import Action, ApiKeyPolicy, PermissionDenied, Principal
from tests.asgi_server import serving


class NoSecrets(ApiKeyPolicy):
    """API keys, and nobody reads streams under ``secret/``."""

    def authorize(self, principal: Principal, action: Action, stream_id: str) -> None:
        super().authorize(principal, action, stream_id)
        if action is Action.SUBSCRIBE and stream_id.startswith("secret/"):
            raise PermissionDenied(f"{stream_id} is secret")


def make_gateway() -> airlane.Gateway:
    policy = NoSecrets({"k-alice": "alice@acme", "k-bob": "bob@globex"})
    return airlane.Gateway(airlane.MemoryHub(), airlane.SyntheticBackend(), security=policy)


async def test_each_caller_sees_its_own_readable_streams_newest_first() -> None:
    gateway = make_gateway()
    alice, bob = gateway.authenticate("k-alice"), gateway.authenticate("k-bob")
    for name in ("agents/1", "agents/2", "secret/plans", "notes"):
        await gateway.create_named(alice, name)
    await gateway.create_named(bob, "agents/1")  # the same name, another tenant
    listed = [info.stream_id for info in await gateway.list_streams(alice)]
    assert listed == ["notes", "agents/2", "agents/1"]
    assert sum(gateway.audit.counts.values()) == 0  # leaving one out refused nothing
    assert [i.stream_id for i in await gateway.list_streams(bob)] == ["agents/1"]
    assert [i.stream_id for i in await gateway.list_streams(alice, prefix="agents/")] == [
        "agents/2", "agents/1"]  # fmt: skip
    assert len(await gateway.list_streams(alice, limit=1)) == 1
    with pytest.raises(PermissionDenied):
        await gateway.info(alice, "secret/plans")
    assert gateway.audit.counts[("deny", "permission_denied")] == 1


async def test_over_http_with_its_bounds() -> None:
    gateway = make_gateway()
    alice = gateway.authenticate("k-alice")
    await gateway.create_named(alice, "agents/1")
    app = airlane.create_app(gateway)
    async with serving(app) as served, httpx.AsyncClient(base_url=served.url) as http:
        headers = {"authorization": "Bearer k-alice"}
        answer = await http.get("/v1/streams", headers=headers)
        assert answer.status_code == 200
        (only,) = answer.json()["streams"]
        assert only["id"] == "agents/1" and only["subscribers"] == 0
        for bad in ("0", "1001", "x"):
            refused = await http.get(f"/v1/streams?limit={bad}", headers=headers)
            assert refused.status_code == 400 and refused.json()["error"]["param"] == "limit"
        assert (await http.get("/v1/streams")).status_code == 401
        empty = await http.get("/v1/streams?prefix=nothing/", headers=headers)
        assert empty.json() == {"streams": []}
