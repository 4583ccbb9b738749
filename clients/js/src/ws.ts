/**
 * `AirlaneSocket`: many streams on one WebSocket (`/v1/ws`, subprotocol `airlane.v1.json`).
 *
 * Each op is a request with a `ref` answered by the gateway; events arrive as
 * `{"op": "event", "stream", "id", "event"}` and go to their `Subscription`, an async
 * iterable that ends at the stream's terminal event. What a demanding app needs beyond the
 * protocol is done here:
 *
 * - **Reconnecting.** When the socket drops (not on a refusal that reconnecting cannot
 *   change: close codes 4400-4499), it reconnects with backoff and subscribes every open
 *   subscription again from the last event it delivered, so a reader sees no gap and no
 *   repeat. An op in flight when the socket dropped fails with `ConnectionLost`.
 * - **Credits per subscription.** Each subscription tells the gateway how many messages it
 *   will take (`maxBuffered`) and grants more as the app reads them (`credit` op), so events
 *   wait on the gateway, not in this process: a slow reader holds at most `maxBuffered`
 *   messages here and slows no other stream on the socket.
 * - **Cancel is not disconnect.** `cancel(stream)` stops the producer for every reader;
 *   `Subscription.close()` and `AirlaneSocket.close()` only stop this reader.
 * - **Credentials.** A browser cannot set headers on a WebSocket: with an API key the client
 *   asks `POST /v1/tickets` for a short-lived ticket (fresh at each reconnect) and opens
 *   `/v1/ws?ticket=...`.
 */

import { AirlaneError, ConnectionLost, errorFromResponse, isErrorCode } from "./errors.js";
import { backoff, type RetryPolicy, sleep } from "./client.js";
import { type StreamEvent, TextState, isTerminal } from "./events.js";

/** The WebSocket constructor a socket is made with (the platform's by default). */
export type WebSocketLike = new (url: string, protocols?: string | string[]) => WebSocket;

/** How to reach the gateway's multiplex. */
export interface SocketOptions {
  /** The gateway's HTTP address, e.g. `http://127.0.0.1:8420`. */
  baseUrl: string;
  /** An API key (exchanged for a ticket at each connect). */
  apiKey?: string;
  /** The WebSocket constructor (the global one by default). */
  WebSocket?: WebSocketLike;
  /** The `fetch` for tickets (the global one by default). */
  fetch?: typeof fetch;
  /** Reconnection policy (partial: the rest are defaults). */
  retry?: Partial<RetryPolicy>;
  /** Messages a subscription takes before its reader has read them: its credits (default
   * 1000). */
  maxBuffered?: number;
  /** How long an op waits for its answer, in ms (default 30,000). */
  timeoutMs?: number;
}

const SUBPROTOCOL = "airlane.v1.json";
const DEFAULT_RETRY: RetryPolicy = { maxRetries: 6, baseDelayMs: 200, maxDelayMs: 5000 };

type Reply = Record<string, unknown>;

interface Pending {
  resolve: (reply: Reply) => void;
  reject: (error: Error) => void;
  timer: ReturnType<typeof setTimeout>;
}

/** One stream read over the socket: iterate it for events. */
export class Subscription implements AsyncIterable<StreamEvent> {
  /** The stream's id. */
  readonly streamId: string;
  /** The resume token of the last event delivered (where a resubscription starts). */
  lastId: string | null;
  /** The stream's text and outcome, rebuilt from the events delivered. */
  readonly state = new TextState();
  /** Credit grants sent to the gateway as the reader read. */
  grants = 0;
  /** The most messages that waited here for the reader at once. */
  maxWaiting = 0;
  /** Times it was subscribed again after the socket reconnected. */
  resumes = 0;
  readonly #socket: AirlaneSocket;
  readonly #buffer: StreamEvent[] = [];
  #waiter: (() => void) | null = null;
  #ended = false;
  #failure: Error | null = null;
  #read = 0; // messages read since the last grant

