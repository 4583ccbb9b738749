/** The cluster: the gateway nodes sharing the JetStream hub, as the node serving the console
 * knows them from their heartbeats, refreshed every two seconds. */
import { h, num } from "./dom.js";
import { describe } from "./logs.js";
export const cluster = (root, context) => {
    const summary = h("p", { role: "status" });
    const rows = h("tbody", {});
    root.append(h("h1", {}, "Cluster"), h("section", { class: "panel" }, summary, h("div", { class: "scroll" }, h("table", {}, h("thead", {}, h("tr", {}, h("th", {}, "node"), h("th", {}, "run"), h("th", {}, "health"), h("th", {}, "last heard"), h("th", {}, "producing"), h("th", {}, "readers"))), rows))));
    const refresh = async () => {
        try {
            const body = await context.client.json("GET", "/v1/cluster");
            const nodes = body.nodes;
            const alive = nodes.filter((n) => n.alive).length;
            const gone = nodes.length - alive;
            summary.textContent = body.shared
                ? `${alive} ${alive === 1 ? "node" : "nodes"} alive${gone ? `, ${gone} gone` : ""}, as this node hears them`
                : "one node: this gateway has no shared hub (serve with --hub nats://...)";
            rows.replaceChildren(...nodes.map((n) => h("tr", { class: n.alive === false ? "dead" : "" }, h("td", {}, n.self ? `${n.node} (this node)` : n.node), h("td", {}, h("code", {}, n.run ?? "")), h("td", {}, n.alive === null ? "too early to tell" : n.alive ? "alive" : n.gone === "left" ? "left (shut down)" : "silent: dead"), h("td", { class: "num" }, n.self ? "–" : `${num(n.heard_s_ago, 1)} s ago`), h("td", {}, `${num(n.producing)}${n.streams?.length ? `: ${n.streams.join(", ")}${n.producing > n.streams.length ? ", …" : ""}` : ""}`), h("td", { class: "num" }, num(n.readers)))));
        }
        catch (error) {
            summary.textContent = describe(error);
        }
    };
    void refresh();
    const ticker = setInterval(() => void refresh(), 2000);
    return () => clearInterval(ticker);
};
