import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { EXTENSION_SETTINGS, needsRestart, SERVER_SETTINGS, serverSection } from "../src/settings";

const manifest = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8"));
const contributed: Record<string, { default: unknown }> = manifest.contributes.configuration.properties;

/** A reader over what the user set, the way WorkspaceConfiguration.get falls back to defaults. */
function reader(user: Record<string, unknown>) {
  return (key: string) => (key in user ? user[key] : contributed[`infill.${key}`]?.default);
}

describe("the server's settings section", () => {
  it("holds every server key with the server's defaults when the user set nothing", () => {
    expect(serverSection(reader({}))).toEqual({
      model: null,
      chatModel: null,
      backend: "auto",
      device: "auto",
      decode: "auto",
      gpuLayers: 0,
      contextSize: 4096,
      threads: null,
      kvCacheMb: null,
      fimFamily: null,
      nextEditModel: null,
      nextEditFormat: null,
      endpoint: null,
      apiKey: null,
      remoteModel: null,
      remoteChatModel: null,
      remoteNextEditModel: null,
      engine: "auto",
      engineIdleExit: 300,
      maxTokensSingleLine: 48,
      maxTokensMultiLine: 96,
      debounceMs: 20,
      invokedSuggestions: 3,
      temperature: 0,
      minConfidence: 0.15,
      speculativeSuggestions: 2,
      suffixRanking: "auto",
      completionMenu: "auto",
      completionMenuWaitMs: 500,
      completionMenuPlace: "first",
      prefixTokens: 1536,
      suffixTokens: 512,
      contextTokens: 512,
      maxDocumentBytes: 4194304,
      maxSelectionChars: 16000,
      typeAheadDocuments: 32,
      usageCounts: true,
    });
  });

  it("passes what the user set", () => {
    const section = serverSection(
      reader({
        model: "/models/coder.gguf",
        backend: "llama.cpp",
        gpuLayers: -1,
        threads: 2,
        temperature: 0.4,
        usageCounts: false,
      }),
    );
    expect(section).toMatchObject({
      usageCounts: false,
      model: "/models/coder.gguf",
      backend: "llama.cpp",
      gpuLayers: -1,
      threads: 2,
      temperature: 0.4,
    });
  });

  it("leaves out the extension's own keys", () => {
    const section = serverSection(
      reader({ serverPath: "/bin/infill-lsp", enable: false, serverArgs: ["serve"] }),
    );
    for (const key of [...EXTENSION_SETTINGS, "serverPath", "serverArgs"]) {
      expect(section).not.toHaveProperty(key);
    }
  });

  it("sends a reset path as null, so that the server goes back to its default model", () => {
    expect(serverSection(reader({ model: "", chatModel: "   " }))).toMatchObject({
      model: null,
      chatModel: null,
    });
  });

  it("sends the default for nulls and wrongly typed values instead of something the server rejects", () => {
    const section = serverSection(
      reader({ contextSize: null, debounceMs: "fast", backend: 3, threads: "many", usageCounts: "no" }),
    );
    expect(section).toMatchObject({
      contextSize: 4096,
      debounceMs: 20,
      backend: "auto",
      threads: null,
      usageCounts: true,
    });
  });
});

describe("the contributed settings (package.json)", () => {
  it("contribute every server key with the server's default", () => {
    for (const setting of SERVER_SETTINGS) {
      const entry = contributed[`infill.${setting.key}`];
      expect(entry, setting.key).toBeDefined();
      // Paths default to "" in the settings UI: the server reads "" as its default.
      const expected = setting.default === null && setting.kind === "string" ? "" : setting.default;
      expect(entry?.default, setting.key).toEqual(expected);
    }
  });

  it("add the extension's own keys and nothing the server does not know", () => {
    const known = new Set([
      ...SERVER_SETTINGS.map((s) => `infill.${s.key}`),
      "infill.serverPath",
      "infill.serverArgs",
      "infill.enable",
      "infill.nextEdits.enabled",
      "infill.trace.server",
    ]);
    expect(new Set(Object.keys(contributed))).toEqual(known);
    expect(contributed["infill.enable"]?.default).toBe(true);
  });
});

describe("restarting on a settings change", () => {
  it("restarts for the server's path or arguments only", () => {
    expect(needsRestart((s) => s === "infill.serverPath")).toBe(true);
    expect(needsRestart((s) => s === "infill.serverArgs")).toBe(true);
    expect(needsRestart((s) => s === "infill.model" || s === "infill.enable")).toBe(false);
  });
});
