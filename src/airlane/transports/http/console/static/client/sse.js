/**
 * Server-sent events, parsed as the WHATWG specification says: lines end with CRLF, LF or
 * CR; `data` lines join with LF; a comment (`: ping`) is skipped; an `id` holding a NUL is
 * ignored; a message is dispatched at a blank line, and one without data is none.
 */
/** An incremental parser: `feed` it text as it arrives, get back the messages it ends. */
export class SSEParser {
    #buffer = "";
    #data = [];
    #event = "";
    #id = null;
    #sawCR = false;
    /** Parse `chunk`; the messages it completes. */
    feed(chunk) {
        const messages = [];
        let text = chunk;
        if (this.#sawCR && text.startsWith("\n"))
            text = text.slice(1); // the LF of a split CRLF
        this.#sawCR = false;
        let start = 0;
        const buffer = this.#buffer + text;
        const offset = this.#buffer.length;
        for (let i = offset; i < buffer.length; i++) {
            const c = buffer.charCodeAt(i);
            if (c !== 10 && c !== 13)
                continue;
            this.#line(buffer.slice(start, i), messages);
            if (c === 13) {
                if (i + 1 === buffer.length)
                    this.#sawCR = true;
                else if (buffer.charCodeAt(i + 1) === 10)
                    i++;
            }
            start = i + 1;
        }
        this.#buffer = buffer.slice(start);
        return messages;
    }
    #line(line, out) {
        if (line === "") {
            if (this.#data.length > 0) {
                out.push({ event: this.#event || "message", data: this.#data.join("\n"), id: this.#id });
            }
            this.#data = [];
            this.#event = "";
            return;
        }
        if (line.startsWith(":"))
            return;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? "" : line.slice(colon + 1);
        if (value.startsWith(" "))
            value = value.slice(1);
        if (field === "data")
            this.#data.push(value);
        else if (field === "event")
            this.#event = value;
        else if (field === "id" && !value.includes("\0"))
            this.#id = value;
    }
}
/** The messages of an SSE response body, as they arrive. */
export async function* readSSE(body, onBytes) {
    const parser = new SSEParser();
    const decoder = new TextDecoder();
    const reader = body.getReader();
    try {
        for (;;) {
            const { done, value } = await reader.read();
            if (done)
                break;
            onBytes?.(value.byteLength);
            yield* parser.feed(decoder.decode(value, { stream: true }));
        }
        yield* parser.feed(decoder.decode());
    }
    finally {
        await reader.cancel().catch(() => undefined);
    }
}
