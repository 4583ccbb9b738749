// A WebRTC peer nobody here wrote: libdatachannel through node-datachannel, for
// tests/webrtc/test_peers.py (run inside a lab namespace).
//
//   node peer.mjs --url http://10.77.0.2:18481
//
// It offers a data channel "airlane" to the gateway (POST /v1/webrtc), starts a generation,
// reads its first 10 events, closes that peer connection, offers a new one, resumes from the
// last event id and reads to "done". It prints one JSON line {"peers": [[...], [...]], ...}
// and exits 0, or exits 1 on an error or after --timeout-ms.
//
// With --move, the network changes under it after the first 10 events: it prints "move" and
// waits for a line on stdin (the test gives its namespace a new address meanwhile), keeps
// what the first channel received before, checks for a second that nothing more arrives
// there (the old path is gone), and resumes from the new address. libdatachannel cannot
// restart ICE (node-datachannel's restartIce says "Not implemented"), so a new peer
// connection is how such a peer carries on.

import { parseArgs } from "node:util";

import { request as httpRequest } from "node:http";
import { createInterface } from "node:readline";

import nodeDataChannel from "node-datachannel";
import { RTCPeerConnection } from "node-datachannel/polyfill";

const { values: args } = parseArgs({
  options: {
    url: { type: "string" },
    "max-tokens": { type: "string", default: "200" },
    move: { type: "boolean", default: false },
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
  const response = await signal("POST", "/v1/webrtc", offer.sdp);
  if (response.status !== 201) throw new Error(`offer: ${response.status} ${response.body}`);
  pc.setRemoteDescription(response.body, "answer");
  stage = `${name}: opening the channel`;
  await opened;
  async function next() {
    while (!inbox.length) await new Promise((resolve) => { wake = resolve; });
    return inbox.shift();
  }
  return { pc, channel, inbox, next, session: response.headers.location };
}

// One signalling request on a connection of its own: a connection kept alive from before a
// network change is dead, and fetch would wait on it for minutes.
function signal(method, path, body = "") {
  return new Promise((resolve, reject) => {
    const req = httpRequest(`${args.url}${path}`, {
      method,
      agent: false,
      headers: { "content-type": "application/sdp" },
      timeout: 10000,
    }, (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (chunk) => { text += chunk; });
      res.on("end", () => resolve({ status: res.statusCode, headers: res.headers, body: text }));
    });
    req.on("timeout", () => req.destroy(new Error(`${method} ${path}: no answer in 10 s`)));
    req.on("error", reject);
    req.end(body);
  });
}

// What restartIce does in node-datachannel's browser-like API: its message, or "supported".
function restartIceSupport() {
  const pc = new RTCPeerConnection();
  try {
    pc.restartIce();
    return "supported";
  } catch (error) {
    return error.message;
  } finally {
    pc.close();
  }
}

// The test's go-ahead: one line on stdin.
async function lineFromStdin() {
  const lines = createInterface({ input: process.stdin });
  for await (const line of lines) {
    lines.close();
    return line;
  }
  throw new Error("stdin closed before the go-ahead");
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
  const moved = {};
  if (args.move) {
    moved.restartIce = restartIceSupport();
    moved.from = first.pc.getSelectedCandidatePair()?.local.address;
    stage = "first: moving";
    process.stdout.write("move\n");
    await lineFromStdin();
    // What reached the channel before the move is the first peer's; after it, nothing can.
    for (const message of first.inbox.splice(0)) {
      if (message.op !== "event") continue;
      peers[0].push(message);
      last = message.id;
    }
    await new Promise((resolve) => setTimeout(resolve, 1000));
    moved.lateOnFirst = first.inbox.length;
  }
  first.channel.close();
  first.pc.close();
  await signal("DELETE", first.session);
  const second = await connect("second");
  if (args.move) moved.to = second.pc.getSelectedCandidatePair()?.local.address;
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
  process.stdout.write(`${JSON.stringify({ peers, moved })}\n`);
  clearTimeout(deadline);
  nodeDataChannel.cleanup();
}

main().catch(fail);
