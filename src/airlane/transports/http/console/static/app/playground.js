/** The playground: a chat completion with every knob, streamed or not, cancellable, and the
 * usage ledger of the finished stream. */
import { AirlaneError } from "@airlane/client";
import { facts, field, h, num } from "./dom.js";
export const playground = (root, context) => {
    const model = h("input", { name: "model", value: "airlane-synthetic", required: true });
    const prompt = h("textarea", { name: "prompt", rows: "3", required: true });
    prompt.value = "Tell me about resumable streams.";
    const seed = h("input", { name: "seed", type: "number", value: "7" });
    const temperature = h("input", { name: "temperature", type: "number", step: "0.1", min: "0", max: "2", value: "1" });
    const maxTokens = h("input", { name: "max_tokens", type: "number", min: "1", value: "80" });
    const stream = h("input", { name: "stream", type: "checkbox", checked: true });
    const start = h("button", { type: "submit", class: "primary" }, "Generate");
    const cancel = h("button", { type: "button", disabled: true }, "Cancel");
    const output = h("pre", { class: "output", "aria-live": "polite", "aria-label": "the answer" });
    const ledger = h("div", { class: "ledger" });
    const state = h("p", { class: "muted", role: "status" });
    let running = null;
    const form = h("form", { class: "panel form", onsubmit: (event) => { event.preventDefault(); void run(); } }, field("Model", model), field("Prompt", prompt), h("div", { class: "row" }, field("Seed", seed), field("Temperature", temperature), field("Max tokens", maxTokens), h("label", { class: "check" }, stream, " stream")), h("div", { class: "row" }, start, cancel));
    cancel.addEventListener("click", () => void running?.cancel());
    root.append(h("h1", {}, "Playground"), form, state, h("section", { class: "panel" }, h("h2", {}, "Answer"), output), ledger);
    async function run() {
        const request = {
            model: model.value,
            messages: [{ role: "user", content: prompt.value }],
            max_tokens: Number(maxTokens.value),
            temperature: Number(temperature.value),
        };
        if (seed.value !== "")
            request.seed = Number(seed.value);
        output.textContent = "";
        ledger.replaceChildren();
        start.disabled = true;
        const began = performance.now();
        try {
            if (stream.checked) {
                running = context.client.chatStream(request);
                cancel.disabled = false;
                state.textContent = "streaming…";
                for await (const piece of running) {
                    if (piece.replace)
                        output.textContent = piece.text;
                    else if (piece.channel === "content")
                        output.textContent += piece.text;
                }
                const streamId = running.streamId;
                state.textContent = `finished: ${running.state.finishReason ?? "?"} in ${num(performance.now() - began)} ms`;
                if (streamId)
                    void showLedger(streamId);
            }
            else {
                state.textContent = "waiting for the whole answer…";
                const answer = await context.client.chat(request);
                const choice = answer.choices[0];
                output.textContent = choice?.message.content ?? "";
                state.textContent = `finished: ${choice?.finish_reason ?? "?"} in ${num(performance.now() - began)} ms`;
                const usage = answer.usage;
                ledger.replaceChildren(h("section", { class: "panel" }, h("h2", {}, "Usage"), facts([["Prompt tokens", num(usage?.prompt_tokens)], ["Completion tokens", num(usage?.completion_tokens)]])));
            }
        }
        catch (error) {
            state.textContent = error instanceof AirlaneError ? `${error.code}: ${error.message}` : String(error);
        }
        finally {
            running = null;
            start.disabled = false;
            cancel.disabled = true;
        }
    }
    async function showLedger(streamId) {
        const info = await context.client.info(streamId);
        const usage = (info.usage ?? {});
        const latency = (usage.gateway_latency_ms ?? {});
        ledger.replaceChildren(h("section", { class: "panel" }, h("h2", {}, "Usage ledger"), facts([
            ["Stream", streamId],
            ["Prompt tokens", num(usage.prompt_tokens)],
            ["Completion tokens", num(usage.completion_tokens)],
            ["Time to first token", `${num(usage.time_to_first_token_ms, 1)} ms`],
            ["Gateway latency p50 / p99", `${num(latency.p50, 3)} / ${num(latency.p99, 3)} ms`],
        ]), h("a", { href: `#/streams?id=${encodeURIComponent(streamId)}` }, "Open in the stream viewer")));
    }
    return () => void running?.close();
};
