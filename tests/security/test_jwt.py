"""Bearer JWTs verified against a JWKS, on every wire, with the clients users use.

Keys of the three accepted kinds (RS256, ES256, EdDSA) sign tokens; a real gateway reads
their JWKS from a file, and another from a URL served by a real HTTP server, which then
rotates its keys. Good tokens are served as the principal and tenant their claims name (the
official ``openai`` SDK passes one as its api_key); expired, not-yet-valid, wrong-audience,
wrong-issuer, tampered, ``alg: none``, HMAC-with-the-public-key and unknown-key tokens are
refused as ``unauthenticated`` with the reason, over HTTP, WebSocket, gRPC and AIRC.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import http.server
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import httpx
import jwt
import pytest
import websockets
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

from airlane.client import RequestRejected
from airlane.client.airc import AircClient
from airlane.security.jwt import MIN_REFETCH_S
from airlane.v1 import service_pb2
from tests.grpc_transport.conftest import airlane_stub
from tests.servers import ServerProcess, run_server

pytestmark = pytest.mark.timeout(120)

AUDIENCE, ISSUER = "airlane", "https://login.example.org/"


@dataclass
class Signer:
    kid: str
    algorithm: str
    key: Any

    def jwk(self) -> dict[str, Any]:
        public = self.key.public_key()
        kind = {"RS256": RSAAlgorithm, "ES256": ECAlgorithm, "EdDSA": OKPAlgorithm}
        jwk = json.loads(kind[self.algorithm].to_jwk(public))
        return {**jwk, "kid": self.kid, "use": "sig", "alg": self.algorithm}

    def token(self, **claims: Any) -> str:
        now = int(time.time())
        body = {"sub": "alice", "aud": AUDIENCE, "iss": ISSUER, "iat": now, "exp": now + 300}
        body.update(claims)
        body = {k: v for k, v in body.items() if v is not None}
        return jwt.encode(body, self.key, algorithm=self.algorithm, headers={"kid": self.kid})


SIGNERS = {
    "RS256": Signer(
        "rsa-1", "RS256", rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ),
    "ES256": Signer("ec-1", "ES256", ec.generate_private_key(ec.SECP256R1())),
    "EdDSA": Signer("ed-1", "EdDSA", ed25519.Ed25519PrivateKey.generate()),
}
RSA = SIGNERS["RS256"]


def jwks(*signers: Signer) -> bytes:
    return json.dumps({"keys": [s.jwk() for s in signers]}).encode()


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def forged_tokens() -> dict[str, str]:
    """Tokens a gateway must refuse, each for its own reason."""
    now = int(time.time())
    good = RSA.token()
    header, _, signature = good.split(".")
    other_payload = b64(json.dumps({"sub": "mallory", "aud": AUDIENCE, "iss": ISSUER,
                                    "exp": now + 300}).encode())  # fmt: skip
    public_pem = RSA.key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    hs_header = b64(json.dumps({"alg": "HS256", "kid": RSA.kid, "typ": "JWT"}).encode())
    hs_body = b64(
        json.dumps({"sub": "mallory", "aud": AUDIENCE, "iss": ISSUER, "exp": now + 300}).encode()
    )
    hs_sig = b64(hmac.new(public_pem, f"{hs_header}.{hs_body}".encode(), hashlib.sha256).digest())
    none_header = b64(json.dumps({"alg": "none", "kid": RSA.kid}).encode())
    stranger = Signer(
        "rsa-2", "RS256", rsa.generate_private_key(public_exponent=65537, key_size=2048)
    )
    return {
        "expired": RSA.token(iat=now - 1000, exp=now - 600),
        "not yet valid": RSA.token(nbf=now + 600),
        "audience": RSA.token(aud="someone-else"),
        "issuer": RSA.token(iss="https://evil.example/"),
        "signature": f"{header}.{other_payload}.{signature}",
        "algorithm": f"{none_header}.{other_payload}.",
        "hmac": f"{hs_header}.{hs_body}.{hs_sig}",
        "key id": stranger.token(),
    }


@pytest.fixture(scope="module")
def jwks_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("jwks") / "jwks.json"
    path.write_bytes(jwks(*SIGNERS.values()))
    return path


@pytest.fixture(scope="module")
def server(jwks_file: Path) -> Iterator[ServerProcess]:
    args = ["--jwks", str(jwks_file), "--jwt-audience", AUDIENCE, "--jwt-issuer", ISSUER,
            "--api-key", "ops=sk-ops"]  # fmt: skip
    with run_server(*args) as running:
        yield running


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


@pytest.mark.parametrize("algorithm", sorted(SIGNERS))
async def test_each_key_kind_names_its_principal_and_tenant(
    server: ServerProcess, algorithm: str
) -> None:
    token = SIGNERS[algorithm].token(sub=f"user-{algorithm}", tenant="acme")
    async with httpx.AsyncClient(base_url=server.url, timeout=20) as http:
        sent = await http.post(
            "/v1/streams/notes/events",
            json={"kind": "message", "payload": 1},
            headers=bearer(token),
        )
        assert sent.status_code == 200, sent.text
        # The same tenant from another token sees it; an API key's tenant does not.
        other = SIGNERS["RS256"].token(sub="bob", tenant="acme")
        assert (await http.get("/v1/streams/notes", headers=bearer(other))).status_code == 200
        keyed = await http.get("/v1/streams/notes", headers=bearer("sk-ops"))
        assert keyed.status_code == 404
        await http.delete("/v1/streams/notes", headers=bearer(token))


async def test_the_openai_sdk_passes_a_jwt_as_its_key(server: ServerProcess) -> None:
    import openai

    client = openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key=RSA.token())
    stream = await client.chat.completions.create(
        model="synthetic", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    text = "".join(
        [chunk.choices[0].delta.content or "" async for chunk in stream if chunk.choices]
    )
    assert text
    refused = openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key=forged_tokens()["expired"])
    with pytest.raises(openai.AuthenticationError) as caught:
        await refused.chat.completions.create(
            model="synthetic", messages=[{"role": "user", "content": "hi"}]
        )
    assert "expired" in str(caught.value)


@pytest.mark.parametrize("reason", sorted(forged_tokens()))
async def test_a_bad_token_is_refused_on_every_wire(server: ServerProcess, reason: str) -> None:
    token = forged_tokens()[reason]
    async with httpx.AsyncClient(base_url=server.url, timeout=20) as http:
        response = await http.get("/v1/streams/x", headers=bearer(token))
    assert response.status_code == 401, response.text
    error = response.json()["error"]
    assert error["code"] == "unauthenticated"
    words = {"expired": "expired", "not yet valid": "not valid yet", "audience": "audience",
             "issuer": "issuer", "signature": "signature", "algorithm": "algorithm",
             "hmac": "algorithm", "key id": "key id"}  # fmt: skip
    assert words[reason] in error["message"], error

    url = server.url.replace("http://", "ws://") + "/v1/ws"
    async with websockets.connect(url, additional_headers=bearer(token)) as ws:
        with pytest.raises(websockets.exceptions.ConnectionClosed) as closed:
            await ws.recv()
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 4401

    assert server.grpc is not None
    async with grpc.aio.insecure_channel(server.grpc) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await airlane_stub(channel).Info(
                service_pb2.InfoRequest(stream_id="x"), metadata=tuple(bearer(token).items())
            )
    assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED

    assert server.airc is not None
    client = await AircClient.tcp(*server.airc)
    async with client:
        with pytest.raises(RequestRejected) as rejected:
            await client.authenticate(token)
    assert rejected.value.code == "unauthenticated"


async def test_good_tokens_pass_on_every_wire(server: ServerProcess) -> None:
    token = SIGNERS["EdDSA"].token()
    url = server.url.replace("http://", "ws://") + "/v1/ws"
    async with websockets.connect(url, additional_headers=bearer(token)) as ws:
        await ws.send(json.dumps({"op": "ping"}))
        assert json.loads(await ws.recv()) == {"op": "pong"}
    assert server.grpc is not None
    async with grpc.aio.insecure_channel(server.grpc) as channel:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await airlane_stub(channel).Info(
                service_pb2.InfoRequest(stream_id="x"), metadata=tuple(bearer(token).items())
            )
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND  # past the gate
    assert server.airc is not None
    async with await AircClient.tcp(*server.airc, token) as client:
        with pytest.raises(RequestRejected) as rejected:
            await client.subscribe("x")
    assert rejected.value.code == "stream_not_found"


# -- a JWKS URL, and key rotation --------------------------------------------------------------


@contextlib.contextmanager
def key_server(document: dict[str, bytes]) -> Iterator[str]:
    """A real HTTP server answering /jwks.json with ``document["jwks"]`` as it is now."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = document["jwks"]
            self.send_response(int(document.get("status", b"200")))
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/jwks.json"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