  /** @internal */
  constructor(socket: AirlaneSocket, streamId: string, from: string | null) {
    this.#socket = socket;
    this.streamId = streamId;
    this.lastId = from;
  }

  /** Whether the stream ended (or the subscription was closed). */
  get ended(): boolean {
    return this.#ended;
  }

  /** Stop reading (the stream goes on); the resume token to continue from later. */
  async close(): Promise<string | null> {
    if (!this.#ended) {
      this.#end(null);
      await this.#socket.unsubscribe(this.streamId).catch(() => undefined);
    }
    return this.lastId;
  }

  /** Credits to subscribe with: room for what is not waiting here already. */
  get credits(): number {
    return Math.max(1, this.#socket.maxBuffered - this.#buffer.length);
  }

  /** @internal an event for this stream */
  push(event: StreamEvent): void {
    if (this.#ended) return;
    this.#buffer.push(event);
    this.maxWaiting = Math.max(this.maxWaiting, this.#buffer.length);
    this.#wake();
    if (isTerminal(event.kind)) {
      this.#ended = true;
      this.#socket.forget(this);
    }
  }

  /** @internal the reader took a message: grant the credits back in batches of half */
  #consumed(): void {
    this.#read += 1;
    if (this.#ended || this.#read < Math.max(1, this.#socket.maxBuffered >> 1)) return;
    const grant = this.#read;
    this.#read = 0;
    this.grants += 1;
    this.#socket.grant(this.streamId, grant);
  }

  /** @internal the stream failed or the socket gave up */
  fail(error: Error | null): void {
    this.#end(error);
  }

  #end(error: Error | null): void {
    if (this.#ended) return;
    this.#ended = true;
    this.#failure = error;
    this.#socket.forget(this);
    this.#wake();
  }

  #wake(): void {
    const waiter = this.#waiter;
    this.#waiter = null;
    waiter?.();
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<StreamEvent> {
    for (;;) {
      const event = this.#buffer.shift();
      if (event !== undefined) {
        this.#consumed();
        if (this.state.apply(event) || event.kind === "snapshot") {
          if (event.id) this.lastId = event.id;
          yield event;
        }
        continue;
      }
      if (this.#ended) {
        if (this.#failure) throw this.#failure;
        return;
      }
      await new Promise<void>((resolve) => {
        this.#waiter = resolve;
      });
    }
  }
}

/** The multiplex (see the module comment). */
export class AirlaneSocket {
  /** Events a subscription buffers before it is paused. */
  readonly maxBuffered: number;
  /** Times the socket reconnected. */
  reconnects = 0;
  readonly #options: SocketOptions;
  readonly #retry: RetryPolicy;
  readonly #WebSocket: WebSocketLike;
  readonly #fetch: typeof fetch;
  readonly #subscriptions = new Map<string, Subscription>();
  readonly #pending = new Map<number, Pending>();
  #ws: WebSocket | null = null;
  #ref = 0;
  #closed = false;
  #connecting: Promise<void> | null = null;

  private constructor(options: SocketOptions) {
    this.#options = options;
    this.#retry = { ...DEFAULT_RETRY, ...options.retry };
    this.maxBuffered = options.maxBuffered ?? 1000;
    const ctor = options.WebSocket ?? (globalThis as { WebSocket?: WebSocketLike }).WebSocket;
    if (ctor === undefined) {
      throw new AirlaneError("no WebSocket here: pass one (Node 20: --experimental-websocket)", { code: "client_error" });
    }
    this.#WebSocket = ctor;
    this.#fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
  }

  /** Open a socket to the gateway. */
  static async connect(options: SocketOptions): Promise<AirlaneSocket> {
    const socket = new AirlaneSocket(options);
    await socket.#open();
    return socket;
  }

  /** Whether the socket is open now. */
  get open(): boolean {
    return this.#ws?.readyState === 1;
  }

  /** Start a generation (OpenAI's chat body) and read it. */
  async generate(request: Record<string, unknown>): Promise<Subscription> {
    const reply = await this.call({ op: "generate", request, subscribe: false });
    return this.subscribe(String(reply.stream));
  }

  /** Read `streamId` from after `from` (a resume token; the start without one). */
  async subscribe(streamId: string, options: { from?: string | null } = {}): Promise<Subscription> {
    if (this.#subscriptions.has(streamId)) {
      throw new AirlaneError(`already subscribed to ${streamId}`, { code: "already_subscribed" });
    }
    const subscription = new Subscription(this, streamId, options.from ?? null);
    this.#subscriptions.set(streamId, subscription);
    try {
      await this.#subscribeOp(subscription);
    } catch (error) {
      this.#subscriptions.delete(streamId);
      throw error;
    }
    return subscription;
  }

  /** Append an event to a stream; its sequence number. */
  async publish(streamId: string, event: Record<string, unknown>): Promise<number> {
    const reply = await this.call({ op: "publish", stream: streamId, event });
    return Number(reply.seq);
  }

  /** Stop a stream's producer for every reader; true if it was still running. */
  async cancel(streamId: string): Promise<boolean> {
    const reply = await this.call({ op: "cancel", stream: streamId });
    return Boolean(reply.cancelled);
  }

  /** Declare what this socket carries (`control`, `interactive`, `bulk`); the marks set. */
  async lane(lane: "control" | "interactive" | "bulk"): Promise<string> {
    const reply = await this.call({ op: "lane", lane });
    return String(reply.marks ?? "");
  }

  /** A round trip to the gateway, in ms. */
  async ping(): Promise<number> {
    const start = performance.now();
    await this.call({ op: "ping" });
    return performance.now() - start;
  }

  /** Close the socket: every subscription ends (the streams go on). */
  close(): void {
    this.#closed = true;
    for (const subscription of [...this.#subscriptions.values()]) subscription.fail(null);
    this.#ws?.close(1000, "client closed");
    this.#failPending(new ConnectionLost("the socket was closed"));
  }

  /** Send one op and wait for its answer (an `error` answer rejects with its code). */
  async call(op: Record<string, unknown>): Promise<Reply> {
    if (this.#closed) throw new ConnectionLost("the socket is closed");
    if (this.#connecting) await this.#connecting;
    const ws = this.#ws;
    if (ws === null || ws.readyState !== 1) throw new ConnectionLost("the socket is not open");
    const ref = ++this.#ref;
    return new Promise<Reply>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#pending.delete(ref);
        reject(new ConnectionLost(`no answer to ${String(op.op)} in time`));
      }, this.#options.timeoutMs ?? 30_000);
      this.#pending.set(ref, { resolve, reject, timer });
      ws.send(JSON.stringify({ ...op, ref }));
    });
  }

  /** @internal stop reading a stream on the gateway */
  async unsubscribe(streamId: string): Promise<void> {
    if (this.open) await this.call({ op: "unsubscribe", stream: streamId });
  }

  /** @internal the reader of `streamId` read `count` more messages: the gateway may send as
   * many more (an answer that the socket dropped or the stream ended is of no matter: a new
   * subscription starts with fresh credits). */
  grant(streamId: string, count: number): void {
    if (this.open) void this.call({ op: "credit", stream: streamId, credits: count }).catch(() => undefined);
  }

  /** @internal a subscription ended */
  forget(subscription: Subscription): void {
    if (this.#subscriptions.get(subscription.streamId) === subscription) {
      this.#subscriptions.delete(subscription.streamId);
    }
  }

  async #subscribeOp(subscription: Subscription): Promise<void> {
    const op: Record<string, unknown> = {
      op: "subscribe",
      stream: subscription.streamId,
      credits: subscription.credits,
    };
    if (subscription.lastId) op.from = subscription.lastId;
    const reply = await this.call(op);
    if (reply.ended) subscription.fail(null); // resumed at the very end of a finished stream
  }

  async #open(): Promise<void> {
    let url = this.#options.baseUrl.replace(/\/+$/, "").replace(/^http/, "ws") + "/v1/ws";
    if (this.#options.apiKey) url += `?ticket=${encodeURIComponent(await this.#ticket())}`;
    const ws = new this.#WebSocket(url, SUBPROTOCOL);
    await new Promise<void>((resolve, reject) => {
      ws.onopen = () => resolve();
      ws.onerror = () => reject(new ConnectionLost(`cannot open ${url.split("?")[0]}`));
      ws.onclose = (event) => reject(closeError(event));
    });
    ws.onmessage = (message) => this.#message(message.data);
    ws.onclose = (event) => this.#dropped(ws, event);
    ws.onerror = () => undefined; // a close follows
    this.#ws = ws;
  }

  async #ticket(): Promise<string> {
    const response = await this.#fetch(this.#options.baseUrl.replace(/\/+$/, "") + "/v1/tickets", {
      method: "POST",
      headers: { authorization: `Bearer ${this.#options.apiKey}` },
    });
    if (!response.ok) throw await errorFromResponse(response);
    return String(((await response.json()) as Reply).ticket);
  }

  #message(data: unknown): void {
    if (typeof data !== "string") return;
    const message = JSON.parse(data) as Reply;
    if (message.op === "event") {
      const event = message.event as Record<string, unknown>;
      this.#subscriptions.get(String(message.stream))?.push({
        id: typeof message.id === "string" ? message.id : null,
        seq: Number(event.seq ?? 0),
        kind: String(event.kind) as StreamEvent["kind"],
        data: event,
      });
      return;
    }
    const ref = typeof message.ref === "number" ? message.ref : null;
    const pending = ref === null ? undefined : this.#pending.get(ref);
    if (pending === undefined || ref === null) {
      if (message.op === "error" && typeof message.stream === "string") {
        this.#subscriptions.get(message.stream)?.fail(replyError(message));
      }
      return;
    }
    this.#pending.delete(ref);
    clearTimeout(pending.timer);
    if (message.op === "error") pending.reject(replyError(message));
    else pending.resolve(message);
  }

  #dropped(ws: WebSocket, event: CloseEvent): void {
    if (this.#ws !== ws) return;
    this.#ws = null;
    this.#failPending(new ConnectionLost(`the socket closed (${event.code})`));
    if (this.#closed) return;
    const permanent = event.code >= 4400 && event.code < 4500;
    if (permanent) {
      const error = closeError(event);
      for (const subscription of [...this.#subscriptions.values()]) subscription.fail(error);
      return;
    }
    this.#connecting = this.#reconnect().finally(() => {
      this.#connecting = null;
    });
  }

  async #reconnect(): Promise<void> {
    for (let failures = 1; !this.#closed; failures++) {
      await sleep(backoff(this.#retry, failures, null));
      try {
        await this.#open();
      } catch (error) {
        if (failures > this.#retry.maxRetries || (error instanceof AirlaneError && error.status >= 400 && error.status < 500)) {
          for (const subscription of [...this.#subscriptions.values()]) subscription.fail(error as Error);
          return;
        }
        continue;
      }
      this.reconnects += 1;
      this.#connecting = null;
      for (const subscription of [...this.#subscriptions.values()]) {
        subscription.resumes += 1;
        void this.#subscribeOp(subscription).catch((e: Error) => subscription.fail(e));
      }
      return;
    }
  }

  #failPending(error: Error): void {
    for (const [ref, pending] of this.#pending) {
      clearTimeout(pending.timer);
      pending.reject(error);
      this.#pending.delete(ref);
    }
  }
}

function replyError(message: Reply): AirlaneError {
  const code = isErrorCode(message.code) ? message.code : "internal_error";
  return new AirlaneError(String(message.message ?? code), { code });
}

function closeError(event: CloseEvent): AirlaneError {
  const status = event.code >= 4000 && event.code < 5000 ? event.code - 4000 : 0;
  const code = status === 401 ? "unauthenticated" : status === 403 ? "permission_denied" : "client_disconnected";
  return new AirlaneError(event.reason || `the socket closed (${event.code})`, { code, status });
}
