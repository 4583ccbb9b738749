/** The overview: the gateway's counts now, and throughput and delivery lag over time, from
 * its metrics stream (`GET /v1/metrics/stream`, a sample a second). */
import { readSSE } from "@airlane/client";
import { bytes, h, num } from "./dom.js";
import { drawPlot } from "./plot.js";
const WINDOW = 120; // samples kept: two minutes
export const overview = (root, _context) => {
    const cards = h("div", { class: "cards", "aria-live": "polite" });
    const throughput = h("canvas", { class: "plot", role: "img", "aria-label": "events delivered and appended per second" });
    const lag = h("canvas", { class: "plot", role: "img", "aria-label": "delivery lag p50 and p99 in milliseconds" });
    const status = h("p", { class: "muted", id: "overview-status" }, "connecting to the metrics stream…");
    root.append(h("h1", {}, "Overview"), status, cards, h("section", { class: "panel" }, h("h2", {}, "Throughput"), legend([["--plot-1", "delivered/s"], ["--plot-2", "appended/s"]]), throughput), h("section", { class: "panel" }, h("h2", {}, "Delivery lag"), legend([["--plot-1", "p50"], ["--plot-2", "p99"]]), lag));
    const history = [];
    const abort = new AbortController();
    const render = (sample) => {
        history.push(sample);
        if (history.length > WINDOW)
            history.shift();
        const open = Object.values(sample.connections).reduce((a, b) => a + b, 0);
        const transports = Object.entries(sample.connections).map(([name, count]) => `${name} ${count}`).join(", ");
        cards.replaceChildren(card("Streams", num(sample.streams)), card("Subscribers", num(sample.subscribers)), card("Generations", num(sample.generations)), card("Connections", num(open), transports), card("Delivered", `${num(sample.delivered_per_s ?? 0)}/s`), card("Sent", `${bytes(sample.bytes_per_s ?? 0)}/s`), card("Retained", bytes(sample.retained_bytes)));
        drawPlot(throughput, [
            { label: "delivered/s", colour: "--plot-1", values: history.map((s) => s.delivered_per_s ?? null) },
            { label: "appended/s", colour: "--plot-2", values: history.map((s) => s.appended_per_s ?? null) },
        ], "events/s", 10, WINDOW);
        drawPlot(lag, [
            { label: "p50", colour: "--plot-1", values: history.map((s) => s.lag_ms?.p50 ?? null) },
            { label: "p99", colour: "--plot-2", values: history.map((s) => s.lag_ms?.p99 ?? null) },
        ], "ms", 1, WINDOW);
    };
    void (async () => {
        try {
            const response = await fetch("/v1/metrics/stream", { signal: abort.signal, cache: "no-store" });
            if (!response.ok || response.body === null)
                throw new Error(`HTTP ${response.status}`);
            status.textContent = "live, a sample a second";
            for await (const message of readSSE(response.body))
                render(JSON.parse(message.data));
        }
        catch (error) {
            if (!abort.signal.aborted)
                status.textContent = `the metrics stream stopped: ${String(error)}`;
        }
    })();
    return () => abort.abort();
};
function card(label, value, detail = "") {
    return h("div", { class: "card" }, h("span", { class: "label" }, label), h("span", { class: "value" }, value), detail ? h("span", { class: "detail" }, detail) : null);
}
function legend(items) {
    // Classes, not style attributes: the console's content security policy allows no inline style.
    return h("ul", { class: "legend" }, ...items.map(([colour, text]) => h("li", { class: `swatch${colour.slice(-2)}` }, text)));
}
