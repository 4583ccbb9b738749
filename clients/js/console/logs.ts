/** Event logs: their names, a log's bounds and limits, and its records replayed from any
 * position (`GET /v1/logs/{log}/events?from_seq=&limit=`), a page at a time. */

import { AirlaneError } from "@airlane/client";

import type { View } from "./context.js";
import { bytes, facts, field, h, num } from "./dom.js";

const PAGE = 50;

interface LogRecord {
  seq: number;
  time_ns: number;
  type: string;
  content_type: string;
  data?: unknown;
  data_base64?: string;
}

export const logs: View = (root, context, params) => {
  const name = params.get("log");
  const list = h("ul", { class: "recent" });
  root.append(h("h1", {}, "Event logs"), h("section", { class: "panel" }, h("h2", {}, "Logs"), list));
  void (async () => {
    try {
      const body = await context.client.json("GET", "/v1/logs");
      const names = body.logs as string[];
      list.replaceChildren(...(names.length ? names.map((log) =>
        h("li", {}, h("a", { href: `#/logs?log=${encodeURIComponent(log)}` }, log))) : [h("li", { class: "muted" }, "no logs yet")]));
    } catch (error) {
      list.replaceChildren(h("li", { class: "error" }, describe(error)));
    }
  })();
  if (!name) return () => undefined;

  const info = h("div", {});
  const from = h("input", { name: "from_seq", type: "number", min: "1", value: params.get("from") ?? "1" });
  const rows = h("tbody", {});
  const more = h("button", { type: "button", disabled: true }, "Next page");
  const state = h("p", { role: "status", class: "muted" });
  let next = 1;
  const replay = async (start: number, append: boolean): Promise<void> => {
    try {
      const body = await context.client.json("GET", `/v1/logs/${encodeURIComponent(name)}/events?from_seq=${start}&limit=${PAGE}`);
      const records = body.records as LogRecord[];
      const made = records.map((r) => h("tr", {},
        h("td", { class: "num" }, String(r.seq)),
        h("td", {}, new Date(r.time_ns / 1e6).toISOString()),
        h("td", {}, r.type),
        h("td", {}, h("code", {}, preview(r)))));
      if (append) rows.append(...made);
      else rows.replaceChildren(...made);
      next = Number(body.next_seq ?? start + records.length);
      more.disabled = records.length < PAGE;
      state.textContent = records.length ? `records ${records[0]?.seq} to ${records.at(-1)?.seq}` : "no records from there";
    } catch (error) {
      state.textContent = describe(error);
    }
  };
  const form = h("form", { class: "row", onsubmit: (e: Event) => { e.preventDefault(); void replay(Number(from.value) || 1, false); } },
    field("Replay from seq", from), h("button", { type: "submit", class: "primary" }, "Replay"));
  more.addEventListener("click", () => void replay(next, true));
  root.append(h("section", { class: "panel" }, h("h2", {}, name), info, form, state,
    h("div", { class: "scroll" }, h("table", {}, h("thead", {}, h("tr", {}, h("th", {}, "seq"), h("th", {}, "time"), h("th", {}, "type"), h("th", {}, "data"))), rows)),
    more));
  void (async () => {
    try {
      const body = await context.client.json("GET", `/v1/logs/${encodeURIComponent(name)}`);
      info.replaceChildren(facts([
        ["Records", `${num(body.events as number)} (seq ${num(body.first_seq as number)} to ${num(body.last_seq as number)})`],
        ["Size", bytes(body.bytes as number)],
        ["Limits", `${num(body.max_events as number)} records, ${bytes(body.max_bytes as number)}, ${body.max_age_s === null ? "no age limit" : `${num(body.max_age_s as number)} s`}`],
      ]));
    } catch (error) {
      info.replaceChildren(h("p", { class: "error" }, describe(error)));
    }
  })();
  void replay(Number(from.value) || 1, false);
  return () => undefined;
};

function preview(record: LogRecord): string {
  const text = record.data !== undefined ? JSON.stringify(record.data) : `${record.content_type}, ${record.data_base64?.length ?? 0} base64 characters`;
  return text.length > 160 ? `${text.slice(0, 160)}…` : text;
}

/** An error as a person reads it. */
export function describe(error: unknown): string {
  return error instanceof AirlaneError ? `${error.code}: ${error.message}` : String(error);
}
