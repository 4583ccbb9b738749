/** Rooms: a room's shared state (a last-writer-wins map, docs/sync.md), live: the view joins
 * the room's WebSocket and shows every change any client makes, on any node. */
import { field, h } from "./dom.js";
import { describe } from "./logs.js";
const CHANGES = 100;
export const rooms = (root, context, params) => {
    const room = params.get("room");
    const name = h("input", { name: "room", required: true, placeholder: "doc-1", value: room ?? "" });
    root.append(h("h1", {}, "Rooms"), h("form", {
        class: "panel row",
        onsubmit: (e) => { e.preventDefault(); location.hash = `#/rooms?room=${encodeURIComponent(name.value)}`; },
    }, field("Room", name), h("button", { type: "submit", class: "primary" }, "Join")));
    if (!room)
        return () => undefined;
    const entries = h("tbody", {});
    const changes = h("ol", { class: "log", "aria-label": "changes" });
    const state = h("p", { role: "status", class: "muted" }, "joining…");
    root.append(h("section", { class: "panel" }, h("h2", {}, room), state, h("div", { class: "scroll" }, h("table", {}, h("thead", {}, h("tr", {}, h("th", {}, "key"), h("th", {}, "value"))), entries))), h("section", { class: "panel" }, h("h2", {}, "Changes"), changes));
    const show = (map) => {
        const keys = Object.keys(map).sort();
        entries.replaceChildren(...keys.map((key) => h("tr", {}, h("td", {}, key), h("td", {}, h("code", {}, JSON.stringify(map[key]))))));
        if (!keys.length)
            entries.append(h("tr", {}, h("td", { class: "muted", colspan: "2" }, "empty")));
    };
    let socket = null;
    let left = false;
    void (async () => {
        try {
            socket = new WebSocket(await roomUrl(context, room));
        }
        catch (error) {
            state.textContent = describe(error);
            return;
        }
        socket.onmessage = async (message) => {
            const body = JSON.parse(String(message.data));
            if (body.type === "state") {
                show(body.state ?? {});
                state.textContent = "joined: changes appear as they are made";
            }
            else if (body.type === "ops") {
                for (const op of body.ops ?? []) {
                    changes.append(h("li", {}, `${op.action} ${op.key}${op.action === "set" ? ` = ${JSON.stringify(op.value)}` : ""}`));
                    while (changes.childElementCount > CHANGES)
                        changes.firstElementChild?.remove();
                }
                // The state after the change, as the gateway merged it (clocks decide, not arrival).
                show((await context.client.json("GET", `/v1/rooms/${encodeURIComponent(room)}`)).state);
            }
            else if (body.type === "error") {
                state.textContent = `error: ${body.message ?? ""}`;
            }
        };
        socket.onclose = (event) => {
            if (!left)
                state.textContent = `the room's socket closed (${event.code}${event.reason ? `: ${event.reason}` : ""})`;
        };
    })();
    return () => {
        left = true;
        socket?.close(1000);
    };
};
async function roomUrl(context, room) {
    let url = `${location.origin.replace(/^http/, "ws")}/v1/rooms/${encodeURIComponent(room)}`;
    if (context.apiKey) {
        const ticket = await context.client.json("POST", "/v1/tickets");
        url += `?ticket=${encodeURIComponent(String(ticket.ticket))}`;
    }
    return url;
}
