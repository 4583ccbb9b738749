// A Waku relay peer built on js-libp2p's own gossipsub (npm "@chainsafe/libp2p-gossipsub"),
// for the Waku service node's relay interop tests: gossipsub v1.1 as nobody here wrote it,
// configured the way Waku relay (11/WAKU2-RELAY) runs it, against our relay.
//
//   node relay-peer.mjs
//
// Gossipsub here speaks only "/vac/waku/relay/2.0.0", under the StrictNoSign policy (messages
// carry no from, seqno, signature or key), and identifies a message by its Waku deterministic
// hash (14/WAKU2-MESSAGE): sha256(pubsubTopic || payload || contentTopic || meta || timestamp
// as 8 bytes big-endian, the last omitted when 0 or absent), computed here from the topic and
// the WakuMessage in the data. Transports: WebSocket (plain ws:// to 127.0.0.1 allowed) and
// TCP; Noise; mplex; identify and ping besides.
//
// It reads one JSON command a line on stdin and answers with JSON lines on stdout (each reply
// carries the command's "id" when it had one); diagnostics go to stderr (DEBUG=libp2p:* for
// the libraries' own logs, DEBUG=libp2p:gossipsub* for gossipsub's). Commands run one at a
// time, in order; each is bounded by "timeoutMs" (default 20000).
//   {"op":"start","peer":"/ip4/127.0.0.1/tcp/P/ws/p2p/<id>","topics":["/waku/2/rs/42/3"]}
//       subscribes the topics, dials the peer and waits until gossipsub has the peer among
//       the subscribers of every topic (it told us its subscriptions).
//       -> {"op":"started","peerId","addresses","remotePeer","subscribers":{topic:[ids]},
//           "mesh":{topic:[ids]},"protocols":[the remote's, from identify]}
//       With "listen":["/ip4/127.0.0.1/tcp/0/ws",...] it listens too ("addresses" in the reply,
//       each with /p2p/<our id>), and "peer" may be left out: the peer then dials us, and
//   {"op":"await","peer":<peer id>,"topics"?} waits until that peer has subscribed to the
//       topics (default: all of ours) -> {"op":"subscribed","remotePeer","subscribers","mesh",...}
//   {"op":"publish","topic","contentTopic","payload":<base64>,"timestampNs":"<decimal>"?,
//    "meta":<base64>?,"ephemeral":bool?}
//       timestamp default: now, in nanoseconds (ms * 1e6); "0" sends 0 (hashed as absent).
//       -> {"op":"published","recipients":[peer ids],"hash":<hex>,"timestamp":<ns string>}
//   {"op":"peers"} -> {"op":"peers","peerId","topics","subscribers","mesh","gossipsubPeers",
//       "scores":{peer id: gossipsub score},"connections":[{remotePeer,remoteAddr,streams,...}]}
//   {"op":"stop"} (or EOF on stdin) -> {"op":"stopped"}, exit 0
// Every message gossipsub delivers on a subscribed topic:
//   {"event":"message","topic","contentTopic","payload":<base64>,"timestamp":<ns string|null>,
//    "meta":<base64|null>,"ephemeral","hash":<hex, computed here>,"msgId":<hex, gossipsub's id>,
//    "from":<propagation source peer id>}
// A command that fails answers {"op":"error","message":...} and the peer carries on.

import { createHash } from "node:crypto";

// First: it supplies what Node 20 lacks before any libp2p package loads.
import { DEFAULT_TIMEOUT_MS, say, serveCommands, warn, withTimeout } from "./jsonl.mjs";

import { multiaddr } from "@multiformats/multiaddr";

const { createLibp2p } = await import("libp2p");
const { GossipSub } = await import("@chainsafe/libp2p-gossipsub");
const { webSockets } = await import("@libp2p/websockets");
const wsFilters = await import("@libp2p/websockets/filters");
const { tcp } = await import("@libp2p/tcp");
const { noise } = await import("@chainsafe/libp2p-noise");
const { mplex } = await import("@libp2p/mplex");
const { identify } = await import("@libp2p/identify");
const { ping } = await import("@libp2p/ping");
const { WakuMessage } = await import("@waku/proto");

const RELAY_CODEC = "/vac/waku/relay/2.0.0";

let node = null;

const base64 = (bytes) => Buffer.from(bytes ?? []).toString("base64");
const fromBase64 = (text) => new Uint8Array(Buffer.from(text ?? "", "base64"));
const hex = (bytes) => Buffer.from(bytes).toString("hex");