async def test_keys_from_a_url_rotate_without_a_restart() -> None:
    document = {"jwks": jwks(RSA)}
    rotated = Signer("rsa-next", "RS256", rsa.generate_private_key(65537, 2048))
    with key_server(document) as url, run_server("--jwks", url) as gateway:
        async with httpx.AsyncClient(base_url=gateway.url, timeout=20) as http:
            assert (await http.get("/v1/streams/x", headers=bearer(RSA.token()))).status_code == 404
            early = await http.get("/v1/streams/x", headers=bearer(rotated.token()))
            assert early.status_code == 401 and "key id" in early.text
            document["jwks"] = jwks(rotated)  # the identity provider rotates
            # The unknown key id asked for a fetch (at most one per 10 s): another process's
            # timer, so poll, bounded.
            for _ in range(150):
                late = await http.get("/v1/streams/x", headers=bearer(rotated.token()))
                if late.status_code == 404:
                    break
                await asyncio.sleep(0.1)
            assert late.status_code == 404, late.text


async def test_with_a_policy_file_the_keys_are_fetched_and_rotate_too(tmp_path: Path) -> None:
    # A policy file wraps the JWT verifier: its key set was once neither fetched before the
    # gateway listened nor refreshed, so every token was refused ("key id ... not in the key
    # set").
    policy = tmp_path / "policy.toml"
    policy.write_text('[[rules]]\nname = "all"\nprincipals = ["*"]\nactions = ["*"]\n')
    document = {"jwks": jwks(RSA)}
    rotated = Signer("rsa-next", "RS256", rsa.generate_private_key(65537, 2048))
    with (
        key_server(document) as url,
        run_server("--jwks", url, "--policy", str(policy)) as gateway,
    ):
        async with httpx.AsyncClient(base_url=gateway.url, timeout=20) as http:
            first = await http.get("/v1/streams/x", headers=bearer(RSA.token()))
            assert first.status_code == 404, first.text
            assert (await http.get("/v1/streams/x")).status_code == 401
            document["jwks"] = jwks(rotated)
            for _ in range(150):  # the unknown key id asks for a fetch: bounded poll
                late = await http.get("/v1/streams/x", headers=bearer(rotated.token()))
                if late.status_code == 404:
                    break
                await asyncio.sleep(0.1)
            assert late.status_code == 404, late.text


