// A js-waku light node (npm "@waku/sdk"), for the Waku service node interop tests: Filter,
// LightPush and Store as a client nobody here wrote uses them against our service node.
//
//   node waku-client.mjs
//
// It reads one JSON command a line on stdin and answers with JSON lines on stdout (each reply
// carries the command's "id" when it had one); diagnostics go to stderr (DEBUG=waku*,libp2p*
// for the libraries' own logs). Commands run one at a time, in order; each is bounded by
// "timeoutMs" (default 20000).
//   {"op":"start","peer":"/ip4/127.0.0.1/tcp/P/ws/p2p/<id>","clusterId":N,"shards":[0]}
//       static sharding: "shards" are the shards the node means to use; the first is the
//       default "shard" of the other commands. {"numShardsInCluster":K} instead of "shards"
//       selects auto-sharding (the shard then follows from the content topic).
//       "protocols" (default ["filter","lightpush","store"]) are those the peer must offer.
//       -> {"op":"started","peerId","remotePeers","remoteProtocols","remoteShardInfo",...}
//   Under static sharding, "shard" in a command overrides the default shard.
//   {"op":"subscribe","contentTopic":...}      -> {"op":"subscribed","pubsubTopic"}
//       then every message: {"event":"message","contentTopic","pubsubTopic","payload":<base64>,
//       "timestamp":<nanoseconds, decimal string, as on the wire>,"timestampMs","hash":<hex>}
//   {"op":"unsubscribe","contentTopic":...}    -> {"op":"unsubscribed","ok"}
//   {"op":"push","contentTopic","payload":<base64>,"ephemeral":false,"timestampMs"?}
//       ("autoRetry": true keeps the SDK's background resends, "useLegacy": true pushes over v2)
//       -> {"op":"pushed","successes":[peer ids],"failures":[{"error","peerId"}],"hash",...}
//   {"op":"store","contentTopic","pageSize"?,"timeStart"?,"timeEnd"? (ms),"direction"?}
//       -> {"op":"stored","messages":[{payload,timestamp,timestampMs,contentTopic,pubsubTopic,hash}],"pages"}
//   {"op":"peers"}                             -> {"op":"peers","peers":[...]}
//   {"op":"stop"} (or EOF on stdin)            -> {"op":"stopped"}, exit 0
// A command that fails answers {"op":"error","message":...} and the client carries on.

// First: it supplies what Node 20 lacks before any libp2p package loads.
import { DEFAULT_TIMEOUT_MS, say, serveCommands, warn, withTimeout } from "./jsonl.mjs";

import { multiaddr } from "@multiformats/multiaddr";

const { createLightNode, Protocols, utils, waku } = await import("@waku/sdk");

const { FilterCodecs, LightPushCodec, LightPushCodecV2, StoreCodec, messageHashStr } = waku;

let node = null;
let shards = []; // static sharding: the shards "start" named, the first being the default
const decoders = new Map(); // subscribed content topic+shard -> the decoder filter knows it by

const base64 = (bytes) => Buffer.from(bytes ?? []).toString("base64");

// A decoded message as the test sees it: the timestamp as the wire's nanoseconds (exact, so
// it may be compared with what the service node stored) and the hash js-waku computes.
function describe(message) {
  const ns = message.proto?.timestamp;
  return {
    contentTopic: message.contentTopic,
    pubsubTopic: message.pubsubTopic,
    payload: base64(message.payload),
    timestamp: ns === undefined || ns === null ? null : ns.toString(),
    timestampMs: message.timestamp ? message.timestamp.getTime() : null,
    meta: message.meta && message.meta.length ? base64(message.meta) : null,
    ephemeral: message.ephemeral,
    hash: message.hashStr,
  };
}

function requireNode() {
  if (!node) throw new Error("not started");
  return node;
}

// Under static sharding every encoder and decoder needs a shard; auto-sharding derives it from
// the content topic and ignores this.
function shardOf(cmd) {
  return cmd.shard ?? shards[0];
}

function requireTopic(cmd) {
  if (typeof cmd.contentTopic !== "string" || !cmd.contentTopic) {
    throw new Error("contentTopic is required");
  }
  return cmd.contentTopic;
}

async function peerInfo(id) {
  const peer = await node.libp2p.peerStore.get(id);
  const shardBytes = peer.metadata.get("shardInfo");
  const agent = peer.metadata.get("AgentVersion");
  return {
    peerId: id.toString(),
    protocols: peer.protocols,
    addresses: peer.addresses.map((a) => a.multiaddr.toString()),
    agentVersion: agent ? Buffer.from(agent).toString("utf8") : null,
    shardInfo: shardBytes ? utils.decodeRelayShard(shardBytes) : null,
    connections: node.libp2p.getConnections(id).map((c) => ({
      remoteAddr: c.remoteAddr.toString(),
      direction: c.direction,
      status: c.status,
      encryption: c.encryption,
      multiplexer: c.multiplexer,
      streams: c.streams.map((s) => `${s.direction}:${s.protocol}`),
    })),
  };
}

