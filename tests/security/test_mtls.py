"""Mutual TLS with SPIFFE identities on every listener, with the clients users use.

A real gateway serves HTTPS, WSS, gRPC with TLS and AIRC over TLS, requiring client
certificates from a CA made by ``airlane certs`` and SPIFFE IDs from the trust domain
``example.org``. Each client shows, in turn: nothing, a certificate from another CA, an expired
one, one from another trust domain, one with two SPIFFE IDs, and a good one. The first three
never get past the TLS handshake; the next two are refused as ``unauthenticated`` on the
client's own wire (HTTP 401, WebSocket close 4401, gRPC UNAUTHENTICATED, an AIRC ERROR); the
good one is served, as its SPIFFE ID. Then the gateway's certificate is replaced on disk and a
new connection gets the new one, with no restart.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import ssl
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import httpx
import pytest
import websockets

from airlane.client import ConnectFailed, ConnectionLost, RequestRejected
from airlane.client.airc import AircClient
from airlane.security.certs import IssuedFiles, issue_certificate, make_ca
from airlane.v1 import service_pb2
from tests.grpc_transport.conftest import airlane_stub
from tests.servers import ServerProcess, run_server

pytestmark = pytest.mark.timeout(120)

TRUST_DOMAIN = "example.org"
GOOD = "spiffe://example.org/ai-trainer"


@dataclass(frozen=True)
class Pki:
    ca: Path
    server: IssuedFiles
    clients: dict[str, IssuedFiles | None]
    """Each case's client certificate (None: the client shows none)."""


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    root = tmp_path_factory.mktemp("pki")
    ca, evil = root / "ca", root / "evil"
    make_ca(ca, TRUST_DOMAIN)
    make_ca(evil, TRUST_DOMAIN)  # same trust domain, another CA: not trusted
    long_ago = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=40)
    clients: dict[str, IssuedFiles | None] = {
        "none": None,
        "other-ca": issue_certificate(evil, GOOD, root / "c", name="other-ca"),
        "expired": issue_certificate(ca, GOOD, root / "c", name="expired", not_before=long_ago),
        "other-domain": issue_certificate(ca, "spiffe://other.org/ai-trainer", root / "c"),
        "two-ids": issue_certificate(
            ca, GOOD, root / "c", name="two", extra_uris=("spiffe://example.org/admin",)
        ),
        "good": issue_certificate(ca, GOOD, root / "c", name="good"),
    }
    server = issue_certificate(ca, "spiffe://example.org/gateway", root / "s")
    return Pki(ca / "ca.pem", server, clients)


@pytest.fixture(scope="module")
def audit_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("audit") / "audit.log"


@pytest.fixture(scope="module")
def server(pki: Pki, audit_log: Path) -> Iterator[ServerProcess]:
    args = [
        "--tls-cert",
        str(pki.server.cert),
        "--tls-key",
        str(pki.server.key),
        "--tls-client-ca",
        str(pki.ca),
        "--trust-domain",
        TRUST_DOMAIN,
    ]
    config = f'[tls]\nreload_s = 0.2\n[audit]\npath = "{audit_log}"\n'
    with run_server(*args, config=config) as running:
        yield running


class Audited:
    """The gateway's audit records from when this is made on."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.before = len(self._all())

    def _all(self) -> list[dict[str, str]]:
        lines = self.path.read_text().splitlines() if self.path.exists() else []
        return [json.loads(line) for line in lines]

    async def denial(self, reason: str) -> dict[str, str]:
        """The first new ``unauthenticated`` denial whose reason holds ``reason``, waited for
        (a refused handshake is recorded when the server's side of it ends)."""
        async with asyncio.timeout(5):
            while True:
                for entry in self._all()[self.before :]:
                    if entry["code"] == "unauthenticated" and reason in entry.get("reason", ""):
                        assert entry["decision"] == "deny" and entry["from"] == "127.0.0.1"
                        return entry
                await asyncio.sleep(0.05)


def client_context(pki: Pki, case: str) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=pki.ca)
    files = pki.clients[case]
    if files is not None:
        context.load_cert_chain(files.cert, files.key)
    return context


HANDSHAKE_REFUSED = ["none", "other-ca", "expired"]
IDENTITY_REFUSED = ["other-domain", "two-ids"]


# -- HTTPS ------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", HANDSHAKE_REFUSED)
async def test_https_handshake_refused(
    server: ServerProcess, pki: Pki, case: str, audit_log: Path
) -> None:
    audited = Audited(audit_log)
    async with httpx.AsyncClient(verify=client_context(pki, case), timeout=10) as http:
        with pytest.raises(httpx.TransportError):
            await http.get(f"{server.url}/v1/streams/x")
    await audited.denial("TLS handshake refused")