def test_a_jwks_file_that_cannot_be_used_stops_the_start(tmp_path: Path) -> None:
    bad = tmp_path / "jwks.json"
    bad.write_text('{"keys": []}')
    result = subprocess.run(
        [sys.executable, "-m", "airlane", "serve", "--port", "0", "--jwks", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2, result.stderr
    assert "no signing key" in result.stderr and "Traceback" not in result.stderr


async def test_tokens_within_the_allowed_clock_skew_pass_and_past_it_are_refused(
    server: ServerProcess,
) -> None:
    # 30 s of skew allowed on exp and nbf: a token 10 s past its expiry (or 10 s before its
    # start) passes, one 60 s past is refused, on the same gateway.
    now = int(time.time())
    cases = [
        (RSA.token(iat=now - 100, exp=now - 10), 404, ""),
        (RSA.token(iat=now - 100, exp=now - 60), 401, "expired"),
        (RSA.token(nbf=now + 10), 404, ""),
        (RSA.token(nbf=now + 60), 401, "not valid yet"),
    ]
    async with httpx.AsyncClient(base_url=server.url, timeout=20) as http:
        for token, status, words in cases:
            answer = await http.get("/v1/streams/x", headers=bearer(token))
            assert answer.status_code == status, (status, answer.text)
            assert words in answer.text


async def test_a_failed_key_fetch_keeps_the_keys_the_gateway_had(tmp_path: Path) -> None:
    document = {"jwks": jwks(RSA)}
    stranger = Signer("rsa-unknown", "RS256", rsa.generate_private_key(65537, 2048))
    log_path = tmp_path / "gateway.log"
    with (
        key_server(document) as url,
        log_path.open("w") as log_file,
        run_server("--jwks", url, stderr=log_file, log_level="info") as gateway,
    ):
        async with httpx.AsyncClient(base_url=gateway.url, timeout=20) as http:
            assert (await http.get("/v1/streams/x", headers=bearer(RSA.token()))).status_code == 404
            document["status"] = b"500"  # the identity provider fails
            # An unknown key id asks for a fetch, at most one per 10 s (MIN_REFETCH_S) since
            # the first: past that, one such token, then the log tells of the failed fetch.
            # (One token, not a loop of them: refused credentials are rate limited.)
            await asyncio.sleep(MIN_REFETCH_S + 0.5)
            refused = await http.get("/v1/streams/x", headers=bearer(stranger.token()))
            assert refused.status_code == 401
            for _ in range(100):
                if "JWKS not refreshed" in log_path.read_text():
                    break
                await asyncio.sleep(0.1)
            assert "JWKS not refreshed, the keys it had stay" in log_path.read_text()
            kept = await http.get("/v1/streams/x", headers=bearer(RSA.token()))
            assert kept.status_code == 404, kept.text  # the key it had still verifies
    assert "Traceback" not in log_path.read_text()
