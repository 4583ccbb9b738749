/** The console's shell: navigation between views by the URL's fragment, the API key, and
 * the theme. Each view lives in a module of its own. */
import { ConsoleContext } from "./context.js";
import { h } from "./dom.js";
import { artifacts } from "./artifacts.js";
import { cluster } from "./cluster.js";
import { logs } from "./logs.js";
import { overview } from "./overview.js";
import { playground } from "./playground.js";
import { rooms } from "./rooms.js";
import { schemas } from "./schemas.js";
import { streams } from "./streams.js";
const VIEWS = [
    ["", "Overview", overview],
    ["streams", "Streams", streams],
    ["playground", "Playground", playground],
    ["logs", "Event logs", logs],
    ["schemas", "Schemas", schemas],
    ["rooms", "Rooms", rooms],
    ["artifacts", "Artifacts", artifacts],
    ["cluster", "Cluster", cluster],
];
const context = new ConsoleContext();
const main = document.querySelector("main");
const nav = document.querySelector("nav ul");
let leave = () => undefined;
for (const [path, title] of VIEWS) {
    nav.append(h("li", {}, h("a", { href: `#/${path}`, "data-view": path }, title)));
}
const keyForm = document.querySelector("#key");
const keyInput = keyForm.querySelector("input");
keyInput.value = context.apiKey;
keyForm.addEventListener("submit", (event) => {
    event.preventDefault();
    context.setApiKey(keyInput.value.trim());
    route();
});
function route() {
    const [path = "", query = ""] = location.hash.replace(/^#\/?/, "").split("?");
    const entry = VIEWS.find(([name]) => name === path) ?? VIEWS[0];
    if (entry === undefined)
        return;
    const [name, title, view] = entry;
    leave();
    main.replaceChildren();
    document.title = `${title} · Airlane console`;
    for (const link of nav.querySelectorAll("a")) {
        if (link.dataset.view === name)
            link.setAttribute("aria-current", "page");
        else
            link.removeAttribute("aria-current");
    }
    leave = view(main, context, new URLSearchParams(query));
    main.focus({ preventScroll: true });
}
window.addEventListener("hashchange", route);
route();
