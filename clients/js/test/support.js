// What the tests share: the gateway the Python side started, and a TCP proxy in front of it
// that cuts connections, as a flaky network would.
import net from "node:net";

/** The gateway under test (`tests/js/test_client_node.py` starts it and sets this). */
export const GATEWAY = process.env.AIRLANE_URL ?? "";
if (!GATEWAY) throw new Error("AIRLANE_URL is not set: run these through pytest tests/js");

/** Seeds whose answers run to 250 tokens at least (found by the Python side, which knows
 * the synthetic backend's text model): a request with one of them ends at its max_tokens. */
export const SEEDS = (process.env.AIRLANE_SEEDS ?? "").split(",").filter(Boolean).map(Number);
if (SEEDS.length < 3) throw new Error("AIRLANE_SEEDS is not set: run these through pytest tests/js");

/** A chat request the synthetic backend answers with exactly `tokens` tokens (at most 250). */
export function chatRequest(tokens = 120, seed = SEEDS[0]) {
  return {
    model: "synthetic",
    messages: [{ role: "user", content: "tell me about resumable streams" }],
    max_tokens: tokens,
    seed,
  };
}

/**
 * A proxy on 127.0.0.1 to the gateway that resets the first `cuts` connections once they
 * have carried `after` bytes towards the client; the ones after pass untouched.
 */
export async function cuttingProxy({ after = 3000, cuts = 1 } = {}) {
  const target = new URL(GATEWAY);
  let cut = 0;
  const sockets = new Set();
  const server = net.createServer((client) => {
    const upstream = net.connect(Number(target.port), target.hostname);
    sockets.add(client).add(upstream);
    const cutThis = cut < cuts;
    if (cutThis) cut += 1;
    let sent = 0;
    client.pipe(upstream);
    upstream.on("data", (chunk) => {
      if (cutThis && sent + chunk.length >= after) {
        client.write(chunk.subarray(0, Math.max(0, after - sent)));
        client.resetAndDestroy();
        upstream.destroy();
        return;
      }
      sent += chunk.length;
      client.write(chunk);
    });
    const end = () => {
      client.destroy();
      upstream.destroy();
    };
    client.on("error", end).on("close", end);
    upstream.on("error", end).on("close", end);
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    get cut() {
      return cut;
    },
    close() {
      for (const socket of sockets) socket.destroy();
      server.close();
    },
  };
}

/** Everything of an async iterable. */
export async function all(iterable) {
  const out = [];
  for await (const item of iterable) out.push(item);
  return out;
}
