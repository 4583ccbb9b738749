/**
 * `AirlaneClient`: chat completions and stream events over HTTP + SSE, resuming by itself.
 *
 * A stream outlives a connection, and this client makes that invisible: `events` reconnects
 * with `Last-Event-ID` after a drop (or after the gateway recycled the response) and stops at
 * the terminal event; `chatStream` posts an OpenAI-style streaming request and, if the
 * response breaks off before the finish, continues the same generation from the last SSE id
 * through the streams API, so its caller sees one gapless sequence of pieces. A request the
 * gateway was too busy to start (503 `overloaded`: nothing started) is sent again, no sooner
 * than its `Retry-After`. Only `fetch`, `ReadableStream` and `TextDecoder` are needed: any
 * browser, and Node 18 or later.
 */
import { AirlaneError, ConnectionLost, StreamFailed, errorFromResponse, isErrorCode } from "./errors.js";
import { TextState, isTerminal, parseEvent } from "./events.js";
import { readSSE } from "./sse.js";
const DEFAULT_RETRY = { maxRetries: 6, baseDelayMs: 200, maxDelayMs: 5000 };
const RETRYABLE_STATUS = new Set([429, 500, 502, 503, 504]);
const CHANNELS = ["reasoning", "content"];
/** A stream resource's path: slashes in an id are sent percent-encoded. */
export function streamPath(streamId, action = "") {
    const path = `/v1/streams/${encodeURIComponent(streamId)}`;
    return action ? `${path}/${action}` : path;
}
/** A client of one gateway (see the module comment). */
export class AirlaneClient {
    baseUrl;
    retry;
    /** Reconnections made so far (by `events` and resumed chat streams). */
    resumes = 0;
    #apiKey;
    #fetch;
    constructor(options) {
        this.baseUrl = options.baseUrl.replace(/\/+$/, "");
        this.#apiKey = options.apiKey;
        this.#fetch = options.fetch ?? globalThis.fetch.bind(globalThis);
        this.retry = { ...DEFAULT_RETRY, ...options.retry };
    }
    // -- chat completions -----------------------------------------------------------------
    /** Start one streamed chat completion (`request` is OpenAI's body; `stream` is set). */
    chatStream(request, options = {}) {
        return new ChatStream(this, { ...request, stream: true }, options.signal);
    }
    /** One chat completion, not streamed: OpenAI's `chat.completion` object. */
    async chat(request, options = {}) {
        const response = await this.send("POST", "/v1/chat/completions", { ...request, stream: false }, options.signal, true);
        return (await response.json());
    }
    // -- streams --------------------------------------------------------------------------
    /**
     * A stream's events from after `from` (a resume token; the start without one) to its end,
     * reconnecting as needed. `params` are extra query parameters (`{max_events: 100}`).
     */
    async *events(streamId, options = {}) {
        let position = options.from ?? null;
        let failures = 0;
        const query = new URLSearchParams();
        for (const [key, value] of Object.entries(options.params ?? {}))
            query.set(key, String(value));
        const path = streamPath(streamId, "events") + (query.size ? `?${query}` : "");
        for (;;) {
            let progressed = false;
            let cause = null;
            try {
                const headers = { accept: "text/event-stream" };
                if (position)
                    headers["last-event-id"] = position;
                const response = await this.send("GET", path, undefined, options.signal, false, headers);
                if (response.status === 204 || response.body === null)
                    return; // ended at `position`
                for await (const message of readSSE(response.body)) {
                    const event = parseEvent(message.data, message.id);
                    progressed = true;
                    position = event.id ?? position;
                    yield event;
                    if (isTerminal(event.kind))
                        return;
                }
            }
            catch (error) {
                if (options.signal?.aborted)
                    throw error;
                if (error instanceof AirlaneError && !(error instanceof ConnectionLost) && !RETRYABLE_STATUS.has(error.status)) {
                    throw error;
                }
                cause = error;
            }
            failures = progressed ? 0 : failures + 1;
            if (failures > this.retry.maxRetries) {
                throw new ConnectionLost(`stream ${streamId}: gave up after ${failures} failed reconnections`, cause);
            }
            this.resumes += 1;
            // A response that delivered (the gateway recycled it, or it broke midway) is followed
            // at once; only attempts that deliver nothing back off.
            if (failures > 0)
                await sleep(backoff(this.retry, failures, cause), options.signal);
        }
    }
    /** Create a named stream that producers publish to (`POST /v1/streams`). */
    async createStream(name) {
        return this.json("POST", "/v1/streams", { name });
    }
    /** Append events to a stream; the last sequence number. */
    async publish(streamId, ...events) {
        const body = events.length === 1 ? events[0] : { events };
        return this.json("POST", streamPath(streamId, "events"), body);
    }
    /** A stream's status, usage ledger and current resume token. */
    async info(streamId) {
        return this.json("GET", streamPath(streamId));
    }
    /** Everything a stream holds so far, as one `snapshot` event. */
    async snapshot(streamId) {
        const response = await this.send("GET", streamPath(streamId, "snapshot"));
        const text = await response.text();
        const data = text.split(/\r?\n/).find((line) => line.startsWith("data:"));
        const id = text.split(/\r?\n/).find((line) => line.startsWith("id:"));
        if (data === undefined)
            return parseEvent(text, null);
        return parseEvent(data.slice(5).trim(), id === undefined ? null : id.slice(3).trim());
    }
    /**
     * Stop a stream's producer (the stream ends `cancelled`); true if it was still running.
     * Not the same as leaving: closing a reader only removes that reader, and the stream's
     * orphan policy decides what happens to a generation nobody reads.
     */
    async cancel(streamId) {
        const body = await this.json("POST", streamPath(streamId, "cancel"));
        return Boolean(body.cancelled);
    }
    /** The gateway's `/healthz`. */
    async health() {
        return this.json("GET", "/healthz");
    }
    // -- plumbing -------------------------------------------------------------------------
    /** A request whose JSON answer is an object. */
    async json(method, path, body) {
        const response = await this.send(method, path, body);
        return (await response.json());
    }
    /**
     * Send a request; its response when the status is 2xx, else the gateway's error. With
     * `starts`, a 503 `overloaded` (nothing was started) is sent again within the policy.
     */
    async send(method, path, body, signal, starts = false, extraHeaders = {}) {
        const headers = { ...extraHeaders };
        if (body !== undefined)
            headers["content-type"] = "application/json";
        if (this.#apiKey)
            headers.authorization = `Bearer ${this.#apiKey}`;
        for (let failures = 0;;) {
            let response;
            try {
                response = await this.#fetch(this.baseUrl + path, {
                    method,
                    headers,
                    body: body === undefined ? undefined : JSON.stringify(body),
                    signal,
                    cache: "no-store",
                });
            }
            catch (error) {
                if (signal?.aborted)
                    throw error;
                throw new ConnectionLost(`${method} ${path}: ${String(error)}`, error);
            }
            if (response.ok)
                return response;
            const error = await errorFromResponse(response);
            failures += 1;
            if (!starts || error.code !== "overloaded" || failures > this.retry.maxRetries)
                throw error;
            await sleep(backoff(this.retry, failures, error), signal);
        }
    }
}
/**
 * One streamed chat completion: iterate it for `ChatPiece`s. `streamId` and `lastEventId`
 * say where it is; `cancel()` stops the generation, `close()` only stops reading it.
 */
