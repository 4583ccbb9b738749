// The load-test contract served the Node way: a reference for `airlane bench --compare`.
//
// SSE through Node's own `http` module (res.write per event, waiting for 'drain' when the
// socket buffer is full, as Node streams expect), WebSocket through the `ws` package. Nothing
// is tuned beyond what a Node engineer would write.
//
//   node benchmarks/peers/node/server.js --port 0     # prints: listening on http://...
//
// The contract (the same as Airlane's GET /v1/loadtest/sse and /v1/loadtest/ws): query
// `chunks` (1..100000, default 200), `mode` (burst | paced), `interval_ms` (0.1..60000,
// default 20). Each chunk is one JSON object of about 1.2 KB that starts {"seq":N,"ts":T,
// (ts in CLOCK_MONOTONIC ns: process.hrtime.bigint() on Linux, the clock of Python's
// time.monotonic_ns()), then an OpenAI chat.completion.chunk body with 16 tokens and their
// log-probabilities. Burst: as fast as possible, ts the time the chunk was made, yielding to
// the event loop every 4 chunks. Paced: chunk i is due at start + i * interval, that is its
// ts, and it is never sent before it.
'use strict';

const http = require('node:http');
const { once } = require('node:events');
const { setImmediate: nextTurn, setTimeout: sleep } = require('node:timers/promises');
const { parseArgs } = require('node:util');
const { WebSocketServer, WebSocket } = require('ws');

const TOKENS_PER_CHUNK = 16;
const CHUNK_BYTES = 1200;
const YIELD_EVERY = 4;
const MAX_CHUNKS = 100000;
const MODEL = 'airlane-loadtest';
const WORDS = (
  'stream token model signal packet message event cursor buffer window frame channel lane ' +
  'gateway client server browser device river harbor garden lantern compass bridge meadow ' +
  'quiet bright gentle rapid steady careful runs moves carries sends holds reads writes ' +
  'café naïve Zürich 日本 🚀'
).split(' ');

class QueryError extends Error {}

function parseQuery(searchParams) {
  const chunks = Number(searchParams.get('chunks') ?? '200');
  const mode = searchParams.get('mode') ?? 'burst';
  const intervalMs = Number(searchParams.get('interval_ms') ?? '20');
  if (!Number.isInteger(chunks) || chunks < 1 || chunks > MAX_CHUNKS) {
    throw new QueryError(`'chunks' must be an integer between 1 and ${MAX_CHUNKS}`);
  }
  if (mode !== 'burst' && mode !== 'paced') {
    throw new QueryError("'mode' must be 'burst' or 'paced'");
  }
  if (!(intervalMs >= 0.1 && intervalMs <= 60000)) {
    throw new QueryError("'interval_ms' must be between 0.1 and 60000");
  }
  return { chunks, mode, intervalMs };
}

function pick(items) {
  return items[Math.floor(Math.random() * items.length)];
}

// One stream's chunk body, encoded once; seq and ts are spliced in front per chunk, as
// Airlane's synthetic backend does. (ts is a BigInt, which JSON.stringify cannot write.)
function chunkEncoder() {
  const tokens = Array.from({ length: TOKENS_PER_CHUNK }, () => ' ' + pick(WORDS));
  const id = Array.from({ length: 24 }, () => pick('0123456789abcdef')).join('');
  const body = {
    id: `chatcmpl-${id}`,
    object: 'chat.completion.chunk',
    created: 0,
    model: MODEL,
    system_fingerprint: 'fp_peer',
    choices: [
      {
        index: 0,
        delta: { content: tokens.join('') },
        logprobs: {
          content: tokens.map((token) => ({
            token,
            logprob: Math.round(-Math.random() * 2 * 10000) / 10000,
          })),
        },
        finish_reason: null,
      },
    ],
  };
  let tail = JSON.stringify(body).slice(1);
  const encode = (seq, ts) => `{"seq":${seq},"ts":${ts},${tail}`;
  // Pad to the target size counting a three-digit seq and a ts as long as today's clock.
  const size =
    Buffer.byteLength(encode(100, process.hrtime.bigint())) + ',"padding":""'.length;
  body.padding = '.'.repeat(Math.max(0, CHUNK_BYTES - size));
  tail = JSON.stringify(body).slice(1);
  return encode;
}

