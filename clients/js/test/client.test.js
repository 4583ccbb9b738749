// AirlaneClient against a real gateway: chat streams that resume, events from a position,
// cancel against disconnect, the usage ledger, typed errors.
import assert from "node:assert/strict";
import { test } from "node:test";

import { AirlaneClient, AirlaneError, ConnectionLost, ERROR_CODES, TextState } from "../dist/index.js";
import { GATEWAY, SEEDS, all, chatRequest, cuttingProxy } from "./support.js";

const client = new AirlaneClient({ baseUrl: GATEWAY });

async function finalText(streamId) {
  const snapshot = await client.snapshot(streamId);
  return snapshot.data.text.content;
}

test("a chat stream's pieces add up to the stream's text, with the usage ledger", async () => {
  const stream = client.chatStream({ ...chatRequest(60), stream_options: { include_usage: true } });
  const pieces = await all(stream);
  assert.ok(stream.streamId?.startsWith("chatcmpl-"));
  assert.equal(stream.resumes, 0);
  const text = pieces.map((p) => p.text).join("");
  assert.equal(text, stream.text);
  assert.equal(text, await finalText(stream.streamId));
  assert.equal(pieces.at(-1).usage.completion_tokens, 60);
  const info = await client.info(stream.streamId);
  assert.equal(info.usage.completion_tokens, 60);
  assert.ok(info.usage.time_to_first_token_ms >= 0);
});

test("streamed and not streamed, the same seed gives the same text", async () => {
  const streamed = client.chatStream(chatRequest(40, SEEDS[2]));
  await all(streamed);
  const whole = await client.chat(chatRequest(40, SEEDS[2]));
  assert.equal(whole.choices[0].message.content, streamed.text);
});

test("a chat stream cut mid-response resumes with no gap and no repeat", async () => {
  const proxy = await cuttingProxy({ after: 2500 });
  try {
    const resuming = new AirlaneClient({ baseUrl: proxy.url });
    const stream = resuming.chatStream(chatRequest(150, SEEDS[0]));
    const pieces = await all(stream);
    assert.equal(proxy.cut, 1);
    assert.equal(stream.resumes, 1);
    assert.ok(pieces.some((p) => p.resumed) && pieces.some((p) => !p.resumed));
    assert.equal(stream.text, await finalText(stream.streamId));
    assert.equal(stream.state.finishReason, "length");
  } finally {
    proxy.close();
  }
});

test("events read from any position, across recycled responses", async () => {
  const stream = client.chatStream(chatRequest(120, SEEDS[2]));
  const iterator = stream[Symbol.asyncIterator]();
  await iterator.next(); // the stream exists now and is being generated
  const reading = (async () => {
    for (let next = await iterator.next(); !next.done; next = await iterator.next());
  })();
  const recycling = new AirlaneClient({ baseUrl: GATEWAY });
  const events = await all(recycling.events(stream.streamId, { params: { max_events: 4 } }));
  await reading;
  assert.equal(events.at(-1).kind, "done");
  assert.ok(recycling.resumes > 5, "every 4 events the gateway ended the response and the client resumed");
  const merged = new TextState();
  for (const event of events) merged.apply(event);
  assert.equal(merged.text(), stream.text);

  const middle = events[10];
  const tail = await all(client.events(stream.streamId, { from: middle.id }));
  assert.ok(tail[0].seq > middle.seq);
  const resumed = new TextState();
  for (const event of [...events.slice(0, 11), ...tail]) resumed.apply(event);
  assert.equal(resumed.text(), stream.text);
  // Resumed at the very end of a finished stream: nothing more (the gateway says 204).
  assert.deepEqual(await all(client.events(stream.streamId, { from: events.at(-1).id })), []);
});

test("cancel stops the generation; closing only stops this reader", async () => {
  const cancelled = client.chatStream(chatRequest(250));
  const pieces = [];
  for await (const piece of cancelled) {
    pieces.push(piece);
    if (pieces.length === 5) assert.equal(await cancelled.cancel(), true);
  }
  assert.equal(cancelled.state.finishReason, "cancelled");

  const left = client.chatStream({ ...chatRequest(60), airlane: { orphan: "keep" } });
  for await (const piece of left) {
    if (piece.text) break; // leaving the loop closes the response: a disconnect
  }
  const rest = await all(client.events(left.streamId, { from: left.lastEventId }));
  assert.equal(rest.at(-1).kind, "done");
  assert.equal(rest.at(-1).data.finish_reason, "length"); // it went on to the end
});

test("errors carry the gateway's codes", async () => {
  await assert.rejects(client.info("no-such-stream"), (error) => {
    assert.ok(error instanceof AirlaneError);
    assert.equal(error.code, "stream_not_found");
    assert.equal(error.status, 404);
    assert.ok(ERROR_CODES.includes(error.code));
    return true;
  });
  const named = `js/${Date.now()}`;
  await client.createStream(named);
  await assert.rejects(client.publish(named, { kind: "delta" }), { code: "invalid_event", status: 400 });
  await assert.rejects(client.createStream(named), { code: "stream_exists", status: 409 });
  const nowhere = new AirlaneClient({ baseUrl: "http://127.0.0.1:9", retry: { maxRetries: 1 } });
  await assert.rejects(nowhere.health(), ConnectionLost);
});
