// A client of Airlane's RSocket transport built on RSocket-JS (rsocket-core 1.0.0-alpha line),
// for the interoperability tests (tests/rsocket/test_js_clients.py). One scenario a run:
//
//   node rsocket-client.mjs --transport tcp --host 127.0.0.1 --port 7878 --scenario stream
//   node rsocket-client.mjs --transport ws --url ws://127.0.0.1:8080/v1/rsocket --scenario slow
//
// It prints one JSON line with what it saw on stdout and exits 0; an unexpected failure (or the
// overall deadline) exits 1 with the error on stderr. Every wait is bounded.
//
// Scenarios: stream, slow, response, fnf, channel, bad-route; against a gateway with an API key
// (--token KEY): auth (bearer tokens per request) and setup-auth (simple credentials in SETUP).

import { createRequire } from "node:module";
import { parseArgs } from "node:util";

// The rsocket-js packages are CommonJS; require them as such.
const require = createRequire(import.meta.url);
const { RSocketConnector } = require("rsocket-core");
const { TcpClientTransport } = require("rsocket-tcp-client");
const { WebsocketClientTransport } = require("rsocket-websocket-client");
const {
  WellKnownMimeType,
  encodeBearerAuthMetadata,
  encodeCompositeMetadata,
  encodeRoutes,
  encodeSimpleAuthMetadata,
} = require("rsocket-composite-metadata");
const WebSocket = require("ws");

const OVERALL_TIMEOUT_MS = 20_000;
const UNBOUNDED = 2 ** 31 - 1;

/** Why the connection closed, once it has: the ERROR on stream 0 (code and message), if any. */
let connectionError;

const { values: args } = parseArgs({
  options: {
    transport: { type: "string", default: "tcp" },
    host: { type: "string", default: "127.0.0.1" },
    port: { type: "string" },
    url: { type: "string" },
    scenario: { type: "string" },
    token: { type: "string" },
    "stream-id": { type: "string" },
  },
});

function chat(text = "hello", maxTokens = 20) {
  return {
    model: "airlane-synthetic",
    messages: [{ role: "user", content: text }],
    max_tokens: maxTokens,
  };
}

/** Composite metadata naming `route`, with a bearer token when given. */
function metadata(route, token) {
  const entries = [[WellKnownMimeType.MESSAGE_RSOCKET_ROUTING, encodeRoutes(route)]];
  if (token !== undefined) {
    entries.push([WellKnownMimeType.MESSAGE_RSOCKET_AUTHENTICATION, encodeBearerAuthMetadata(token)]);
  }
  return encodeCompositeMetadata(entries);
}

function request(route, body, token) {
  const data = body === undefined ? Buffer.alloc(0) : Buffer.from(JSON.stringify(body));
  return { data, metadata: metadata(route, token) };
}

function decode(payload) {
  if (!payload.data || payload.data.length === 0) return null;
  return JSON.parse(payload.data.toString("utf8"));
}