async function sleepUntil(deadline) {
  // setTimeout counts whole milliseconds on the loop's cached clock and may fire a little
  // early: sleep again for whatever is left, so that a chunk never leaves before its ts.
  let remaining;
  while ((remaining = deadline - process.hrtime.bigint()) > 0n) {
    await sleep(Math.ceil(Number(remaining) / 1e6));
  }
}

// The chunks of one stream, burst or paced. `send(chunk)` returns a promise, or nothing when
// it need not be waited for; `isOpen()` tells whether the client is still there.
async function streamChunks(query, send, isOpen) {
  const encode = chunkEncoder();
  if (query.mode === 'paced') {
    const start = process.hrtime.bigint();
    const intervalNs = query.intervalMs * 1e6;
    for (let index = 0; index < query.chunks && isOpen(); index++) {
      const ts = start + BigInt(Math.round(index * intervalNs));
      await sleepUntil(ts);
      await send(encode(index + 1, ts));
    }
    return;
  }
  for (let seq = 1; seq <= query.chunks && isOpen(); seq++) {
    await send(encode(seq, process.hrtime.bigint()));
    if (seq % YIELD_EVERY === 0) await nextTurn();
  }
}

async function serveSse(req, res, query) {
  res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache' });
  const closed = new AbortController();
  res.on('close', () => closed.abort());
  const send = (chunk) => {
    if (!res.write(`data: ${chunk}\n\n`)) {
      return once(res, 'drain', { signal: closed.signal }).catch(() => {});
    }
    return undefined;
  };
  await streamChunks(query, send, () => !closed.signal.aborted);
  res.end();
}

function serveWs(ws, query) {
  const send = (chunk) => {
    ws.send(chunk);
  };
  streamChunks(query, send, () => ws.readyState === WebSocket.OPEN)
    .then(() => ws.close(1000))
    .catch((error) => ws.close(1011, String(error)));
}

function handle(req, res) {
  const url = new URL(req.url, 'http://localhost');
  if (req.method === 'GET' && url.pathname === '/healthz') {
    res.writeHead(200, { 'Content-Type': 'application/json' });
    res.end(JSON.stringify({ pid: process.pid }));
  } else if (req.method === 'GET' && url.pathname === '/v1/loadtest/sse') {
    let query;
    try {
      query = parseQuery(url.searchParams);
    } catch (error) {
      res.writeHead(400, { 'Content-Type': 'text/plain' });
      res.end(error.message);
      return;
    }
    serveSse(req, res, query).catch((error) => res.destroy(error));
  } else {
    res.writeHead(404, { 'Content-Type': 'text/plain' });
    res.end('not found');
  }
}

function main() {
  const { values } = parseArgs({
    options: {
      host: { type: 'string', default: '127.0.0.1' },
      port: { type: 'string', default: '8000' },
    },
  });
  const server = http.createServer(handle);
  const wss = new WebSocketServer({ server, path: '/v1/loadtest/ws' });
  wss.on('connection', (ws, req) => {
    try {
      serveWs(ws, parseQuery(new URL(req.url, 'http://localhost').searchParams));
    } catch (error) {
      ws.close(1008, error instanceof QueryError ? error.message : 'bad request');
    }
  });
  server.listen(Number(values.port), values.host, () => {
    const { address, port } = server.address();
    const host = address.includes(':') ? `[${address}]` : address;
    console.log(`listening on http://${host}:${port}`);
  });
  // Stop on SIGINT/SIGTERM like the other servers do (Node's default would too, but with a
  // signal exit status instead of 0).
  for (const signal of ['SIGINT', 'SIGTERM']) {
    process.on(signal, () => process.exit(0));
  }
}

main();
