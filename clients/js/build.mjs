// Builds the package and the console the gateway serves:
//   dist/            the npm package (tsc -p tsconfig.json: ES modules and .d.ts)
//   <static>/client/ the same modules, served at /console/assets/client/
//   <static>/app/    the console's pages (tsc -p tsconfig.console.json), which import the
//                    client as "@airlane/client" through the page's import map
// <static> is src/airlane/transports/http/console/static (the Python package ships it: no Node at run time),
// or --static DIR (the tests build into a temporary one and compare).
import { execFileSync } from "node:child_process";
import { copyFileSync, mkdirSync, readdirSync, rmSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const flag = process.argv.indexOf("--static");
const staticDir = flag > 0 ? path.resolve(process.argv[flag + 1]) : path.join(here, "../../src/airlane/transports/http/console/static");
const tsc = path.join(here, "node_modules/typescript/bin/tsc");

function compile(project, outDir) {
  try {
    execFileSync(process.execPath, [tsc, "-p", path.join(here, project), "--outDir", outDir], { stdio: "inherit" });
  } catch {
    console.error(`build.mjs: tsc -p ${project} failed (its messages are above)`);
    process.exit(1);
  }
}

compile("tsconfig.json", path.join(here, "dist"));
const client = path.join(staticDir, "client");
rmSync(client, { recursive: true, force: true });
mkdirSync(client, { recursive: true });
for (const name of readdirSync(path.join(here, "dist"))) {
  if (name.endsWith(".js")) copyFileSync(path.join(here, "dist", name), path.join(client, name));
}
const app = path.join(staticDir, "app");
rmSync(app, { recursive: true, force: true });
compile("tsconfig.console.json", app);