// The Waku deterministic message hash, written out here rather than taken from @waku/core so
// that it is a second, independent reading of the spec.
function wakuHash(pubsubTopic, message) {
  const hash = createHash("sha256");
  hash.update(Buffer.from(pubsubTopic, "utf8"));
  hash.update(message.payload ?? new Uint8Array());
  hash.update(Buffer.from(message.contentTopic ?? "", "utf8"));
  if (message.meta) hash.update(message.meta);
  const timestamp = message.timestamp ?? 0n;
  if (timestamp !== 0n) {
    const bytes = Buffer.alloc(8);
    bytes.writeBigInt64BE(BigInt.asIntN(64, timestamp));
    hash.update(bytes);
  }
  return new Uint8Array(hash.digest());
}

// Gossipsub's message id: the Waku hash of the WakuMessage in the data. Data that is no
// WakuMessage gets sha256(topic || data), so gossipsub still tells such messages apart.
function msgIdFn(msg) {
  try {
    return wakuHash(msg.topic, WakuMessage.decode(msg.data));
  } catch (error) {
    warn(`msgIdFn: data on ${msg.topic} is no WakuMessage`, error);
    return new Uint8Array(createHash("sha256").update(msg.topic).update(msg.data).digest());
  }
}

function relay(components) {
  const pubsub = new GossipSub(components, {
    globalSignaturePolicy: "StrictNoSign",
    msgIdFn,
    allowPublishToZeroTopicPeers: true,
    emitSelf: false,
    floodPublish: true,
    fallbackToFloodsub: false,
    // One peer is the whole network here: a mesh of one is a full mesh.
    D: 1,
    Dlo: 1,
    Dhi: 2,
    Dout: 0,
    Dlazy: 1,
    heartbeatInterval: 500,
  });
  // 14.x takes no protocol option: the protocols it registers, handles and dials are this
  // field (what @waku/relay sets too), which start() registers: set before libp2p starts it.
  pubsub.multicodecs = [RELAY_CODEC];
  return pubsub;
}

function requireNode() {
  if (!node) throw new Error("not started");
  return node;
}

function requireString(cmd, field) {
  if (typeof cmd[field] !== "string" || !cmd[field]) throw new Error(`${field} is required`);
  return cmd[field];
}

function topicPeers(pubsub) {
  const subscribers = {};
  const mesh = {};
  for (const topic of pubsub.getTopics()) {
    subscribers[topic] = pubsub.getSubscribers(topic).map((p) => p.toString());
    mesh[topic] = pubsub.getMeshPeers(topic);
  }
  return { subscribers, mesh };
}

function onMessage(event) {
  const { propagationSource, msg } = event.detail;
  let message;
  try {
    message = WakuMessage.decode(msg.data);
  } catch (error) {
    warn(`a message on ${msg.topic} is no WakuMessage`, error);
    say({ event: "undecodable", topic: msg.topic, data: base64(msg.data) });
    return;
  }
  say({
    event: "message",
    topic: msg.topic,
    contentTopic: message.contentTopic,
    payload: base64(message.payload),
    timestamp: message.timestamp === undefined ? null : message.timestamp.toString(),
    meta: message.meta && message.meta.length ? base64(message.meta) : null,
    ephemeral: message.ephemeral ?? null,
    hash: hex(wakuHash(msg.topic, message)),
    // gossipsub keeps ids as base64 strings (its default msgIdToStrFn)
    msgId: Buffer.from(event.detail.msgId, "base64").toString("hex"),
    signed: msg.type === "signed",
    from: propagationSource ? propagationSource.toString() : null,
  });
}

async function start(cmd) {
  if (node) throw new Error("already started");
  const topics = cmd.topics ?? [];
  if (!Array.isArray(topics) || topics.some((t) => typeof t !== "string")) {
    throw new Error("topics must be a list of pubsub topics");
  }
  const listen = cmd.listen ?? [];
  if (cmd.peer === undefined && listen.length === 0) {
    throw new Error("peer (a multiaddr with /p2p/<id>) or listen is required");
  }
  const peer = cmd.peer === undefined ? null : multiaddr(requireString(cmd, "peer"));
  const remote = peer === null ? null : peer.getPeerId();
  if (peer !== null && !remote) throw new Error("peer multiaddr has no /p2p/<id>");
  const timeoutMs = cmd.timeoutMs ?? DEFAULT_TIMEOUT_MS;

  node = await createLibp2p({
    addresses: { listen },
    // The default (wss-only) filter refuses plain ws://127.0.0.1.
    transports: [webSockets({ filter: wsFilters.all }), tcp()],
    connectionEncrypters: [noise()],
    streamMuxers: [mplex()],
    connectionGater: { denyDialMultiaddr: async () => false },
    services: { identify: identify(), ping: ping(), pubsub: relay },
  });
  try {
    const pubsub = node.services.pubsub;
    pubsub.addEventListener("gossipsub:message", onMessage);
    // Subscribed before any connection, so the peer's first GRAFT finds us on the topic.
    for (const topic of topics) pubsub.subscribe(topic);
    const started = {
      op: "started",
      peerId: node.peerId.toString(),
      addresses: node.getMultiaddrs().map((a) => a.toString()),
    };
    if (peer === null) return { ...started, ...topicPeers(pubsub) };
    await withTimeout(node.dial(peer), timeoutMs, "dial");
    return { ...started, ...(await awaitSubscribed(remote, topics, timeoutMs)) };
  } catch (error) {
    await stopNode();
    throw error;
  }
}

