"""A real browser behind mutual TLS: headless Chromium shows a SPIFFE workload certificate to a
gateway that requires one, and reads a stream with ``fetch`` and ``EventSource``.

The gateway, its CA and the client certificates are the ones of ``tests/security/test_mtls.py``
(trust domain ``example.org``), and the cases are its cases: no certificate, one from another
CA and an expired one never get past the TLS handshake; one from another trust domain and one
with two SPIFFE IDs are refused as ``unauthenticated`` (HTTP 401); the good one is served, as its
SPIFFE ID.

Playwright gives the browser its certificate (``client_certificates``) by proxying the
browser's connections to that origin and doing the TLS handshake to the gateway itself, in its
Node driver, with the certificate (the browser's side of that proxy uses Playwright's own
certificate, which Playwright accepts internally). So whichever of the two talks to the gateway
checks its certificate, and each trusts the dev CA, nothing ignored (no
``ignore_https_errors``): the driver gets it as ``NODE_EXTRA_CA_CERTS``; Chromium, which has no
switch to add a CA and talks to the gateway directly when it has no certificate to show, pins
the gateway's key (``--ignore-certificate-errors-spki-list``).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from tests.browser.test_eventsource import CHROMIUM, CHROMIUM_ARGS, READER_JS, require_browser
from tests.security import test_mtls as mtls
from tests.servers import ServerProcess

pytestmark = [pytest.mark.browser, pytest.mark.timeout(60)]

# The mTLS gateway and its PKI, as fixtures of this module (one gateway for it).
pki = mtls.pki
server = mtls.server
audit_log = mtls.audit_log

PAGE_TIMEOUT_MS = 15_000

# Run in the gateway's own origin (no CORS), over the browser's mutually authenticated
# connections: ``fetch`` the JSON of a method and path (and body), with its status.
FETCH_JS = """
async ([method, path, body]) => {
  const init = {method};
  if (body !== null) {
    init.headers = {"content-type": "application/json"};
    init.body = JSON.stringify(body);
  }
  const response = await fetch(path, init);
  return {status: response.status, json: await response.json()};
}
"""


def spki_pin(pem: bytes) -> str:
    """The base64 SHA-256 of a certificate's public key: what Chromium's SPKI list takes."""
    spki = (
        x509.load_pem_x509_certificate(pem)
        .public_key()
        .public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return base64.b64encode(hashlib.sha256(spki).digest()).decode()


@contextlib.asynccontextmanager
async def browser_page(
    server: ServerProcess, pki: mtls.Pki, case: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Any]:
    """A page in a fresh headless Chromium whose context shows ``case``'s client certificate
    to the gateway's origin (none for ``"none"``)."""
    require_browser()
    from playwright.async_api import async_playwright

    # Read once, when the driver starts: set before async_playwright() launches it.
    monkeypatch.setenv("NODE_EXTRA_CA_CERTS", str(pki.ca))
    pin = f"--ignore-certificate-errors-spki-list={spki_pin(pki.server.cert.read_bytes())}"
    files = pki.clients[case]
    certificates = (
        [{"origin": server.url, "certPath": str(files.cert), "keyPath": str(files.key)}]
        if files is not None
        else None
    )
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM, args=[*CHROMIUM_ARGS, pin]
        )
        try:
            context = await browser.new_context(client_certificates=certificates)
            context.set_default_timeout(PAGE_TIMEOUT_MS)
            yield await context.new_page()
        finally:
            await browser.close()


async def test_browser_streams_with_a_good_certificate(
    server: ServerProcess, pki: mtls.Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page is the gateway's own JSON (navigated to over mTLS); from it, ``fetch`` starts a
    generation and an ``EventSource`` reads it to the end, as the certificate's SPIFFE ID."""
    assert server.url.startswith("https://")
    async with browser_page(server, pki, "good", monkeypatch) as page:
        response = await page.goto(f"{server.url}/v1/models")
        assert response is not None and response.status == 200, await response.text()
        assert response.url.startswith("https://")  # the page is the gateway's own origin
        models = (await response.json())["data"]
        assert "airlane-synthetic" in [model["id"] for model in models]
        body = {"model": "synthetic", "messages": [{"role": "user", "content": "hi"}]}
        created = await page.evaluate(FETCH_JS, ["POST", "/v1/streams", body])
        assert created["status"] == 201, created
        stream = created["json"]
        read = await page.evaluate(READER_JS, [stream["events_url"], PAGE_TIMEOUT_MS])
        path = f"/v1/streams/{stream['id']}"
        info = await page.evaluate(FETCH_JS, ["GET", path, None])
        snapshot = await page.evaluate(FETCH_JS, ["GET", f"{path}/snapshot", None])

    assert read["outcome"] == "done", {k: v for k, v in read.items() if k != "log"}
    # Streamed, not one buffered answer: several deltas, each event once, in order.
    seqs = [entry["seq"] for entry in read["log"]]
    assert seqs == sorted(set(seqs))
    assert sum(entry["kind"] == "delta" for entry in read["log"]) >= 2
    assert read["text"] and read["text"] == snapshot["json"]["text"]["content"]
    # The browser's reads are accounted to the SPIFFE ID of the certificate it showed.
    assert mtls.GOOD in json.dumps(info["json"]["usage"])


@pytest.mark.parametrize("case", mtls.HANDSHAKE_REFUSED)
async def test_browser_handshake_refused(
    server: ServerProcess, pki: mtls.Pki, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    """No answer from the gateway at all. Chromium reports the dropped connection as some
    ``net::ERR_`` (which one depends on when the TLS 1.3 alert arrives: ERR_EMPTY_RESPONSE,
    ERR_SOCKET_NOT_CONNECTED...); Playwright's proxy, when it sees the refusal first, answers
    503 with its own error page instead. Never a certificate error of the gateway's: that one is
    trusted, so the refusal is the gateway's verdict on the client's certificate."""
    async with browser_page(server, pki, case, monkeypatch) as page:
        try:
            response = await page.goto(f"{server.url}/v1/models")
        except Exception as exc:  # playwright's Error: the navigation failed
            message = str(exc)
            assert re.search(r"net::ERR_\w+", message), message
            assert "ERR_CERT_" not in message, message
        else:
            assert response is not None
            text = await response.text()
            assert response.status == 503, text
            assert "Playwright client-certificate error" in text, text


@pytest.mark.parametrize("case", mtls.IDENTITY_REFUSED)
async def test_browser_identity_refused(
    server: ServerProcess, pki: mtls.Pki, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    """Past the handshake (same CA), then refused by identity: the same 401 ``unauthenticated``
    the other HTTP clients get, for a navigation and for the page's own ``fetch``."""
    async with browser_page(server, pki, case, monkeypatch) as page:
        response = await page.goto(f"{server.url}/v1/streams/x")
        assert response is not None
        assert response.status == 401, await response.text()
        error = (await response.json())["error"]
        assert error["code"] == "unauthenticated"
        assert "client certificate" in error["message"]
        fetched = await page.evaluate(FETCH_JS, ["POST", "/v1/streams", {}])
    assert fetched["status"] == 401, fetched
    assert fetched["json"]["error"]["code"] == "unauthenticated"
