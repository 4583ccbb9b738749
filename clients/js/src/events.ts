/**
 * The stream model on the client: native events (docs/streams.md) and `TextState`, which
 * rebuilds a stream's exact text from them: a `delta` extends a channel, a `snapshot`
 * replaces everything, and an event at or before the last position applied in the same epoch
 * is ignored, so a resume that overlaps what arrived never repeats text.
 */

/** The kinds of event a stream carries. */
export type EventKind =
  | "delta" | "tool_call" | "message" | "status" | "usage" | "done" | "error" | "snapshot";

/** One native event, as the streams API and the WebSocket multiplex deliver it. */
export interface StreamEvent {
  /** The resume token `<epoch>:<seq>` (the SSE `id`), or null. */
  id: string | null;
  seq: number;
  kind: EventKind;
  /** Every field of the event (`text`, `channel`, `payload`, `usage`, ...). */
  data: Record<string, unknown>;
}

/** Tokens and timings of a finished stream (docs/streams.md, "Usage ledger"). */
export interface Usage {
  prompt_tokens?: number;
  completion_tokens?: number;
  total_tokens?: number;
  time_to_first_token_ms?: number;
  delivered_tokens?: number;
  replayed_tokens?: number;
  gateway_latency_ms?: { p50?: number; p99?: number; max?: number; mean?: number; samples?: number };
  [field: string]: unknown;
}

/** A tool call as far as it has arrived. */
export interface ToolCall {
  index: number;
  id?: string;
  name?: string;
  arguments: string;
}

/** Whether `kind` ends a stream. */
export function isTerminal(kind: string): boolean {
  return kind === "done" || kind === "error";
}

/** The event of a JSON text and its resume token. */
export function parseEvent(json: string, id: string | null): StreamEvent {
  const data = JSON.parse(json) as Record<string, unknown>;
  return {
    id,
    seq: typeof data.seq === "number" ? data.seq : 0,
    kind: String(data.kind) as EventKind,
    data,
  };
}

/** A stream's text, tool calls and outcome, rebuilt from its events. */
export class TextState {
  #text = new Map<string, string>();
  #calls = new Map<number, ToolCall>();
  /** The epoch of the last event applied. */
  epoch: string | null = null;
  /** The sequence number of the last event applied. */
  seq = 0;
  /** How the stream finished, once a `done` was applied. */
  finishReason: string | null = null;
  /** The usage its terminal event reported. */
  usage: Usage | null = null;
  /** The `error` event's fields, if it failed. */
  error: Record<string, unknown> | null = null;

  /** All text of `channel` so far. */
  text(channel = "content"): string {
    return this.#text.get(channel) ?? "";
  }

  /** The tool calls so far, by index. */
  get toolCalls(): ToolCall[] {
    return [...this.#calls.values()].sort((a, b) => a.index - b.index).map((c) => ({ ...c }));
  }

  /** Whether a terminal event was applied. */
  get ended(): boolean {
    return this.finishReason !== null || this.error !== null;
  }

  /** Apply one event; false if it was at or before what was applied (and was ignored). */
  apply(event: StreamEvent): boolean {
    const epoch = event.id ? event.id.slice(0, event.id.lastIndexOf(":")) : this.epoch;
    const same = epoch === this.epoch || this.epoch === null || epoch === null;
    if (same && this.seq > 0 && event.seq <= this.seq) return false;
    this.epoch = epoch;
    this.seq = event.seq;
    const data = event.data;
    switch (event.kind) {
      case "delta":
        this.append(String(data.channel ?? "content"), String(data.text ?? ""));
        break;
      case "tool_call":
        this.extendCall(data.index, data.id, data.name, String(data.arguments ?? data.text ?? ""));
        break;
      case "snapshot":
        this.#replace(data);
        break;
      case "done":
        this.finishReason = String(data.finish_reason ?? "stop");
        this.usage = (data.usage as Usage | undefined) ?? null;
        break;
      case "error":
        this.error = { ...data };
        this.usage = (data.usage as Usage | undefined) ?? null;
        break;
      default:
        break;
    }
    return true;
  }

  /** Move the position to a resume token without applying an event (an OpenAI chunk's). */
  advance(id: string | null): void {
    if (!id) return;
    const colon = id.lastIndexOf(":");
    const seq = Number.parseInt(id.slice(colon + 1), 10);
    this.epoch = id.slice(0, colon);
    if (Number.isFinite(seq)) this.seq = seq;
  }

  /** Append `text` to `channel`. */
  append(channel: string, text: string): void {
    if (text) this.#text.set(channel, this.text(channel) + text);
  }

  /** Replace the text of `channel`. */
  set(channel: string, text: string): void {
    this.#text.set(channel, text);
  }

  /** Extend tool call `index`'s arguments (and set its id and name when given). */
  extendCall(index: unknown, id: unknown, name: unknown, args: string): void {
    const key = typeof index === "number" ? index : 0;
    const call = this.#calls.get(key) ?? { index: key, arguments: "" };
    if (typeof id === "string") call.id = id;
    if (typeof name === "string") call.name = name;
    call.arguments += args;
    this.#calls.set(key, call);
  }

  #replace(data: Record<string, unknown>): void {
    this.#text.clear();
    this.#calls.clear();
    const texts = (data.text ?? {}) as Record<string, unknown>;
    for (const [channel, text] of Object.entries(texts)) {
      if (text) this.#text.set(channel, String(text));
    }
    for (const call of (data.tool_calls ?? []) as Record<string, unknown>[]) {
      this.extendCall(call.index, call.id, call.name, String(call.arguments ?? ""));
    }
  }
}
