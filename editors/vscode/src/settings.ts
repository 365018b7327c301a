/**
 * The `infill` settings: which keys belong to the server, their defaults, and the section the
 * server receives. VS Code keeps extension-only keys (serverPath, enable, ...) in the same
 * section; they never reach the server, so a server upgrade can never misread them.
 */

/** One server setting: its camelCase key (as the server reads it) and default. */
export interface ServerSetting {
  readonly key: string;
  /** What the value is: a path or a choice (string) or a number. */
  readonly kind: "string" | "number";
  /** null: the server decides (its default model, half the cores, ...). */
  readonly default: string | number | null;
}

/** The server's keys with the server's defaults (lsp_server/settings.py). */
export const SERVER_SETTINGS: readonly ServerSetting[] = [
  { key: "model", kind: "string", default: null },
  { key: "chatModel", kind: "string", default: null },
  { key: "backend", kind: "string", default: "auto" },
  { key: "device", kind: "string", default: "auto" },
  { key: "gpuLayers", kind: "number", default: 0 },
  { key: "contextSize", kind: "number", default: 4096 },
  { key: "threads", kind: "number", default: null },
  { key: "maxTokensSingleLine", kind: "number", default: 48 },
  { key: "maxTokensMultiLine", kind: "number", default: 96 },
  { key: "debounceMs", kind: "number", default: 20 },
  { key: "invokedSuggestions", kind: "number", default: 3 },
  { key: "temperature", kind: "number", default: 0 },
  { key: "prefixTokens", kind: "number", default: 1536 },
  { key: "suffixTokens", kind: "number", default: 512 },
  { key: "maxDocumentBytes", kind: "number", default: 4194304 },
  { key: "maxSelectionChars", kind: "number", default: 16000 },
  { key: "typeAheadDocuments", kind: "number", default: 32 },
];

/** Keys of the `infill` section that only the extension reads. */
export const EXTENSION_SETTINGS = ["serverPath", "serverArgs", "enable", "trace"] as const;

/** Keys whose change needs a new server process (it is started with them). */
export const RESTART_SETTINGS = ["serverPath", "serverArgs"] as const;

export type ServerSection = Record<string, string | number | null>;

/** Reads one key of the `infill` section (WorkspaceConfiguration.get fits). */
export type SettingReader = (key: string) => unknown;

/**
 * The section the server receives: every server key, always. The server merges what it
 * receives over its current settings, so a key left out would keep a stale value after the
 * user resets it: a reset must arrive as the default (null for "the server decides").
 * Values of the wrong type (a hand-edited settings.json) are sent as the default too, so the
 * server never warns about a value the user cannot see in the settings UI.
 */
export function serverSection(read: SettingReader): ServerSection {
  const section: ServerSection = {};
  for (const setting of SERVER_SETTINGS) {
    section[setting.key] = normalise(read(setting.key), setting);
  }
  return section;
}

function normalise(value: unknown, setting: ServerSetting): string | number | null {
  if (setting.kind === "string" && typeof value === "string" && value.trim() !== "") {
    return value.trim();
  }
  if (setting.kind === "number" && typeof value === "number" && Number.isFinite(value)) {
    return value;
  }
  return setting.default;
}

/** Whether a configuration change touches a key that needs a new server process. */
export function needsRestart(affects: (section: string) => boolean): boolean {
  return RESTART_SETTINGS.some((key) => affects(`infill.${key}`));
}
