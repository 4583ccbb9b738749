/** The schema registry: its subjects, a subject's versions and compatibility mode, and any
 * version's schema. */
import { facts, h } from "./dom.js";
import { describe } from "./logs.js";
export const schemas = (root, context, params) => {
    const subject = params.get("subject");
    const list = h("ul", { class: "recent" });
    root.append(h("h1", {}, "Schemas"), h("section", { class: "panel" }, h("h2", {}, "Subjects"), list));
    void (async () => {
        try {
            const names = (await context.client.json("GET", "/v1/schemas")).subjects;
            list.replaceChildren(...(names.length ? names.map((name) => h("li", {}, h("a", { href: `#/schemas?subject=${encodeURIComponent(name)}` }, name))) : [h("li", { class: "muted" }, "no subjects yet")]));
        }
        catch (error) {
            list.replaceChildren(h("li", { class: "error" }, describe(error)));
        }
    })();
    if (!subject)
        return () => undefined;
    const panel = h("section", { class: "panel" }, h("h2", {}, subject));
    const schema = h("pre", { class: "output", "aria-label": "the schema" });
    root.append(panel);
    const path = `/v1/schemas/${encodeURIComponent(subject)}`;
    const show = async (version) => {
        try {
            const body = await context.client.json("GET", `${path}/versions/${version}`);
            schema.textContent = JSON.stringify(body.schema ?? body, null, 2);
            for (const link of panel.querySelectorAll("button[data-version]")) {
                link.setAttribute("aria-pressed", String(link.dataset.version === String(body.version)));
            }
        }
        catch (error) {
            schema.textContent = describe(error);
        }
    };
    void (async () => {
        try {
            const body = await context.client.json("GET", path);
            const versions = body.versions;
            panel.append(facts([["Compatibility", String(body.compatibility)], ["Versions", versions.join(", ")]]), h("div", { class: "row", role: "group", "aria-label": "versions" }, ...versions.map((v) => h("button", { type: "button", "data-version": String(v), onclick: () => void show(String(v)) }, `version ${v}`))), schema);
            await show("latest");
        }
        catch (error) {
            panel.append(h("p", { class: "error" }, describe(error)));
        }
    })();
    return () => undefined;
};
