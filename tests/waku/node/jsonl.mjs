// What the Node peers of the Waku tests share (waku-client.mjs, relay-peer.mjs): JSON lines
// on stdin and stdout, one command at a time, each bounded in time, and what Node 20 lacks.
//
// Import it before any libp2p package (as a static import, which runs first): it supplies
// Promise.withResolvers, new in Node 22, which libp2p's queues and locks (it-queue, mortice)
// call, and which the @waku packages (asking for Node >= 22) assume.

import { createInterface } from "node:readline";

Promise.withResolvers ??= function withResolvers() {
  let resolve;
  let reject;
  const promise = new this((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
};

// stdout is the protocol with the test: keep the libraries' console output (the SDK prints
// banners with console.info) out of it.
for (const level of ["log", "info", "debug", "warn"]) {
  console[level] = (...args) => console.error(...args);
}

export const DEFAULT_TIMEOUT_MS = 20_000;

let name = "node-peer";

export function say(line) {
  process.stdout.write(`${JSON.stringify(line)}\n`);
}

export function warn(what, error) {
  process.stderr.write(`${name}: ${what}: ${error && error.stack ? error.stack : error}\n`);
}

process.on("unhandledRejection", (error) => warn("unhandled rejection", error));
process.on("uncaughtException", (error) => warn("uncaught exception", error));

export function withTimeout(promise, ms, what) {
  let timer;
  const expired = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} timed out after ${ms} ms`)), ms);
  });
  return Promise.race([promise, expired]).finally(() => clearTimeout(timer));
}

// Read commands until EOF: each {"op": ...} goes to handlers[op], its reply (echoing "id")
// is printed; a failure is {"op":"error","message"} and the peer carries on. "stop", or EOF,
// runs stopNode and exits 0 once the last line is out. Commands run strictly in order, so a
// test can rely on one reply preceding the next command's effects. "start" bounds itself, so
// that on a timeout it can still take its half-made node down.
export function serveCommands(peerName, handlers, stopNode) {
  name = peerName;
  let finishing = false;

  async function finish(echo = {}) {
    if (finishing) return;
    finishing = true;
    try {
      await withTimeout(stopNode(), 10_000, "stop");
    } catch (error) {
      warn("stop", error);
    }
    // libp2p may leave timers that would keep the process alive.
    process.stdout.write(`${JSON.stringify({ op: "stopped", ...echo })}\n`, () => process.exit(0));
  }

  async function run(line) {
    let cmd;
    try {
      cmd = JSON.parse(line);
    } catch (error) {
      say({ op: "error", message: `not JSON: ${error.message}` });
      return;
    }
    const echo = cmd.id === undefined ? {} : { id: cmd.id };
    try {
      if (cmd.op === "stop") {
        await finish(echo);
        return;
      }
      const handler = handlers[cmd.op];
      if (!handler) throw new Error(`unknown op ${JSON.stringify(cmd.op)}`);
      const reply =
        cmd.op === "start"
          ? await handler(cmd)
          : await withTimeout(handler(cmd), cmd.timeoutMs ?? DEFAULT_TIMEOUT_MS, cmd.op);
      say({ ...reply, ...echo });
    } catch (error) {
      warn(`${cmd.op} failed`, error);
      say({ op: "error", ...echo, message: String(error && error.message ? error.message : error) });
    }
  }

  let queue = Promise.resolve();
  const input = createInterface({ input: process.stdin, crlfDelay: Infinity });
  input.on("line", (line) => {
    if (!line.trim()) return;
    queue = queue.then(() => run(line));
  });
  input.on("close", () => {
    queue = queue.then(() => finish());
  });
}