export class ChatStream {
    /** The Airlane stream id (from `x-airlane-stream-id`), once the response began. */
    streamId = null;
    /** The last resume token seen. */
    lastEventId = null;
    /** The text, tool calls and outcome so far. */
    state = new TextState();
    /** Times the response broke off and the stream was resumed. */
    resumes = 0;
    #client;
    #request;
    #abort = new AbortController();
    constructor(client, request, signal) {
        this.#client = client;
        this.#request = request;
        signal?.addEventListener("abort", () => this.#abort.abort(signal.reason), { once: true });
    }
    /** The content text so far. */
    get text() {
        return this.state.text("content");
    }
    /** Stop the generation on the gateway (for every reader); true if it was still running. */
    async cancel() {
        if (this.streamId === null)
            return false;
        return this.#client.cancel(this.streamId);
    }
    /** Stop reading (a disconnect: the orphan policy decides about the generation). */
    close() {
        this.#abort.abort();
    }
    async *[Symbol.asyncIterator]() {
        const signal = this.#abort.signal;
        let dropped = null;
        try {
            const response = await this.#client.send("POST", "/v1/chat/completions", this.#request, signal, true);
            this.streamId = response.headers.get("x-airlane-stream-id");
            if (response.body === null)
                throw new ConnectionLost("the response has no body");
            for await (const message of readSSE(response.body)) {
                if (message.data === "[DONE]")
                    return;
                if (message.id)
                    this.lastEventId = message.id;
                for (const piece of piecesOfChunk(JSON.parse(message.data), message.id)) {
                    applyPiece(this.state, piece);
                    yield piece;
                }
            }
        }
        catch (error) {
            if (signal.aborted || error instanceof AirlaneError)
                throw error;
            dropped = error; // the connection broke: resume below
        }
        if (this.state.ended)
            return;
        if (this.streamId === null || this.lastEventId === null) {
            throw new ConnectionLost("the response broke off before the stream was identified", dropped);
        }
        this.resumes += 1;
        for await (const event of this.#client.events(this.streamId, { from: this.lastEventId, signal })) {
            if (event.id)
                this.lastEventId = event.id;
            yield* piecesOfEvent(event, this.state);
        }
    }
}
// -- OpenAI chunks and native events as pieces --------------------------------------------
function piece(fields) {
    return {
        text: "", channel: "content", id: null, replace: false, resumed: false,
        toolCall: null, finishReason: null, usage: null, ...fields,
    };
}
/** The pieces of one `chat.completion.chunk`. */
function piecesOfChunk(chunk, id) {
    const out = [];
    for (const choice of (chunk.choices ?? [])) {
        const delta = (choice.delta ?? {});
        const finish = typeof choice.finish_reason === "string" ? choice.finish_reason : null;
        if (delta.reasoning_content)
            out.push(piece({ text: String(delta.reasoning_content), channel: "reasoning", id }));
        for (const call of (delta.tool_calls ?? [])) {
            const fn = (call.function ?? {});
            const toolCall = { index: Number(call.index ?? 0), arguments: String(fn.arguments ?? "") };
            if (typeof call.id === "string")
                toolCall.id = call.id;
            if (typeof fn.name === "string")
                toolCall.name = fn.name;
            out.push(piece({ id, toolCall }));
        }
        if (delta.content || finish)
            out.push(piece({ text: String(delta.content ?? ""), id, finishReason: finish }));
    }
    if (chunk.usage && typeof chunk.usage === "object")
        out.push(piece({ id, usage: chunk.usage }));
    return out;
}
function applyPiece(state, p) {
    if (p.toolCall)
        state.extendCall(p.toolCall.index, p.toolCall.id, p.toolCall.name, p.toolCall.arguments);
    else if (p.replace)
        state.set(p.channel, p.text);
    else
        state.append(p.channel, p.text);
    if (p.finishReason)
        state.finishReason = p.finishReason;
    if (p.usage)
        state.usage = p.usage;
    state.advance(p.id);
}
/** Apply `event` to `state`; the pieces it adds for a chat caller (none if seen already). */
function piecesOfEvent(event, state) {
    const before = new Map(CHANNELS.map((c) => [c, state.text(c)]));
    const calls = new Map(state.toolCalls.map((c) => [c.index, c.arguments]));
    if (!state.apply(event))
        return [];
    const id = event.id;
    const data = event.data;
    switch (event.kind) {
        case "delta":
            return [piece({ text: String(data.text ?? ""), channel: String(data.channel ?? "content"), id, resumed: true })];
        case "tool_call": {
            const toolCall = { index: Number(data.index ?? 0), arguments: String(data.arguments ?? "") };
            if (typeof data.id === "string")
                toolCall.id = data.id;
            if (typeof data.name === "string")
                toolCall.name = data.name;
            return [piece({ id, toolCall, resumed: true })];
        }
        case "snapshot": {
            const out = [];
            for (const channel of CHANNELS) {
                const was = before.get(channel) ?? "";
                const now = state.text(channel);
                if (now.startsWith(was)) {
                    if (now.length > was.length)
                        out.push(piece({ text: now.slice(was.length), channel, id, resumed: true }));
                }
                else {
                    out.push(piece({ text: now, channel, id, replace: true, resumed: true }));
                }
            }
            for (const call of state.toolCalls) {
                const seen = calls.get(call.index) ?? "";
                const extends_ = call.arguments.startsWith(seen);
                const rest = extends_ ? call.arguments.slice(seen.length) : call.arguments;
                if (rest || !calls.has(call.index)) {
                    out.push(piece({ id, toolCall: { ...call, arguments: rest }, replace: !extends_, resumed: true }));
                }
            }
            return out;
        }
        case "done":
            return [piece({ id, finishReason: state.finishReason, usage: state.usage, resumed: true })];
        case "error":
            throw new StreamFailed(String(data.message ?? "the stream failed"), {
                code: isErrorCode(data.code) ? data.code : "internal_error",
            });
        default:
            return [];
    }
}
// -- waiting --------------------------------------------------------------------------------
/** The wait before attempt `failures + 1`: exponential with jitter, at least `Retry-After`. */
export function backoff(policy, failures, cause) {
    const exp = Math.min(policy.maxDelayMs, policy.baseDelayMs * 2 ** Math.max(0, failures - 1));
    const jittered = exp / 2 + Math.random() * (exp / 2);
    const asked = cause instanceof AirlaneError && cause.retryAfterS !== null ? cause.retryAfterS * 1000 : 0;
    return Math.max(jittered, Math.min(asked, policy.maxDelayMs));
}
/** Wait `ms`, or less if `signal` aborts (then throw its reason). */
export function sleep(ms, signal) {
    return new Promise((resolve, reject) => {
        if (signal?.aborted)
            return reject(signal.reason);
        const timer = setTimeout(() => {
            signal?.removeEventListener("abort", onAbort);
            resolve();
        }, ms);
        const onAbort = () => {
            clearTimeout(timer);
            reject(signal?.reason);
        };
        signal?.addEventListener("abort", onAbort, { once: true });
    });
}