// waitForPeers alone is not enough: once a connection exists it settles as soon as it has tried
// the metadata handshake, whether or not identify has told us the peer's protocols yet. So wait,
// as well, until the peer store shows every protocol the SDK will pick the peer by.
async function waitUntilUsable(remote, required, deadline) {
  const needs = {
    [Protocols.Filter]: [FilterCodecs.SUBSCRIBE],
    [Protocols.LightPush]: [LightPushCodec, LightPushCodecV2],
    [Protocols.Store]: [StoreCodec],
  };
  for (;;) {
    const peerId = node.libp2p.getPeers().find((p) => p.toString() === remote);
    const protocols = peerId ? (await node.libp2p.peerStore.get(peerId)).protocols : [];
    const missing = required.filter((p) => !needs[p].some((codec) => protocols.includes(codec)));
    if (peerId && missing.length === 0) return { peerId, protocols };
    if (Date.now() > deadline) {
      throw new Error(
        peerId
          ? `peer connected but does not advertise ${missing.join(", ")} (has ${protocols.join(", ")})`
          : "peer not connected",
      );
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

async function start(cmd) {
  if (node) throw new Error("already started");
  if (typeof cmd.peer !== "string") throw new Error("peer (a multiaddr with /p2p/<id>) is required");
  const remote = multiaddr(cmd.peer).getPeerId();
  if (!remote) throw new Error("peer multiaddr has no /p2p/<id>");
  const clusterId = cmd.clusterId ?? 1;
  const networkConfig =
    cmd.numShardsInCluster !== undefined
      ? { clusterId, numShardsInCluster: cmd.numShardsInCluster }
      : { clusterId };
  shards = cmd.numShardsInCluster !== undefined ? [] : (cmd.shards ?? [0]);
  const required = cmd.protocols ?? [Protocols.Filter, Protocols.LightPush, Protocols.Store];

  node = await createLightNode({
    networkConfig,
    // Only the peer the test names: no DNS/peer-exchange/cache bootstrap.
    defaultBootstrap: false,
    // "peerExchange": true asks the peer for others (the test of the node's records).
    discovery: { dns: false, peerExchange: cmd.peerExchange === true, peerCache: false },
    // Plain ws on 127.0.0.1 is refused by the default (wss-only) transport filter.
    libp2p: { filterMultiaddrs: false, hideWebSocketInfo: true },
    numPeersToUse: 1,
  });
  try {
    const timeoutMs = cmd.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    const deadline = Date.now() + timeoutMs;
    // As an app would: WakuNode.dial opens the connection and a stream for one of the
    // protocols it mounts, and identify then runs on the new connection.
    await withTimeout(node.dial(cmd.peer), timeoutMs, "dial");
    await node.waitForPeers(required, Math.max(1, deadline - Date.now()));
    const { peerId, protocols: remoteProtocols } = await waitUntilUsable(remote, required, deadline);
    // Cached if waitForPeers did it; else this is the light node's own query.
    const metadata = await withTimeout(
      node.libp2p.services.metadata.confirmOrAttemptHandshake(peerId),
      Math.max(1, deadline - Date.now()),
      "metadata handshake",
    );
    // Once the peer has told its shards, the SDK picks it only for pubsub topics on them
    // (PeerManager.isPeerOnPubsub): say so now rather than as "No peer available" later.
    const info = metadata.shardInfo;
    const offShards = shards.filter((s) => !info?.shards?.includes(s));
    if (info && (info.clusterId !== clusterId || offShards.length)) {
      throw new Error(
        `peer is on cluster ${info.clusterId} shards [${info.shards}], ` +
          `not cluster ${clusterId} shards [${shards}]: js-waku would not use it`,
      );
    }
    return {
      op: "started",
      peerId: node.peerId.toString(),
      remotePeers: node.libp2p.getPeers().map((p) => p.toString()),
      remoteProtocols,
      remoteShardInfo: metadata.shardInfo ?? null,
      metadataError: metadata.error ?? null,
      networkConfig,
      pubsubTopics: shards.map((s) => `/waku/2/rs/${clusterId}/${s}`),
    };
  } catch (error) {
    // Leave nothing dialing in the background: a failed start may be retried.
    await stopNode();
    throw error;
  }
}

async function stopNode() {
  const stopping = node;
  node = null;
  decoders.clear();
  if (!stopping) return;
  stopping.filter?.unsubscribeAll();
  await stopping.stop();
}

async function subscribe(cmd) {
  const n = requireNode();
  const contentTopic = requireTopic(cmd);
  const key = `${contentTopic}|${shardOf(cmd)}`;
  const decoder = decoders.get(key) ?? n.createDecoder({ contentTopic, shardId: shardOf(cmd) });
  const ok = await n.filter.subscribe(decoder, (message) => {
    say({ event: "message", ...describe(message) });
  });
  if (!ok) throw new Error(`filter subscribe to ${contentTopic} on ${decoder.pubsubTopic} failed`);
  // Filter keys its callbacks by decoder object: unsubscribe must hand back this one.
  decoders.set(key, decoder);
  return { op: "subscribed", contentTopic, pubsubTopic: decoder.pubsubTopic };
}

async function unsubscribe(cmd) {
  const n = requireNode();
  const contentTopic = requireTopic(cmd);
  const key = `${contentTopic}|${shardOf(cmd)}`;
  const decoder = decoders.get(key);
  if (!decoder) throw new Error(`not subscribed to ${contentTopic}`);
  decoders.delete(key);
  // js-waku sends UNSUBSCRIBE without waiting for the service node's answer: ok says only that
  // the request was written.
  const ok = await n.filter.unsubscribe(decoder);
  return { op: "unsubscribed", contentTopic, ok };
}

async function push(cmd) {
  const n = requireNode();
  const contentTopic = requireTopic(cmd);
  const encoder = n.createEncoder({
    contentTopic,
    shardId: shardOf(cmd),
    ephemeral: Boolean(cmd.ephemeral),
  });
  // The timestamp is fixed here, not by the encoder, so the hash reported is the one sent.
  const message = {
    payload: new Uint8Array(Buffer.from(cmd.payload ?? "", "base64")),
    timestamp: new Date(cmd.timestampMs ?? Date.now()),
  };
  const proto = await encoder.toProtoObj(message);
  // autoRetry would resend a failed message in the background (and keep resending it), which
  // a test cannot account for: off unless asked. useLegacy selects light push v2.
  const result = await n.lightPush.send(encoder, message, {
    autoRetry: Boolean(cmd.autoRetry),
    useLegacy: Boolean(cmd.useLegacy),
  });
  return {
    op: "pushed",
    successes: result.successes.map((p) => p.toString()),
    failures: result.failures.map((f) => ({
      error: f.error,
      peerId: f.peerId ? f.peerId.toString() : null,
    })),
    pubsubTopic: encoder.pubsubTopic,
    timestamp: proto.timestamp.toString(),
    hash: messageHashStr(encoder.pubsubTopic, proto),
  };
}

async function store(cmd) {
  const n = requireNode();
  const contentTopic = requireTopic(cmd);
  const decoder = n.createDecoder({ contentTopic, shardId: shardOf(cmd) });
  const options = { paginationForward: cmd.direction !== "backward" };
  if (cmd.pageSize !== undefined) options.paginationLimit = cmd.pageSize;
  if (cmd.timeStart !== undefined) options.timeStart = new Date(cmd.timeStart);
  if (cmd.timeEnd !== undefined) options.timeEnd = new Date(cmd.timeEnd);
  const messages = [];
  let pages = 0;
  // One yield per non-empty page; js-waku pages by itself (cursor = the last message's hash,
  // or the first's going backward) until the service node answers an empty page.
  for await (const page of n.store.queryGenerator([decoder], options)) {
    pages += 1;
    for (const message of await Promise.all(page)) {
      if (message) messages.push(describe(message));
    }
  }
  return { op: "stored", pubsubTopic: decoder.pubsubTopic, messages, pages };
}

async function peers(cmd = {}) {
  if (!node) return { op: "peers", started: false, peers: [] };
  if (cmd.known) {
    // Every peer the peer store holds, connected or not (what discovery added).
    const known = await node.libp2p.peerStore.all();
    return {
      op: "peers",
      known: known.map((peer) => ({
        peerId: peer.id.toString(),
        addresses: peer.addresses.map(({ multiaddr: address }) => address.toString()),
      })),
    };
  }
  return {
    op: "peers",
    started: true,
    peerId: node.peerId.toString(),
    peers: await Promise.all(node.libp2p.getPeers().map(peerInfo)),
  };
}

const handlers = { start, subscribe, unsubscribe, push, store, peers };

serveCommands("waku-client", handlers, stopNode);