// Identify tells us the peer runs the relay protocol; gossipsub then opens its stream and
// sends our subscriptions, and the peer's own stream brings its subscriptions.
async function awaitSubscribed(remote, topics, timeoutMs) {
  const pubsub = node.services.pubsub;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const missing = topics.filter(
      (t) => !pubsub.getSubscribers(t).some((p) => p.toString() === remote),
    );
    if (missing.length === 0) break;
    if (Date.now() > deadline) {
      const protocols = await remoteProtocols(remote);
      throw new Error(
        `the peer did not subscribe to ${missing.join(", ")} ` +
          `(connected: ${node.getPeers().some((p) => p.toString() === remote)}, ` +
          `protocols: ${protocols.join(", ")})`,
      );
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  return { remotePeer: remote, ...topicPeers(pubsub), protocols: await remoteProtocols(remote) };
}

// A node that listens waits for the peer to dial it: {"op":"await","peer":<peer id>,"topics"}.
async function awaitPeer(cmd) {
  requireNode();
  const topics = cmd.topics ?? node.services.pubsub.getTopics();
  const result = await awaitSubscribed(
    requireString(cmd, "peer"),
    topics,
    cmd.timeoutMs ?? DEFAULT_TIMEOUT_MS,
  );
  return { op: "subscribed", ...result };
}

async function remoteProtocols(remote) {
  const peerId = node.getPeers().find((p) => p.toString() === remote);
  if (!peerId) return [];
  try {
    return (await node.peerStore.get(peerId)).protocols;
  } catch {
    return [];
  }
}

async function publish(cmd) {
  const pubsub = requireNode().services.pubsub;
  const topic = requireString(cmd, "topic");
  const message = {
    payload: fromBase64(cmd.payload),
    contentTopic: requireString(cmd, "contentTopic"),
    version: 0,
    timestamp:
      cmd.timestampNs !== undefined && cmd.timestampNs !== null
        ? BigInt(cmd.timestampNs)
        : BigInt(Date.now()) * 1_000_000n,
  };
  if (cmd.meta) message.meta = fromBase64(cmd.meta);
  if (cmd.ephemeral !== undefined) message.ephemeral = Boolean(cmd.ephemeral);
  const data = WakuMessage.encode(message);
  const result = await pubsub.publish(topic, data);
  return {
    op: "published",
    topic,
    recipients: result.recipients.map((p) => p.toString()),
    hash: hex(wakuHash(topic, message)),
    timestamp: message.timestamp.toString(),
  };
}

async function peers() {
  if (!node) return { op: "peers", started: false };
  const pubsub = node.services.pubsub;
  return {
    op: "peers",
    started: true,
    peerId: node.peerId.toString(),
    topics: pubsub.getTopics(),
    ...topicPeers(pubsub),
    gossipsubPeers: pubsub.getPeers().map((p) => p.toString()),
    // gossipsub's peer scores (negative: it would stop meshing with / accepting from the peer)
    scores: Object.fromEntries(pubsub.getPeers().map((p) => [p.toString(), pubsub.getScore(p.toString())])),
    connections: node.getConnections().map((c) => ({
      remotePeer: c.remotePeer.toString(),
      remoteAddr: c.remoteAddr.toString(),
      encryption: c.encryption,
      multiplexer: c.multiplexer,
      streams: c.streams.map((s) => `${s.direction}:${s.protocol}`),
    })),
  };
}

async function stopNode() {
  const stopping = node;
  node = null;
  if (stopping) await stopping.stop();
}

const handlers = { start, await: awaitPeer, publish, peers };

serveCommands("relay-peer", handlers, stopNode);
