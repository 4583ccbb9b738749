// AirlaneSocket against a real gateway: generations and subscriptions on one socket, resume
// after the socket drops, a slow reader paused and resumed, cancel, typed errors.
import assert from "node:assert/strict";
import { test } from "node:test";

import { AirlaneClient, AirlaneError, AirlaneSocket, TextState } from "../dist/index.js";
import { GATEWAY, SEEDS, all, chatRequest, cuttingProxy } from "./support.js";

const http = new AirlaneClient({ baseUrl: GATEWAY });

async function finalText(streamId) {
  return (await http.snapshot(streamId)).data.text.content;
}

test("generations share one socket and each ends with its stream's text", async () => {
  const socket = await AirlaneSocket.connect({ baseUrl: GATEWAY });
  try {
    const subs = await Promise.all(SEEDS.map((seed) => socket.generate(chatRequest(50, seed))));
    await Promise.all(subs.map((s) => all(s)));
    for (const sub of subs) {
      assert.equal(sub.state.finishReason, "length");
      assert.equal(sub.state.text(), await finalText(sub.streamId));
    }
    assert.ok((await socket.ping()) >= 0);
  } finally {
    socket.close();
  }
});

test("a subscription resumes after the socket drops, with no gap and no repeat", async () => {
  const proxy = await cuttingProxy({ after: 4000 });
  const socket = await AirlaneSocket.connect({ baseUrl: proxy.url });
  try {
    const sub = await socket.generate(chatRequest(220, SEEDS[0]));
    const events = await all(sub);
    assert.equal(proxy.cut, 1);
    assert.equal(socket.reconnects, 1);
    assert.equal(sub.resumes, 1);
    const seqs = events.filter((e) => e.kind !== "snapshot").map((e) => e.seq);
    assert.deepEqual(seqs, [...seqs].sort((a, b) => a - b), "in order");
    assert.equal(new Set(seqs).size, seqs.length, "no repeat");
    assert.equal(sub.state.text(), await finalText(sub.streamId));
  } finally {
    socket.close();
    proxy.close();
  }
});

test("a slow reader holds its stream back by credits and misses nothing", async () => {
  const socket = await AirlaneSocket.connect({ baseUrl: GATEWAY, maxBuffered: 8 });
  try {
    const sub = await socket.generate(chatRequest(120, SEEDS[1]));
    await new Promise((resolve) => setTimeout(resolve, 600)); // the stream runs ahead
    for await (const event of sub) {
      if (event.seq % 10 === 0) await new Promise((resolve) => setTimeout(resolve, 5));
    }
    assert.ok(sub.maxWaiting <= 8, `at most its credits waited here (${sub.maxWaiting})`);
    assert.ok(sub.grants >= 1, "credits were granted back as it read");
    assert.equal(sub.state.text(), await finalText(sub.streamId));
  } finally {
    socket.close();
  }
});

test("subscribing from a position, cancel, and the gateway's error codes", async () => {
  const socket = await AirlaneSocket.connect({ baseUrl: GATEWAY });
  try {
    const first = await socket.generate(chatRequest(30, SEEDS[2]));
    const events = await all(first);
    // From the sixth frame on: the rest of the text, not a character more or less (a
    // reader behind gets runs of deltas merged into one frame, so frames are not compared).
    const later = await socket.subscribe(first.streamId, { from: events[5].id });
    const tail = await all(later);
    assert.ok(tail[0].seq > events[5].seq);
    const resumed = new TextState();
    for (const event of [...events.slice(0, 6), ...tail]) resumed.apply(event);
    assert.equal(resumed.text(), first.state.text());

    const long = await socket.generate(chatRequest(250));
    assert.equal(await socket.cancel(long.streamId), true);
    await all(long);
    assert.equal(long.state.finishReason, "cancelled");

    await assert.rejects(socket.subscribe("no-such-stream"), (error) => {
      assert.ok(error instanceof AirlaneError);
      return error.code === "stream_not_found";
    });
    await assert.rejects(socket.call({ op: "teleport" }), { code: "unknown_op" });
    assert.equal(await socket.publish(`js/ws/${Date.now()}`, { kind: "message", payload: 1 }), 1);
    await assert.rejects(socket.publish("js/ws/x", { kind: "delta" }), { code: "invalid_event" });
  } finally {
    socket.close();
  }
});
