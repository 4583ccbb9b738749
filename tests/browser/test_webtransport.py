"""Headless Chromium opens a WebTransport session to the gateway's HTTP/3 listener, trusting
its self-signed certificate by hash (``serverCertificateHashes``: no CA), and speaks the
``/v1/ws`` multiplex over it: a generation started on the control stream streams its events
on a unidirectional stream of its own, and a ping sent as a datagram is answered by one.

Debian's ``/usr/bin/chromium`` through Playwright; the page is served on 127.0.0.1 (a secure
context, as WebTransport needs).
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import httpx
import pytest

from tests.browser.test_eventsource import CHROMIUM, page_server, require_browser, snapshot_text
from tests.servers import run_server

pytestmark = [pytest.mark.browser, pytest.mark.timeout(90)]

ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
        "--disable-background-networking", "--disable-component-update"]  # fmt: skip

SESSION_JS = """
async ([url, hashHex, request]) => {
  const hash = new Uint8Array(hashHex.match(/../g).map((h) => parseInt(h, 16)));
  const hashes = [{algorithm: "sha-256", value: hash}];
  const wt = new WebTransport(url, {serverCertificateHashes: hashes});
  await wt.ready;
  const enc = new TextEncoder(), dec = new TextDecoder();
  const frame = (obj) => {
    const body = enc.encode(JSON.stringify(obj));
    const out = new Uint8Array(4 + body.length);
    new DataView(out.buffer).setUint32(0, body.length);
    out.set(body, 4);
    return out;
  };
  async function* messages(readable) {
    const reader = readable.getReader();
    let buf = new Uint8Array(0);
    for (;;) {
      const {value, done} = await reader.read();
      if (done) return;
      const joined = new Uint8Array(buf.length + value.length);
      joined.set(buf); joined.set(value, buf.length); buf = joined;
      while (buf.length >= 4) {
        const size = new DataView(buf.buffer, buf.byteOffset).getUint32(0);
        if (buf.length < 4 + size) break;
        yield JSON.parse(dec.decode(buf.subarray(4, 4 + size)));
        buf = buf.subarray(4 + size);
      }
    }
  }
  const control = await wt.createBidirectionalStream();
  const writer = control.writable.getWriter();
  const replies = messages(control.readable);
  await writer.write(frame({op: "generate", request, ref: 1}));
  const generated = (await replies.next()).value;
  const incoming = wt.incomingUnidirectionalStreams.getReader();
  const {value: events} = await incoming.read();
  let text = "", kinds = [];
  for await (const m of messages(events)) {
    kinds.push(m.event.kind);
    if (m.event.kind === "delta") text += m.event.text;
    if (m.event.kind === "done" || m.event.kind === "error") break;
  }
  // A datagram: the kind byte 0 (no parity), then the op; the answer comes as one too.
  const dgWriter = wt.datagrams.writable.getWriter();
  const dgReader = wt.datagrams.readable.getReader();
  let pong = null;
  for (let attempt = 0; attempt < 5 && pong === null; attempt++) {
    const body = enc.encode(JSON.stringify({op: "ping", ref: 7}));
    const dg = new Uint8Array(1 + body.length); dg.set(body, 1);
    await dgWriter.write(dg);
    const late = new Promise((r) => setTimeout(() => r(null), 1000));
    const got = await Promise.race([dgReader.read(), late]);
    if (got && got.value) pong = JSON.parse(dec.decode(got.value.subarray(1)));
  }
  wt.close({closeCode: 0, reason: "bye"});
  return {generated, text, kinds, pong};
}
"""


async def test_chromium_speaks_the_multiplex_over_webtransport(tmp_path: Path) -> None:
    require_browser()
    from playwright.async_api import async_playwright

    log = tmp_path / "serve.log"
    # The page's origin (another port) must be allowed, as for a WebSocket.
    config = '[synthetic]\nttft_ms = 5.0\nitl_ms = 2.0\n[http]\ncors_origins = ["*"]\n'
    with log.open("w") as err, run_server(config=config, stderr=err, log_level="info") as gateway:
        assert gateway.h3 is not None
        host, port = gateway.h3
        found = re.search(r"self-signed certificate, SHA-256 ([0-9a-f]{64})", log.read_text())
        assert found, "the gateway logged no certificate hash"
        request = {"model": "synthetic", "stream": True, "max_tokens": 20, "seed": 5,
                   "messages": [{"role": "user", "content": "hello over QUIC"}]}  # fmt: skip
        async with page_server() as page_url, async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            try:
                page = await browser.new_page()
                await page.goto(page_url)
                url = f"https://{host}:{port}/v1/ws"
                result = await asyncio.wait_for(
                    page.evaluate(SESSION_JS, [url, found[1], request]), 60
                )
            finally:
                await browser.close()
        assert result["generated"]["op"] == "generated"
        assert result["kinds"][-1] == "done" and result["text"]
        assert result["pong"] == {"op": "pong", "ref": 7}
        # The same text the streams API holds for that generation.
        stream = result["generated"]["stream"]
        async with httpx.AsyncClient(base_url=gateway.url) as http:
            assert result["text"] == await snapshot_text(http, stream)
    assert "Traceback" not in log.read_text()
