/** Small DOM helpers: elements from tags, attributes and children, never from HTML strings. */
/** An element `tag` with `attributes` (`on*` functions become listeners) and `children`. */
export function h(tag, attributes = {}, ...children) {
    const element = document.createElement(tag);
    for (const [name, value] of Object.entries(attributes)) {
        if (value === undefined || value === null || value === false)
            continue;
        if (name.startsWith("on") && typeof value === "function") {
            element.addEventListener(name.slice(2), value);
        }
        else if (value === true) {
            element.setAttribute(name, "");
        }
        else {
            element.setAttribute(name, String(value));
        }
    }
    element.append(...children.filter((c) => c !== null && c !== undefined && c !== false));
    return element;
}
/** A labelled form field: `<label>text <input ...></label>`. */
export function field(label, control) {
    return h("label", { class: "field" }, h("span", {}, label), control);
}
/** A number formatted for people (1,234.5). */
export function num(value, digits = 0) {
    if (value === null || value === undefined || !Number.isFinite(value))
        return "–";
    return value.toLocaleString("en-US", { maximumFractionDigits: digits, minimumFractionDigits: digits });
}
/** Bytes as B, KB, MB. */
export function bytes(value) {
    if (value < 1024)
        return `${num(value)} B`;
    if (value < 1024 ** 2)
        return `${num(value / 1024, 1)} KB`;
    return `${num(value / 1024 ** 2, 1)} MB`;
}
/** A definition list of `pairs`. */
export function facts(pairs) {
    const list = h("dl", { class: "facts" });
    for (const [term, value] of pairs)
        list.append(h("dt", {}, term), h("dd", {}, value));
    return list;
}