@pytest.mark.parametrize("case", IDENTITY_REFUSED)
async def test_https_identity_refused(
    server: ServerProcess, pki: Pki, case: str, audit_log: Path
) -> None:
    audited = Audited(audit_log)
    async with httpx.AsyncClient(verify=client_context(pki, case), timeout=10) as http:
        response = await http.get(f"{server.url}/v1/streams/x")
    await audited.denial("client certificate")
    assert response.status_code == 401, response.text
    assert response.json()["error"]["code"] == "unauthenticated"
    assert "client certificate" in response.json()["error"]["message"]


async def test_https_serves_a_good_certificate(server: ServerProcess, pki: Pki) -> None:
    assert server.url.startswith("https://")
    async with httpx.AsyncClient(verify=client_context(pki, "good"), timeout=10) as http:
        missing = await http.get(f"{server.url}/v1/streams/x")
        assert missing.status_code == 404  # past the gate: the stream is simply not there
        body = {"model": "synthetic", "messages": [{"role": "user", "content": "hi"}]}
        created = await http.post(f"{server.url}/v1/streams", json=body)
        assert created.status_code == 201, created.text
        stream = created.json()["id"]
        async with http.stream("GET", f"{server.url}/v1/streams/{stream}/events") as events:
            async for _ in events.aiter_lines():
                pass
        info = (await http.get(f"{server.url}/v1/streams/{stream}")).json()
    assert GOOD in json.dumps(info["usage"])  # the reader is named by its SPIFFE ID


# -- WSS --------------------------------------------------------------------------------------


def wss(server: ServerProcess) -> str:
    return server.url.replace("https://", "wss://") + "/v1/ws"


@pytest.mark.parametrize("case", HANDSHAKE_REFUSED)
async def test_wss_handshake_refused(server: ServerProcess, pki: Pki, case: str) -> None:
    with pytest.raises((ssl.SSLError, OSError, websockets.exceptions.WebSocketException)):
        async with websockets.connect(wss(server), ssl=client_context(pki, case)) as ws:
            await ws.send(json.dumps({"op": "ping"}))
            await ws.recv()


@pytest.mark.parametrize("case", IDENTITY_REFUSED)
async def test_wss_identity_refused(server: ServerProcess, pki: Pki, case: str) -> None:
    async with websockets.connect(wss(server), ssl=client_context(pki, case)) as ws:
        with pytest.raises(websockets.exceptions.ConnectionClosed) as caught:
            await ws.recv()
    assert caught.value.rcvd is not None and caught.value.rcvd.code == 4401
    assert "client certificate" in caught.value.rcvd.reason


async def test_wss_serves_a_good_certificate(server: ServerProcess, pki: Pki) -> None:
    async with websockets.connect(wss(server), ssl=client_context(pki, "good")) as ws:
        await ws.send(json.dumps({"op": "ping"}))
        assert json.loads(await ws.recv()) == {"op": "pong"}


# -- gRPC -------------------------------------------------------------------------------------


def grpc_credentials(pki: Pki, case: str) -> grpc.ChannelCredentials:
    files = pki.clients[case]
    return grpc.ssl_channel_credentials(
        root_certificates=pki.ca.read_bytes(),
        private_key=files.key.read_bytes() if files else None,
        certificate_chain=files.cert.read_bytes() if files else None,
    )


async def grpc_info(server: ServerProcess, pki: Pki, case: str) -> grpc.StatusCode:
    assert server.grpc is not None
    target = server.grpc.replace("127.0.0.1", "localhost")  # the name the certificate holds
    async with grpc.aio.secure_channel(target, grpc_credentials(pki, case)) as channel:
        try:
            await airlane_stub(channel).Info(
                service_pb2.InfoRequest(stream_id="x"), timeout=10, wait_for_ready=False
            )
        except grpc.aio.AioRpcError as exc:
            return exc.code()
    return grpc.StatusCode.OK


@pytest.mark.parametrize("case", HANDSHAKE_REFUSED)
async def test_grpc_handshake_refused(server: ServerProcess, pki: Pki, case: str) -> None:
    assert await grpc_info(server, pki, case) == grpc.StatusCode.UNAVAILABLE


@pytest.mark.parametrize("case", IDENTITY_REFUSED)
async def test_grpc_identity_refused(
    server: ServerProcess, pki: Pki, case: str, audit_log: Path
) -> None:
    audited = Audited(audit_log)
    assert await grpc_info(server, pki, case) == grpc.StatusCode.UNAUTHENTICATED
    await audited.denial("client certificate")


async def test_grpc_serves_a_good_certificate(server: ServerProcess, pki: Pki) -> None:
    assert await grpc_info(server, pki, "good") == grpc.StatusCode.NOT_FOUND  # past the gate


# -- gRPC-Web and Connect, on the HTTPS port -------------------------------------------------


