/**
 * The stream model on the client: native events (docs/streams.md) and `TextState`, which
 * rebuilds a stream's exact text from them: a `delta` extends a channel, a `snapshot`
 * replaces everything, and an event at or before the last position applied in the same epoch
 * is ignored, so a resume that overlaps what arrived never repeats text.
 */
/** Whether `kind` ends a stream. */
export function isTerminal(kind) {
    return kind === "done" || kind === "error";
}
/** The event of a JSON text and its resume token. */
export function parseEvent(json, id) {
    const data = JSON.parse(json);
    return {
        id,
        seq: typeof data.seq === "number" ? data.seq : 0,
        kind: String(data.kind),
        data,
    };
}
/** A stream's text, tool calls and outcome, rebuilt from its events. */
export class TextState {
    #text = new Map();
    #calls = new Map();
    /** The epoch of the last event applied. */
    epoch = null;
    /** The sequence number of the last event applied. */
    seq = 0;
    /** How the stream finished, once a `done` was applied. */
    finishReason = null;
    /** The usage its terminal event reported. */
    usage = null;
    /** The `error` event's fields, if it failed. */
    error = null;
    /** All text of `channel` so far. */
    text(channel = "content") {
        return this.#text.get(channel) ?? "";
    }
    /** The tool calls so far, by index. */
    get toolCalls() {
        return [...this.#calls.values()].sort((a, b) => a.index - b.index).map((c) => ({ ...c }));
    }
    /** Whether a terminal event was applied. */
    get ended() {
        return this.finishReason !== null || this.error !== null;
    }
    /** Apply one event; false if it was at or before what was applied (and was ignored). */
    apply(event) {
        const epoch = event.id ? event.id.slice(0, event.id.lastIndexOf(":")) : this.epoch;
        const same = epoch === this.epoch || this.epoch === null || epoch === null;
        if (same && this.seq > 0 && event.seq <= this.seq)
            return false;
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
                this.usage = data.usage ?? null;
                break;
            case "error":
                this.error = { ...data };
                this.usage = data.usage ?? null;
                break;
            default:
                break;
        }
        return true;
    }
    /** Move the position to a resume token without applying an event (an OpenAI chunk's). */
    advance(id) {
        if (!id)
            return;
        const colon = id.lastIndexOf(":");
        const seq = Number.parseInt(id.slice(colon + 1), 10);
        this.epoch = id.slice(0, colon);
        if (Number.isFinite(seq))
            this.seq = seq;
    }
    /** Append `text` to `channel`. */
    append(channel, text) {
        if (text)
            this.#text.set(channel, this.text(channel) + text);
    }
    /** Replace the text of `channel`. */
    set(channel, text) {
        this.#text.set(channel, text);
    }
    /** Extend tool call `index`'s arguments (and set its id and name when given). */
    extendCall(index, id, name, args) {
        const key = typeof index === "number" ? index : 0;
        const call = this.#calls.get(key) ?? { index: key, arguments: "" };
        if (typeof id === "string")
            call.id = id;
        if (typeof name === "string")
            call.name = name;
        call.arguments += args;
        this.#calls.set(key, call);
    }
    #replace(data) {
        this.#text.clear();
        this.#calls.clear();
        const texts = (data.text ?? {});
        for (const [channel, text] of Object.entries(texts)) {
            if (text)
                this.#text.set(channel, String(text));
        }
        for (const call of (data.tool_calls ?? [])) {
            this.extendCall(call.index, call.id, call.name, String(call.arguments ?? ""));
        }
    }
}
