// Bundles the extension into one CommonJS file (`vscode` is provided by the editor), and
// writes the licences of the bundled packages next to it: the bundle is a copy of their code.
import { build } from "esbuild";
import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";

const production = !process.argv.includes("--dev");

const result = await build({
  entryPoints: ["src/extension.ts"],
  outfile: "dist/extension.js",
  bundle: true,
  platform: "node",
  format: "cjs",
  target: "node20",
  external: ["vscode"],
  minify: production,
  sourcemap: production ? false : "inline",
  metafile: true,
  logLevel: "info",
});

/** The folder of the package that holds a bundled input file (a nested package.json that
 * only sets the module type, as in `dist/commonjs/`, is not the package). */
function packageFolder(input) {
  for (let folder = dirname(input); folder.includes("node_modules"); folder = dirname(folder)) {
    const manifest = join(folder, "package.json");
    if (existsSync(manifest) && JSON.parse(readFileSync(manifest, "utf8")).name) {
      return folder;
    }
  }
  return undefined;
}

const folders = new Set(
  Object.keys(result.metafile.inputs)
    .filter((input) => input.includes("node_modules"))
    .map(packageFolder)
    .filter(Boolean),
);
const notices = [...folders].sort().map((folder) => {
  const { name, version, license } = JSON.parse(readFileSync(join(folder, "package.json"), "utf8"));
  const file = readdirSync(folder).find((entry) => /^(licen[cs]e|copying)/i.test(entry));
  const text = file ? readFileSync(join(folder, file), "utf8").trim() : `License: ${license}`;
  return `${name} ${version}\n\n${text}\n`;
});
writeFileSync(
  "dist/THIRD-PARTY-NOTICES.txt",
  `dist/extension.js bundles the following packages.\n\n${notices.join(`\n${"-".repeat(72)}\n\n`)}`,
);