async def connect_info(server: ServerProcess, pki: Pki, case: str) -> httpx.Response:
    async with httpx.AsyncClient(verify=client_context(pki, case), timeout=10) as http:
        return await http.post(
            f"{server.url}/airlane.v1.Airlane/Info",
            json={"streamId": "x"},
            headers={"connect-protocol-version": "1"},
        )


@pytest.mark.parametrize("case", IDENTITY_REFUSED)
async def test_connect_identity_refused(
    server: ServerProcess, pki: Pki, case: str, audit_log: Path
) -> None:
    # The service behind gRPC-Web was once built without the HTTP server's view of the
    # certificate: with no API keys configured, these callers were let in as anonymous.
    audited = Audited(audit_log)
    response = await connect_info(server, pki, case)
    assert response.status_code == 401, response.text
    assert response.json()["code"] == "unauthenticated"
    assert "client certificate" in response.json()["message"]
    await audited.denial("client certificate")


async def test_connect_serves_a_good_certificate(server: ServerProcess, pki: Pki) -> None:
    response = await connect_info(server, pki, "good")
    assert response.status_code == 404, response.text  # past the gate
    assert response.json()["code"] == "not_found"


# -- AIRC over TLS ----------------------------------------------------------------------------


@pytest.mark.parametrize("case", HANDSHAKE_REFUSED)
async def test_airc_handshake_refused(
    server: ServerProcess, pki: Pki, case: str, audit_log: Path
) -> None:
    audited = Audited(audit_log)
    assert server.airc is not None
    host, port = server.airc
    with pytest.raises((ConnectFailed, ConnectionLost, ConnectionError)):
        # TLS 1.3 client certificates are checked after the client's handshake ends: the
        # refusal may come as the first read instead of at connect.
        async with await AircClient.tcp(host, port, tls=client_context(pki, case)) as client:
            await client.subscribe("x")
    await audited.denial("TLS handshake refused")


@pytest.mark.parametrize("case", IDENTITY_REFUSED)
async def test_airc_identity_refused(server: ServerProcess, pki: Pki, case: str) -> None:
    assert server.airc is not None
    host, port = server.airc
    async with await AircClient.tcp(host, port, tls=client_context(pki, case)) as client:
        with pytest.raises(RequestRejected) as caught:
            await client.subscribe("x")
    assert caught.value.code == "unauthenticated"


async def test_airc_serves_a_good_certificate(server: ServerProcess, pki: Pki) -> None:
    assert server.airc is not None
    host, port = server.airc
    async with await AircClient.tcp(host, port, tls=client_context(pki, "good")) as client:
        with pytest.raises(RequestRejected) as caught:
            await client.subscribe("x")
    assert caught.value.code == "stream_not_found"  # past the gate


# -- reloading --------------------------------------------------------------------------------


async def served_serial(server: ServerProcess, pki: Pki) -> int:
    host, port = server.url.removeprefix("https://").split(":")
    _, writer = await asyncio.open_connection(host, int(port), ssl=client_context(pki, "good"))
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    finally:
        writer.close()
    from cryptography import x509

    return x509.load_der_x509_certificate(der).serial_number


async def test_a_replaced_certificate_is_served_without_a_restart(
    server: ServerProcess, pki: Pki, tmp_path: Path
) -> None:
    before = await served_serial(server, pki)
    fresh = issue_certificate(pki.ca.parent, "spiffe://example.org/gateway", tmp_path)
    # Replace both files in place, key first (a reload between the two writes keeps the old
    # pair: a key that does not match its certificate does not load).
    pki.server.key.write_bytes(fresh.key.read_bytes())
    pki.server.cert.write_bytes(fresh.cert.read_bytes())
    # Another process's timer reads the files: poll its listener, bounded.
    for _ in range(100):
        if await served_serial(server, pki) != before:
            break
        await asyncio.sleep(0.1)
    assert await served_serial(server, pki) != before, "the new certificate was never served"
    assert server.process.poll() is None


def test_certs_commands_make_a_ca_and_a_workload_certificate(tmp_path: Path) -> None:
    airlane = [sys.executable, "-m", "airlane", "certs"]
    made = subprocess.run(
        [*airlane, "ca", "--out", str(tmp_path), "--trust-domain", "corp.test"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert made.returncode == 0, made.stderr
    issued = subprocess.run(
        [*airlane, "issue", "spiffe://corp.test/ns/ml/sa/trainer", "--ca", str(tmp_path),
         "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )  # fmt: skip
    assert issued.returncode == 0, issued.stderr
    from cryptography import x509

    cert = x509.load_pem_x509_certificate((tmp_path / "trainer.pem").read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.UniformResourceIdentifier) == [
        "spiffe://corp.test/ns/ml/sa/trainer"
    ]
    bad = subprocess.run(
        [*airlane, "issue", "spiffe://Corp.test/x", "--ca", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert bad.returncode == 2 and "trust domain" in bad.stderr and "Traceback" not in bad.stderr
