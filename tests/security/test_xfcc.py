"""Behind a mesh: the client identity in ``x-forwarded-client-cert``, believed only from a
trusted proxy.

The parser against Envoy's format (several proxies, quoted values holding ``,`` ``;`` ``=``,
repeated URI and DNS, URL-encoded certificates); then real gateways that require API keys:
one that trusts 127.0.0.1 (the test plays the mesh's proxy) takes the forwarded SPIFFE ID as
the client, over HTTP and gRPC; one that trusts another address ignores the same header and
asks for a key, and says so in its log.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest

from airlane.security.xfcc import BadXfcc, ForwardedIdentity, parse_xfcc
from airlane.v1 import service_pb2
from tests.grpc_transport.conftest import airlane_stub
from tests.servers import ServerProcess, run_server

TRAINER = "spiffe://example.org/ai-trainer"
# What Envoy writes for a client it verified (By: the proxy's own identity).
FROM_ENVOY = (
    "By=spiffe://example.org/envoy;Hash=468ed33be74eee6556d90c0149c1309e9ba61d6425303443c0748a"
    '02dd8de688;Subject="CN=trainer,OU=ml;O=Example, Inc.";URI=' + TRAINER + ";DNS=trainer.local"
)
pytestmark = pytest.mark.timeout(90)


def test_envoy_elements_are_read_field_by_field() -> None:
    header = f'By=spiffe://a/edge;URI=spiffe://a/web,{FROM_ENVOY};DNS="x,y.example"'
    first, last = parse_xfcc(header)
    assert first.by == ("spiffe://a/edge",) and first.uris == ("spiffe://a/web",)
    assert last.subject == "CN=trainer,OU=ml;O=Example, Inc."
    assert last.uris == (TRAINER,) and last.dns == ("trainer.local", "x,y.example")
    assert last.hash is not None and last.hash.startswith("468ed")
    escaped = parse_xfcc('Subject="CN=\\"quoted\\"";URI=spiffe://a/b;Cert="-----BEGIN%20X"')
    assert escaped[0].subject == 'CN="quoted"' and escaped[0].cert == "-----BEGIN%20X"
    for bad in ("", "URI", 'URI="open', "URI=a,,URI=b", "=x"):
        with pytest.raises(BadXfcc):
            parse_xfcc(bad)


def test_only_trusted_proxies_are_believed_and_the_nearest_element_counts() -> None:
    forwarded = ForwardedIdentity(["10.0.0.0/8", "::1"], ["example.org"])
    two_hops = f"URI=spiffe://example.org/outer-client,{FROM_ENVOY}"
    assert forwarded.identity("10.1.2.3", two_hops).spiffe_id == TRAINER  # type: ignore[union-attr]
    assert forwarded.identity("::1", FROM_ENVOY).spiffe_id == TRAINER  # type: ignore[union-attr]
    assert forwarded.identity("192.168.1.5", FROM_ENVOY) is None
    assert forwarded.ignored == 1
    assert forwarded.identity("10.1.2.3", None) is None
    other = forwarded.identity("10.1.2.3", "URI=spiffe://other.org/x")
    assert other is not None and other.spiffe_id is None and "other.org" in (other.error or "")
    broken = forwarded.identity("10.1.2.3", 'URI="open')
    assert broken is not None and broken.spiffe_id is None
    with pytest.raises(ValueError, match="trusted proxy"):
        ForwardedIdentity(["not-an-address"])


@pytest.fixture(scope="module")
def log_file() -> Iterator[Path]:
    with tempfile.TemporaryDirectory() as tmp:
        yield Path(tmp) / "gateway.log"


@pytest.fixture(scope="module")
def behind_mesh() -> Iterator[ServerProcess]:
    args = ["--api-key", "alice=sk-a", "--trusted-proxy", "127.0.0.1", "--trust-domain",
            "example.org"]  # fmt: skip
    with run_server(*args) as running:
        yield running


@pytest.fixture(scope="module")
def not_behind_mesh(log_file: Path) -> Iterator[ServerProcess]:
    with (
        log_file.open("w") as log,
        run_server("--api-key", "alice=sk-a", "--trusted-proxy", "10.9.9.9", stderr=log) as running,
    ):
        yield running


def xfcc(value: str) -> dict[str, str]:
    return {"x-forwarded-client-cert": value}


async def test_a_trusted_proxy_names_the_client(behind_mesh: ServerProcess) -> None:
    async with httpx.AsyncClient(base_url=behind_mesh.url, timeout=20) as http:
        body = {"model": "synthetic", "messages": [{"role": "user", "content": "hi"}]}
        created = await http.post("/v1/streams", json=body, headers=xfcc(FROM_ENVOY))
        assert created.status_code == 201, created.text
        stream = created.json()["id"]
        events = f"/v1/streams/{stream}/events"
        async with http.stream("GET", events, headers=xfcc(FROM_ENVOY)) as response:
            await response.aread()
        info = await http.get(f"/v1/streams/{stream}", headers=xfcc(FROM_ENVOY))
        assert TRAINER in json.dumps(info.json()["usage"])
        for bad in (
            "URI=spiffe://other.org/ai-trainer",
            'URI="open',
            f"URI={TRAINER};URI=spiffe://example.org/b",
        ):
            refused = await http.get(f"/v1/streams/{stream}", headers=xfcc(bad))
            assert refused.status_code == 401, (bad, refused.text)
            assert "x-forwarded-client-cert" in refused.text or "client certificate" in refused.text
    assert behind_mesh.grpc is not None
    async with grpc.aio.insecure_channel(behind_mesh.grpc) as channel:
        stub = airlane_stub(channel)
        info_request = service_pb2.InfoRequest(stream_id=stream)
        reply = await stub.Info(info_request, metadata=tuple(xfcc(FROM_ENVOY).items()))
        assert reply.id == stream
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.Info(info_request, metadata=tuple(xfcc("URI=spiffe://other.org/x").items()))
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    # gRPC-Web and Connect, on the HTTP port: the same forwarded identity.
    async with httpx.AsyncClient(base_url=behind_mesh.url, timeout=20) as http:
        for header, status in ((FROM_ENVOY, 200), ("URI=spiffe://other.org/x", 401)):
            answer = await http.post(
                "/airlane.v1.Airlane/Info",
                json={"streamId": stream},
                headers={"connect-protocol-version": "1", **xfcc(header)},
            )
            assert answer.status_code == status, (header, answer.text)


async def test_a_header_from_anyone_else_is_ignored_and_logged(
    not_behind_mesh: ServerProcess, log_file: Path
) -> None:
    async with httpx.AsyncClient(base_url=not_behind_mesh.url, timeout=20) as http:
        forged = await http.get("/v1/streams/x", headers=xfcc(FROM_ENVOY))
        assert forged.status_code == 401  # no key: the forged identity counts for nothing
        assert forged.json()["error"]["code"] == "unauthenticated"
        keyed = await http.get(
            "/v1/streams/x", headers={**xfcc(FROM_ENVOY), "authorization": "Bearer sk-a"}
        )
        assert keyed.status_code == 404  # the key decides; the header changed nothing
    assert not_behind_mesh.grpc is not None
    async with grpc.aio.insecure_channel(not_behind_mesh.grpc) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await airlane_stub(channel).Info(
                service_pb2.InfoRequest(stream_id="x"), metadata=tuple(xfcc(FROM_ENVOY).items())
            )
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
    logged = log_file.read_text()
    assert "x-forwarded-client-cert from 127.0.0.1 ignored" in logged
    assert logged.count("ignored: not a trusted proxy") == 1  # rate-limited, not per request
