"""A WebRTC peer no one here wrote: headless Chromium (Debian's package, through Playwright),
run inside a lab namespace by tests/webrtc/test_peers.py.

    python chromium_client.py --url http://10.77.0.2:18480

The page (same origin as the gateway) offers a data channel ``airlane``, starts a generation
and reads its first 10 events. Then it forces an ICE restart (``restartIce``, a new offer
whose new ICE credentials go to the gateway as a trickle fragment, RFC 9725's way; the
gateway's new ones come back and go into a copy of its answer), waits until the gateway has
moved to the new path, and on the same channel reads 2 more events, pings, and runs a second
generation to its end. Last it closes that peer connection, offers a new one, and resumes the
first generation from the last event id it saw, to ``done``. It prints one JSON object:
``{"peers": [[events...], [events...]], "pairs": [...], "restart": {...}}``; it exits 1 on
an error.
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
  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
  const lines = (sdp) => sdp.split("\\r\\n");
  const request = (content) => ({
    model: "any", max_tokens: maxTokens, messages: [{ role: "user", content }],
  });
  async function readGeneration(peer, into, limit) {
    while (true) {
      const message = await peer.next();
      if (message.op !== "event") continue;
      into.push(message);
      if (message.event.kind === "done" || into.length >= limit) return message;
    }
  }

  // 1. A generation, its first 10 events.
  const peers = [[], []];
  const first = await connect();
  first.channel.send(JSON.stringify({ op: "generate", subscribe: true, request: request("hi") }));
  const stream = (await first.next()).stream;
  let last = (await readGeneration(first, peers[0], 10)).id;
  // Chromium shows its nominated pair "in-progress" while a consent check on it is in
  // flight (every few seconds), "succeeded" between them: read until it has settled, 2 s at
  // most.
  let pairs = [];
  for (let i = 0; i < 40; i++) {
    pairs = [];
    (await first.pc.getStats()).forEach((s) => {
      if (s.type === "candidate-pair" && s.nominated) pairs.push(s.state);
    });
    if (pairs.length && pairs.every((state) => state === "succeeded")) break;
    await sleep(50);
  }

  // 2. An ICE restart, as on a network change: the new credentials (and candidates, when
  // Chromium has any) go to the gateway as a trickle fragment, RFC 9725's way; the gateway's
  // new ones come back and go into a copy of its first answer.
  const candidates = [];
  const gathered = new Promise((resolve) => {
    first.pc.onicecandidate = ({ candidate }) => {
      // Chromium first repeats the end of the first session's candidates: not ours.
      if (candidate === null && candidates.length) resolve();
      else if (candidate && candidate.candidate) candidates.push(`a=${candidate.candidate}`);
    };
  });
  const ufragBefore = lines(first.pc.remoteDescription.sdp)
    .find((l) => l.startsWith("a=ice-ufrag:"));
  first.pc.restartIce();
  await first.pc.setLocalDescription(await first.pc.createOffer());
  // In the lab Chromium gathers no candidate to signal (its first offer had none either: the
  // gateway learned its address from its checks, peer-reflexive): a second at most.
  await Promise.race([gathered, sleep(1000)]);
  const credentials = lines(first.pc.localDescription.sdp).filter((l) =>
    l.startsWith("a=ice-ufrag:") || l.startsWith("a=ice-pwd:"));
  const fragment = [...credentials, "m=application 9 UDP/DTLS/SCTP webrtc-datachannel",
    "a=mid:0", ...candidates, "a=end-of-candidates", ""].join("\\r\\n");
  const patched = await fetch(first.session, {
    method: "PATCH", headers: { "content-type": "application/trickle-ice-sdpfrag" },
    body: fragment,
  });
  const theirs = lines(await patched.text());
  const restart = { status: patched.status, type: patched.headers.get("content-type") };
  const fresh = (prefix) => theirs.filter((l) => l.startsWith(prefix));
  const answer = [];
  for (const line of lines(first.pc.remoteDescription.sdp)) {
    if (line.startsWith("a=ice-ufrag:")) answer.push(fresh("a=ice-ufrag:")[0]);
    else if (line.startsWith("a=ice-pwd:")) answer.push(fresh("a=ice-pwd:")[0]);
    else if (line.startsWith("a=candidate:") || line === "a=end-of-candidates") continue;
    else if (line.startsWith("a=mid:")) answer.push(line, ...fresh("a=candidate:"));
    else answer.push(line);
  }
  await first.pc.setRemoteDescription({ type: "answer", sdp: answer.join("\\r\\n") });
  restart.ufragChanged = !answer.includes(ufragBefore);
  // ICE stays "connected" on the old pair while it checks the new one: ask the gateway
  // whether it moved over (it closes the old path when it does).
  for (let i = 0; i < 100; i++) {
    restart.outcome = (await (await fetch("/metrics")).text()).split("\\n")
      .filter((l) => l.startsWith("airlane_webrtc_ice_restarts_total{"));
    if (restart.outcome.some((l) => !l.endsWith(" 0.0"))) break;
    await sleep(100);
  }
  console.log(`ice restart: ${JSON.stringify(restart)}`);

  // 3. The same channel, on the new path: what was sent before it arrives (the first
  // generation's next 2 events), and a new generation runs to its end.
  last = (await readGeneration(first, peers[0], 12)).id;
  first.channel.send(JSON.stringify({ op: "ping", ref: "after-restart" }));
  while ((await first.next()).op !== "pong");
  restart.after = [];
  first.channel.send(JSON.stringify({
    op: "generate", subscribe: true, request: request("again"),
  }));
  await readGeneration(first, restart.after, 1000);

  // 4. A new peer connection resumes the first generation from the last id seen.
  first.pc.close();
  await fetch(first.session, { method: "DELETE" });
  if (peers[0][peers[0].length - 1].event.kind !== "done") {
    const second = await connect();
    console.log(`resuming ${stream} from ${last}`);
    second.channel.send(JSON.stringify({ op: "subscribe", stream, from: last }));
    await readGeneration(second, peers[1], 1000);
    second.pc.close();
  }
  return { peers, pairs, restart };
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