function errorInfo(error) {
  // RSocket-JS is compiled to ES5: its RSocketError comes out a plain Error with a `code`
  // (`instanceof RSocketError` is false), so look at the field.
  if (error && typeof error.code === "number") return { code: error.code, message: error.message };
  return { code: null, message: String(error && error.message ? error.message : error) };
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

function transport() {
  if (args.transport === "tcp") {
    if (!args.port) throw new Error("--port is needed with --transport tcp");
    return new TcpClientTransport({
      connectionOptions: { host: args.host, port: Number(args.port) },
    });
  }
  if (args.transport === "ws") {
    const url = args.url ?? `ws://${args.host}:${args.port}/v1/rsocket`;
    // Node 20 has no global WebSocket: the `ws` package stands in for the browser's.
    return new WebsocketClientTransport({ url, wsCreator: (u) => new WebSocket(u) });
  }
  throw new Error(`unknown transport ${args.transport}`);
}

/** Connect: SETUP with composite metadata and JSON data; for `setup-auth`, SETUP's metadata
 * carries simple credentials (user "agent", the key as the password). */
async function connect() {
  const setup = {
    dataMimeType: WellKnownMimeType.APPLICATION_JSON.string,
    metadataMimeType: WellKnownMimeType.MESSAGE_RSOCKET_COMPOSITE_METADATA.string,
    keepAlive: 10_000,
    lifetime: 60_000,
  };
  if (args.scenario === "setup-auth") {
    if (!args.token) throw new Error("--token is needed with --scenario setup-auth");
    const credentials = encodeSimpleAuthMetadata("agent", args.token);
    setup.payload = {
      data: null,
      metadata: encodeCompositeMetadata([
        [WellKnownMimeType.MESSAGE_RSOCKET_AUTHENTICATION, credentials],
      ]),
    };
  }
  const rsocket = await new RSocketConnector({ setup, transport: transport() }).connect();
  rsocket.onClose((error) => {
    connectionError = error ? errorInfo(error) : null;
  });
  return rsocket;
}

// ---- the interaction models as promises ----------------------------------------------------

function requestResponse(rsocket, route, body, token) {
  return new Promise((resolve, reject) => {
    rsocket.requestResponse(request(route, body, token), {
      onNext(payload) {
        resolve(decode(payload));
      },
      onComplete() {
        resolve(null);
      },
      onError: reject,
      onExtension() {},
    });
  });
}

/** Request-response that must fail: the error's code and message. */
async function refused(rsocket, route, body, token) {
  try {
    const answer = await requestResponse(rsocket, route, body, token);
    return { code: null, message: null, answer };
  } catch (error) {
    return errorInfo(error);
  }
}

function fireAndForget(rsocket, route, body) {
  // RSocket-JS calls onComplete once the frame is handed to the transport.
  return new Promise((resolve, reject) => {
    rsocket.fireAndForget(request(route, body), { onComplete: resolve, onError: reject });
  });
}

/** A request-stream with unbounded credit: every payload, decoded (`completedBy` says how it
 * ended: "payload" for a last PAYLOAD with NEXT|COMPLETE, "complete" for a bare COMPLETE). */
function requestStream(rsocket, route, body) {
  return new Promise((resolve, reject) => {
    const got = [];
    rsocket.requestStream(request(route, body), UNBOUNDED, {
      onNext(payload, isComplete) {
        got.push(decode(payload));
        if (isComplete) {
          got.completedBy = "payload";
          resolve(got);
        }
      },
      onComplete() {
        got.completedBy = "complete";
        resolve(got);
      },
      onError: reject,
      onExtension() {},
    });
  });
}

// ---- scenarios -----------------------------------------------------------------------------

async function stream(rsocket) {
  const payloads = await requestStream(rsocket, "chat.completions", chat("stream"));
  return { payloads, completed_by: payloads.completedBy };
}

/** One payload granted at a time, each next one asked for a little after the last arrived:
 * at most one payload may arrive between two grants. Then the stream's snapshot, whose text
 * the deltas must add up to (the server may join deltas for a slow reader, not drop them). */
async function slow(rsocket) {
  const result = await slowStream(rsocket);
  const streamId = result.payloads[0].stream_id;
  const snapshot = await requestResponse(rsocket, "streams.snapshot", { stream_id: streamId });
  return { ...result, snapshot };
}

function slowStream(rsocket) {
  return new Promise((resolve, reject) => {
    const payloads = [];
    let sinceGrant = 0;
    let maxBetweenGrants = 0;
    let grants = 1;
    let done = false;
    const subscription = rsocket.requestStream(
      request("chat.completions", chat("slow", 200)),
      1,
      {
        onNext(payload, isComplete) {
          payloads.push(decode(payload));
          sinceGrant += 1;
          maxBetweenGrants = Math.max(maxBetweenGrants, sinceGrant);
          if (isComplete) {
            finish("payload");
            return;
          }
          setTimeout(() => {
            if (done) return;
            sinceGrant = 0;
            grants += 1;
            subscription.request(1);
          }, 5);
        },
        onComplete() {
          finish("complete");
        },
        onError(error) {
          done = true;
          reject(error);
        },
        onExtension() {},
      },
    );
    function finish(completedBy) {
      if (done) return;
      done = true;
      resolve({
        payloads,
        grants,
        max_between_grants: maxBetweenGrants,
        completed_by: completedBy,
      });
    }
  });
}

async function response(rsocket) {
  const payloads = await requestStream(rsocket, "chat.completions", chat("response"));
  const streamId = payloads[0].stream_id;
  const info = await requestResponse(rsocket, "streams.info", { stream_id: streamId });
  const snapshot = await requestResponse(rsocket, "streams.snapshot", { stream_id: streamId });
  const missing = await refused(rsocket, "streams.info", { stream_id: `missing-${streamId}` });
  return { payloads, info, snapshot, missing };
}

async function fnf(rsocket) {
  const streamId = args["stream-id"] ?? `js-fnf-${args.transport}-${process.pid}`;
  for (let n = 0; n < 5; n++) {
    const body = { stream_id: streamId, event: { kind: "message", payload: { n } } };
    await fireAndForget(rsocket, "streams.publish", body);
  }
  // Fire-and-forget has no answer: poll the stream's status until the server has run them.
  let info = null;
  let polls = 0;
  const deadline = Date.now() + 5_000;
  while (Date.now() < deadline) {
    polls += 1;
    try {
      info = await requestResponse(rsocket, "streams.info", { stream_id: streamId });
    } catch (error) {
      info = { error: errorInfo(error) }; // not created yet
    }
    if (info && info.last_seq >= 5) break;
    await sleep(20);
  }
  const published = await requestResponse(rsocket, "streams.publish", {
    stream_id: streamId,
    event: { payload: { n: 5 } },
  });
  return { stream_id: streamId, info, polls, published };
}

/** An agent session: generate, then (once the server grants credit) publish, then complete
 * the client's side with a bare COMPLETE; collect every payload until the server completes. */
async function channel(rsocket) {
  const notes = `js-notes-${args.transport}-${process.pid}`;
  const commands = [
    { op: "generate", id: 1, request: chat("agent") },
    { op: "publish", id: 2, stream_id: notes, event: { payload: { note: "thinking" } } },
  ];
  return new Promise((resolve, reject) => {
    const got = [];
    const granted = [];
    let sent = 1; // the request's own payload needs no credit
    let credit = 0;
    let completedOurSide = false;
    let done = false;
    const finish = (completedBy) => {
      if (done) return;
      done = true;
      resolve({ notes, got, granted, sent, completed_by: completedBy });
    };
    const sendMore = () => {
      while (credit > 0 && sent < commands.length) {
        credit -= 1;
        requester.onNext({ data: Buffer.from(JSON.stringify(commands[sent])) }, false);
        sent += 1;
      }
      if (sent === commands.length && !completedOurSide) {
        completedOurSide = true;
        requester.onComplete();
      }
    };
    const requester = rsocket.requestChannel(
      request("agent.session", commands[0]),
      UNBOUNDED,
      false,
      {
        onNext(payload, isComplete) {
          const message = decode(payload);
          if (message !== null) got.push(message);
          if (isComplete) finish("payload");
        },
        onComplete() {
          finish("complete");
        },
        onError(error) {
          if (done) return;
          done = true;
          reject(error);
        },
        onExtension() {},
        // The server's REQUEST_N: credit for our commands.
        request(n) {
          granted.push(n);
          credit += n;
          sendMore();
        },
        cancel() {
          if (done) return;
          done = true;
          reject(new Error(`the server cancelled our side after ${sent} commands`));
        },
      },
    );
  });
}

async function badRoute(rsocket) {
  const error = await refused(rsocket, "no.such.route", { stream_id: "x" });
  // The connection goes on after a refused request.
  const after = await refused(rsocket, "streams.info", { stream_id: "js-no-such-stream" });
  return { error, after };
}

/** Against a gateway with an API key: a request without credentials is refused, one with
 * the key as a bearer token in its own metadata is let in. */
async function auth(rsocket) {
  if (!args.token) throw new Error("--token is needed with --scenario auth");
  const streamId = `js-auth-${args.transport}-${process.pid}`;
  const body = { stream_id: streamId, event: { payload: { n: 1 } } };
  const anonymous = await refused(rsocket, "streams.publish", body);
  const published = await requestResponse(rsocket, "streams.publish", body, args.token);
  const wrong = await refused(rsocket, "streams.publish", body, `${args.token}-wrong`);
  return { anonymous, published, wrong };
}

/** Credentials in SETUP stand for every request of the connection; wrong ones get the
 * connection closed (REJECTED_SETUP), which fails the first request (`refused`). */
async function setupAuth(rsocket) {
  const streamId = `js-setup-auth-${args.transport}-${process.pid}`;
  const body = { stream_id: streamId, event: { payload: { n: 1 } } };
  let published;
  try {
    published = await requestResponse(rsocket, "streams.publish", body);
  } catch (error) {
    return { refused: errorInfo(error), connection_error: connectionError ?? null };
  }
  const info = await requestResponse(rsocket, "streams.info", { stream_id: streamId });
  return { published, info };
}

const SCENARIOS = {
  stream,
  slow,
  response,
  fnf,
  channel,
  "bad-route": badRoute,
  auth,
  "setup-auth": setupAuth,
};

async function main() {
  const scenario = SCENARIOS[args.scenario];
  if (!scenario) throw new Error(`unknown scenario ${args.scenario}`);
  const rsocket = await connect();
  try {
    const result = await scenario(rsocket);
    return { transport: args.transport, scenario: args.scenario, ...result };
  } finally {
    rsocket.close();
  }
}

const deadline = setTimeout(() => {
  process.stderr.write(`timed out after ${OVERALL_TIMEOUT_MS} ms (scenario ${args.scenario})\n`);
  process.exit(1);
}, OVERALL_TIMEOUT_MS);

main().then(
  (result) => {
    clearTimeout(deadline);
    process.stdout.write(`${JSON.stringify(result)}\n`, () => process.exit(0));
  },
  (error) => {
    clearTimeout(deadline);
    const info = errorInfo(error);
    process.stderr.write(
      `rsocket-client ${args.scenario} failed: code=${info.code} ${info.message}\n${error?.stack ?? ""}\n`,
    );
    process.exit(1);
  },
);
