"""A WebRTC peer no one here wrote: headless Chromium (Debian's package, through Playwright),
run inside a lab namespace by tests/webrtc/test_peers.py.

    python chromium_client.py --url http://10.77.0.2:18480

The page (same origin as the gateway) offers a data channel ``airlane``, starts a generation,
reads its first 10 events, then forces an ICE restart (``restartIce``, a new offer, its new
ICE credentials sent as a trickle fragment, RFC 9725's way); the gateway (aiortc) cannot
restart and refuses with 422, so the page does what docs/webrtc.md says: closes that peer
connection, offers a new one, resumes from the last event id, and reads to ``done``. It prints
one JSON object: ``{"peers": [[events...], [events...]], "pairs": [...], "restart":
{"status": ..., "code": ...}}``; it exits 1 on an error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from playwright.async_api import async_playwright

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    # Host candidates as addresses, not mDNS names the gateway could not resolve.
    "--disable-features=WebRtcHideLocalIpsWithMdns",
]

PAGE = """
async ({maxTokens}) => {
  async function connect() {
    const pc = new RTCPeerConnection({ bundlePolicy: "max-bundle" });
    const channel = pc.createDataChannel("airlane");
    const inbox = [];
    let wake = null;
    channel.onmessage = ({ data }) => { inbox.push(JSON.parse(data)); if (wake) wake(); };
    const opened = new Promise((resolve) => { channel.onopen = resolve; });
    pc.onconnectionstatechange = () => console.log(`peer: ${pc.connectionState}`);
    await pc.setLocalDescription(await pc.createOffer());
    console.log("offer made; gathering");
    await new Promise((resolve) => {
      if (pc.iceGatheringState === "complete") return resolve();
      pc.onicegatheringstatechange = () => pc.iceGatheringState === "complete" && resolve();
    });
    const response = await fetch("/v1/webrtc", {
      method: "POST", headers: { "content-type": "application/sdp" }, body: pc.localDescription.sdp,
    });
    if (response.status !== 201) {
      throw new Error(`offer: ${response.status} ${await response.text()}`);
    }
    const session = response.headers.get("location");
    console.log(`answered: ${session}`);
    await pc.setRemoteDescription({ type: "answer", sdp: await response.text() });
    await opened;
    async function next() {
      while (!inbox.length) await new Promise((resolve) => { wake = resolve; });
      return inbox.shift();
    }
    return { pc, channel, next, session };
  }
  const peers = [[], []];
  let first = await connect();
  first.channel.send(JSON.stringify({
    op: "generate", subscribe: true,
    request: { model: "any", max_tokens: maxTokens, messages: [{ role: "user", content: "hi" }] },
  }));
  let stream = null, last = null;
  while (true) {
    const message = await first.next();
    if (message.op === "generated") stream = message.stream;
    if (message.op !== "event") continue;
    peers[0].push(message);
    last = message.id;
    if (message.event.kind === "done" || peers[0].length >= 10) break;
  }
  const stats = [];
  (await first.pc.getStats()).forEach((s) => {
    if (s.type === "candidate-pair" && s.nominated) stats.push(s.state);
  });
  // An ICE restart, as on a network change: new credentials, sent as a trickle fragment.
  first.pc.restartIce();
  const restartOffer = await first.pc.createOffer();
  const fragment = restartOffer.sdp.split("\\r\\n").filter((line) =>
    line.startsWith("a=ice-ufrag:") || line.startsWith("a=ice-pwd:") ||
    line.startsWith("m=") || line.startsWith("a=mid:")).join("\\r\\n") + "\\r\\n";
  const refused = await fetch(first.session, {
    method: "PATCH", headers: { "content-type": "application/trickle-ice-sdpfrag" },
    body: fragment,
  });
  const restart = { status: refused.status, code: (await refused.json()).error.code };
  console.log(`ice restart: ${JSON.stringify(restart)}`);
  first.pc.close();
  await fetch(first.session, { method: "DELETE" });
  const second = await connect();
  console.log(`resuming ${stream} from ${last}`);
  second.channel.send(JSON.stringify({ op: "subscribe", stream, from: last }));
  while (true) {
    const message = await second.next();
    if (message.op !== "event") { console.log(`second: ${JSON.stringify(message)}`); continue; }
    peers[1].push(message);
    if (message.event.kind === "done" || message.event.kind === "error") break;
  }
  second.pc.close();
  return { peers, pairs: stats, restart };
}
"""


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--max-tokens", type=int, default=200)
    parser.add_argument("--timeout-s", type=float, default=40.0)
    args = parser.parse_args()
    async with asyncio.timeout(args.timeout_s), async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = await browser.new_page()
            # The page's progress on stderr: where it stopped, if it does.
            page.on("console", lambda m: print(f"page: {m.text}", file=sys.stderr, flush=True))
            await page.goto(f"{args.url}/healthz")
            result = await page.evaluate(PAGE, {"maxTokens": args.max_tokens})
        finally:
            await browser.close()
    sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
