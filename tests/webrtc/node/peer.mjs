// A WebRTC peer nobody here wrote: libdatachannel through node-datachannel, for
// tests/webrtc/test_peers.py (run inside a lab namespace).
//
//   node peer.mjs --url http://10.77.0.2:18481
//
// It offers a data channel "airlane" to the gateway (POST /v1/webrtc), starts a generation,
// reads its first 10 events, closes that peer connection, offers a new one, resumes from the
// last event id and reads to "done". It prints one JSON line {"peers": [[...], [...]]} and
// exits 0, or exits 1 on an error or after --timeout-ms.

import { parseArgs } from "node:util";

import nodeDataChannel from "node-datachannel";

const { values: args } = parseArgs({
  options: {
    url: { type: "string" },
    "max-tokens": { type: "string", default: "200" },
    "timeout-ms": { type: "string", default: "40000" },
  },
});

function fail(error) {
  process.stderr.write(`${error && error.stack ? error.stack : error}\n`);
  process.exit(1);
}

// Where the run is, and what the peer connections went through: a timeout says both.
let stage = "start";
const states = [];
const deadline = setTimeout(
  () => fail(new Error(`timed out after ${args["timeout-ms"]} ms in stage "${stage}"; ` +
    `states: ${states.join(", ")}`)),
  Number(args["timeout-ms"]),
);

// libdatachannel's own account (ICE, DTLS, SCTP) goes to stderr, which the test shows on a
// failure.
nodeDataChannel.initLogger(process.env.PEER_LOG_LEVEL || "Warning", (level, message) => {
  process.stderr.write(`libdatachannel ${level}: ${message}\n`);
});

async function connect(name) {
  const pc = new nodeDataChannel.PeerConnection(name, { iceServers: [] });
  const gathered = new Promise((resolve) => {
    pc.onGatheringStateChange((state) => {
      states.push(`${name} gathering ${state}`);
      if (state === "complete") resolve();
    });
  });
  const channel = pc.createDataChannel("airlane");
  const inbox = [];
  let wake = null;
  channel.onMessage((data) => {
    inbox.push(JSON.parse(data));
    if (wake) wake();
  });
  const opened = new Promise((resolve, reject) => {
    channel.onOpen(resolve);
    pc.onStateChange((state) => {
      states.push(`${name} ${state}`);
      if (state === "failed") reject(new Error(`${name}: failed (${states.join(", ")})`));
    });
  });
  stage = `${name}: gathering`;
  await gathered;
  stage = `${name}: offering`;
  const offer = pc.localDescription();
  const response = await fetch(`${args.url}/v1/webrtc`, {
    method: "POST",
    headers: { "content-type": "application/sdp" },
    body: offer.sdp,
  });
  if (response.status !== 201) throw new Error(`offer: ${response.status} ${await response.text()}`);
  pc.setRemoteDescription(await response.text(), "answer");
  stage = `${name}: opening the channel`;
  await opened;
  async function next() {
    while (!inbox.length) await new Promise((resolve) => { wake = resolve; });
    return inbox.shift();
  }
  return { pc, channel, next, session: response.headers.get("location") };
}

async function main() {
  if (!args.url) throw new Error("--url is required");
  const peers = [[], []];
  const first = await connect("first");
  first.channel.sendMessage(JSON.stringify({
    op: "generate",
    subscribe: true,
    request: {
      model: "any",
      max_tokens: Number(args["max-tokens"]),
      messages: [{ role: "user", content: "hello" }],
    },
  }));
  let stream = null;
  let last = null;
  stage = "first: reading";
  for (;;) {
    const message = await first.next();
    if (message.op === "generated") stream = message.stream;
    if (message.op !== "event") continue;
    peers[0].push(message);
    last = message.id;
    if (message.event.kind === "done" || peers[0].length >= 10) break;
  }
  first.channel.close();
  first.pc.close();
  await fetch(`${args.url}${first.session}`, { method: "DELETE" });
  const second = await connect("second");
  second.channel.sendMessage(JSON.stringify({ op: "subscribe", stream, from: last }));
  stage = `second: reading from ${last}`;
  for (;;) {
    const message = await second.next();
    if (message.op !== "event") continue;
    peers[1].push(message);
    if (message.event.kind === "done" || message.event.kind === "error") break;
  }
  second.channel.close();
  second.pc.close();
  process.stdout.write(`${JSON.stringify({ peers })}\n`);
  clearTimeout(deadline);
  nodeDataChannel.cleanup();
}

main().catch(fail);
