// The SSE parser against the WHATWG rules, fed in every possible split.
import assert from "node:assert/strict";
import { test } from "node:test";

import { SSEParser } from "../dist/index.js";

const TEXT = ": ping\r\nid: e:1\r\ndata: {\"a\":1}\r\n\r\nevent: x\ndata: one\ndata: two\n\nid: bad\0id\ndata:three\r\rdata\n\n";

test("messages come out the same however the bytes are split", () => {
  const whole = new SSEParser().feed(TEXT);
  assert.deepEqual(whole, [
    { event: "message", data: '{"a":1}', id: "e:1" },
    { event: "x", data: "one\ntwo", id: "e:1" },
    { event: "message", data: "three", id: "e:1" },
    { event: "message", data: "", id: "e:1" },
  ]);
  for (let cut = 1; cut < TEXT.length; cut++) {
    const parser = new SSEParser();
    const got = [...parser.feed(TEXT.slice(0, cut)), ...parser.feed(TEXT.slice(cut))];
    assert.deepEqual(got, whole, `split at ${cut}`);
  }
});

test("a message without its blank line is not dispatched", () => {
  assert.deepEqual(new SSEParser().feed("data: half"), []);
});
