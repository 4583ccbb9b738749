/** Artifacts: model versions, their manifests, and how many bytes each version shares with
 * the one before it (the chunks a pull reuses instead of downloading). */

import type { View } from "./context.js";
import { bytes, facts, h, num } from "./dom.js";
import { describe } from "./logs.js";

interface Version {
  version: string;
  sha256: string;
  size: number;
  files: string[];
  signed: boolean;
}

type Chunk = [number, number, string, string];

interface Manifest {
  files: { path: string; size: number; chunks: Chunk[] }[];
  chunking?: { algorithm?: string };
}

export const artifacts: View = (root, context, params) => {
  const name = params.get("name");
  const list = h("ul", { class: "recent" });
  root.append(h("h1", {}, "Artifacts"), h("section", { class: "panel" }, h("h2", {}, "Artifacts"), list));
  void (async () => {
    try {
      const items = (await context.client.json("GET", "/v1/artifacts")).artifacts as { name: string; latest: string; versions: string[] }[];
      list.replaceChildren(...(items.length ? items.map((a) => h("li", {},
        h("a", { href: `#/artifacts?name=${encodeURIComponent(a.name)}` }, a.name),
        ` (${a.versions.length} versions, latest ${a.latest})`)) : [h("li", { class: "muted" }, "none (serve with --artifacts DIR)")]));
    } catch (error) {
      list.replaceChildren(h("li", { class: "error" }, describe(error)));
    }
  })();
  if (!name) return () => undefined;

  const panel = h("section", { class: "panel" }, h("h2", {}, name));
  const rows = h("tbody", {});
  const manifest = h("div", {});
  root.append(panel, manifest);
  void (async () => {
    try {
      const body = await context.client.json("GET", `/v1/artifacts/${encodeURIComponent(name)}`);
      const versions = body.versions as Version[];
      panel.append(facts([["Latest", String(body.latest)], ["Announced on", String(body.stream)]]),
        h("div", { class: "scroll" }, h("table", {}, h("thead", {}, h("tr", {},
          h("th", {}, "version"), h("th", {}, "size"), h("th", {}, "files"), h("th", {}, "signed"), h("th", {}, "shared with the one before"))), rows)));
      const manifests = await Promise.all(versions.map((v) =>
        context.client.json("GET", `/v1/artifacts/${encodeURIComponent(name)}/${encodeURIComponent(v.version)}/manifest.json`) as Promise<unknown> as Promise<Manifest>));
      versions.forEach((v, i) => {
        const previous = i > 0 ? manifests[i - 1] : undefined;
        const current = manifests[i];
        const reuse = previous && current ? shared(previous, current) : null;
        rows.append(h("tr", {},
          h("td", {}, h("button", { type: "button", class: "link", onclick: () => showManifest(v, current) }, v.version)),
          h("td", { class: "num" }, bytes(v.size)),
          h("td", {}, v.files.join(", ")),
          h("td", {}, v.signed ? "yes" : "no"),
          h("td", {}, reuse === null ? "–" : `${bytes(reuse)} of ${bytes(v.size)} (${num((100 * reuse) / Math.max(1, v.size))} %)`)));
      });
      const last = versions.at(-1);
      if (last) showManifest(last, manifests.at(-1));
    } catch (error) {
      panel.append(h("p", { class: "error" }, describe(error)));
    }
  })();

  function showManifest(version: Version, body: Manifest | undefined): void {
    if (!body) return;
    manifest.replaceChildren(h("section", { class: "panel" }, h("h2", {}, `Manifest of version ${version.version}`),
      facts([["SHA-256", version.sha256], ["Chunking", body.chunking?.algorithm ?? "–"]]),
      h("div", { class: "scroll" }, h("table", {}, h("thead", {}, h("tr", {}, h("th", {}, "file"), h("th", {}, "size"), h("th", {}, "chunks"))),
        h("tbody", {}, ...body.files.map((f) => h("tr", {}, h("td", {}, f.path), h("td", { class: "num" }, bytes(f.size)), h("td", { class: "num" }, num(f.chunks.length)))))))));
  }
  return () => undefined;
};

/** Bytes of `current`'s chunks whose content (hash and length) `previous` holds too. */
function shared(previous: Manifest, current: Manifest): number {
  const known = new Set(previous.files.flatMap((f) => f.chunks.map((c) => `${c[2]}:${c[1]}`)));
  let total = 0;
  for (const file of current.files) for (const c of file.chunks) if (known.has(`${c[2]}:${c[1]}`)) total += c[1];
  return total;
}
