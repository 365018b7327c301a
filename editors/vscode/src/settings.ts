/**
 * The `infill` settings: which keys belong to the server, their defaults, and the section the
 * server receives. VS Code keeps extension-only keys (serverPath, enable, ...) in the same
 * section; they never reach the server, so a server upgrade can never misread them.
 */

import manifest from "../package.json";

/** One server setting: its camelCase key (as the server reads it) and default. */
export interface ServerSetting {
  readonly key: string;
  /** What the value is: a path or a choice (string), a number, or on/off. */
  readonly kind: "string" | "number" | "boolean";
  /** null: the server decides (its default model, the free cores, ...). */
  readonly default: string | number | boolean | null;
}

/** Keys of the `infill` section that only the extension reads. */
export const EXTENSION_SETTINGS = ["serverPath", "serverArgs", "enable", "nextEdits", "trace"] as const;

/** A setting as the manifest declares it (`contributes.configuration.properties`). */
interface DeclaredSetting {
  readonly type: string | readonly string[];
  readonly default?: unknown;
}

/**
 * The server's keys with the server's defaults, read from the manifest: `package.json`
 * declares every setting once, for the settings UI, and tests/editors/test_editor_settings.py
 * holds its server keys and defaults to lsp_server/settings.py. A path's default "" (and a
 * null) is null here: the server decides.
 */
export const SERVER_SETTINGS: readonly ServerSetting[] = Object.entries(
  manifest.contributes.configuration.properties as Record<string, DeclaredSetting>,
)
  .map(([name, schema]): [string, DeclaredSetting] => [name.replace(/^infill\./, ""), schema])
  .filter(([key]) => !(EXTENSION_SETTINGS as readonly string[]).includes(key.split(".")[0] ?? key))
  .map(([key, schema]) => {
    const types = typeof schema.type === "string" ? [schema.type] : schema.type;
    const kind = types.includes("string") ? "string" : types.includes("boolean") ? "boolean" : "number";
    const value = schema.default;
    const fallback =
      typeof value === "string" || typeof value === "number" || typeof value === "boolean" ? value : null;
    return { key, kind, default: fallback === "" ? null : fallback };
  });

/** Keys whose change needs a new server process (it is started with them). */
export const RESTART_SETTINGS = ["serverPath", "serverArgs"] as const;

export type ServerSection = Record<string, string | number | boolean | null>;

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

function normalise(value: unknown, setting: ServerSetting): string | number | boolean | null {
  if (setting.kind === "string" && typeof value === "string" && value.trim() !== "") {
    return value.trim();
  }
  if (setting.kind === "number" && typeof value === "number" && Number.isFinite(value)) {
    return value;
  }
  if (setting.kind === "boolean" && typeof value === "boolean") {
    return value;
  }
  return setting.default;
}

/** Whether a configuration change touches a key that needs a new server process. */
export function needsRestart(affects: (section: string) => boolean): boolean {
  return RESTART_SETTINGS.some((key) => affects(`infill.${key}`));
}
