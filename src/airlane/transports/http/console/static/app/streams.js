/** The stream viewer: a stream's events as they arrive, its position and usage, its
 * snapshot, and a "drop and resume" button that cuts the connection and shows the resume
 * continue at the next sequence number. */
import { AirlaneError, TextState } from "@airlane/client";
import { bytes, facts, field, h, num } from "./dom.js";
const LOG_LINES = 200;
export const streams = (root, context, params) => {
    const id = h("input", { name: "stream", placeholder: "chatcmpl-… or agents/42/events", required: true, value: params.get("id") ?? "" });
    const form = h("form", { class: "panel row", onsubmit: (e) => { e.preventDefault(); location.hash = `#/streams?id=${encodeURIComponent(id.value)}`; } }, field("Stream id", id), h("button", { type: "submit", class: "primary" }, "Open"));
    const held = h("tbody", {});
    const refresh = h("button", { type: "button" }, "Refresh");
    root.append(h("h1", {}, "Streams"), form);
    const streamId = params.get("id");
    if (!streamId) {
        root.append(h("section", { class: "panel" }, h("h2", {}, "On this gateway"), refresh, h("div", { class: "scroll" }, h("table", {}, h("thead", {}, h("tr", {}, h("th", {}, "stream"), h("th", {}, "status"), h("th", {}, "events"), h("th", {}, "subscribers"), h("th", {}, "retained"))), held))));
        const list = async () => {
            try {
                const body = await context.client.json("GET", "/v1/streams?limit=100");
                const items = body.streams;
                held.replaceChildren(...items.map((info) => h("tr", {}, h("td", {}, h("a", { href: `#/streams?id=${encodeURIComponent(String(info.id))}` }, String(info.id))), h("td", {}, info.ended ? `ended: ${String(info.finish_reason)}` : "running"), h("td", { class: "num" }, num(info.last_seq)), h("td", { class: "num" }, num(info.subscribers)), h("td", { class: "num" }, bytes(info.retained_bytes)))));
                if (!items.length)
                    held.append(h("tr", {}, h("td", { colspan: "5", class: "muted" }, "no streams yet: start one in the playground")));
            }
            catch (error) {
                held.replaceChildren(h("tr", {}, h("td", { colspan: "5", class: "error" }, error instanceof AirlaneError ? `${error.code}: ${error.message}` : String(error))));
            }
        };
        refresh.addEventListener("click", () => void list());
        void list();
        return () => undefined;
    }
    const info = h("div", {});
    const text = h("pre", { class: "output", "aria-live": "polite", "aria-label": "the stream's text" });
    const log = h("ol", { class: "log", "aria-label": "events" });
    const state = h("p", { role: "status", class: "muted" });
    const drop = h("button", { type: "button" }, "Drop and resume");
    const snapshotButton = h("button", { type: "button" }, "Snapshot");
    const snapshot = h("div", {});
    root.append(h("section", { class: "panel" }, h("h2", {}, streamId), info, h("div", { class: "row" }, drop, snapshotButton), state), h("section", { class: "panel" }, h("h2", {}, "Text"), text), snapshot, h("section", { class: "panel" }, h("h2", {}, "Events"), log));
    const accumulated = new TextState();
    let lastId = null;
    let lastSeq = 0;
    let reading = null;
    let left = false;
    let dropped = null;
    const line = (event) => {
        const detail = event.kind === "delta" ? JSON.stringify(event.data.text) : event.kind === "done" ? String(event.data.finish_reason) : "";
        log.append(h("li", { class: `kind-${event.kind}` }, h("span", { class: "seq" }, String(event.seq)), ` ${event.kind} ${detail}`));
        while (log.childElementCount > LOG_LINES)
            log.firstElementChild?.remove();
    };
    let ticker;
    const refreshInfo = async () => {
        try {
            const body = await context.client.info(streamId);
            if (body.ended)
                clearInterval(ticker); // nothing changes any more
            const usage = (body.usage ?? {});
            info.replaceChildren(facts([
                ["Status", body.ended ? `ended: ${String(body.finish_reason ?? "?")}` : "running"],
                ["Position", String(body.resume_token ?? "–")],
                ["Events", `${num(body.last_seq)} (${num(body.retained_events)} retained)`],
                ["Subscribers", num(body.subscribers)],
                ["Completion tokens", num(usage.completion_tokens)],
                ["Time to first token", `${num(usage.time_to_first_token_ms, 1)} ms`],
            ]));
        }
        catch (error) {
            info.replaceChildren(h("p", { class: "error" }, error instanceof AirlaneError ? `${error.code}: ${error.message}` : String(error)));
        }
    };
    const read = async () => {
        while (!left) {
            reading = new AbortController();
            try {
                for await (const event of context.client.events(streamId, { from: lastId, signal: reading.signal })) {
                    if (dropped !== null && event.kind !== "snapshot") {
                        // A reader catching up gets a run of deltas merged into one, which carries the
                        // run's last seq: a jump is a gap only for an event of another kind.
                        const next = dropped + 1;
                        const merged = event.kind === "delta" && event.seq > next;
                        const gap = event.seq !== next && !merged;
                        state.textContent = gap
                            ? `resumed: a gap, from seq ${dropped} to ${event.seq}`
                            : merged
                                ? `resumed after seq ${dropped}: seqs ${next} to ${event.seq} in one merged delta, no gap`
                                : `resumed after seq ${dropped} at seq ${event.seq}: no gap`;
                        state.dataset.resume = gap ? "gap" : "ok";
                        dropped = null;
                    }
                    if (accumulated.apply(event) || event.kind === "snapshot") {
                        if (event.kind === "snapshot" && accumulated.seq > 0 && lastSeq === 0)
                            lastSeq = event.seq;
                        text.textContent = accumulated.text("content");
                        lastId = event.id ?? lastId;
                        lastSeq = Math.max(lastSeq, event.seq);
                        line(event);
                    }
                }
                if (!state.dataset.resume)
                    state.textContent = "the stream has ended";
                return;
            }
            catch (error) {
                if (reading.signal.aborted && !left)
                    continue; // "drop and resume": read again from lastId
                if (!left)
                    state.textContent = error instanceof AirlaneError ? `${error.code}: ${error.message}` : String(error);
                return;
            }
        }
    };
    drop.addEventListener("click", () => {
        dropped = lastSeq;
        state.textContent = `dropped the connection after seq ${lastSeq}; resuming from ${lastId ?? "the start"}…`;
        delete state.dataset.resume;
        reading?.abort();
    });
    snapshotButton.addEventListener("click", async () => {
        try {
            const event = await context.client.snapshot(streamId);
            const texts = (event.data.text ?? {});
            const content = texts.content ?? "";
            snapshot.replaceChildren(h("section", { class: "panel" }, h("h2", {}, `Snapshot at seq ${event.seq}`), facts([["Content characters", num(content.length)], ["Agrees with the text above", agreement(content, accumulated.text("content"))]]), h("pre", { class: "output" }, content)));
        }
        catch (error) {
            snapshot.replaceChildren(h("p", { class: "error" }, String(error)));
        }
    });
    void refreshInfo();
    void read();
    ticker = setInterval(() => void refreshInfo(), 500); // position and usage, live
    return () => {
        left = true;
        clearInterval(ticker);
        reading?.abort();
    };
};
/** How a snapshot's text relates to the text read: the same, the start of it (the stream
 * went on after the snapshot), or neither. */
function agreement(snapshot, read) {
    if (snapshot === read)
        return "yes, the same text";
    if (read.startsWith(snapshot))
        return "yes, the text so far at its position (the stream went on)";
    if (snapshot.startsWith(read))
        return "yes, and it holds more than was read yet";
    return "no";
}
