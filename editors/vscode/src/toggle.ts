/** Turning inline suggestions off and on: the `infill.enable` setting, in the user's settings. */

export interface EnableSetting {
  get(key: "enable"): boolean | undefined;
  /** `global: true` writes the user settings, so the choice holds in every workspace. */
  update(key: "enable", value: boolean, global: true): Thenable<void>;
}

/**
 * Flips `infill.enable` in the user settings and returns the value now in effect: a workspace
 * setting overrides the user's, and then the flip does not take.
 */
export async function toggleSuggestions(
  config: EnableSetting,
): Promise<{ enabled: boolean; overridden: boolean }> {
  const wanted = !(config.get("enable") ?? true);
  await config.update("enable", wanted, true);
  const enabled = config.get("enable") ?? true;
  return { enabled, overridden: enabled !== wanted };
}

export function toggleMessage({ enabled, overridden }: { enabled: boolean; overridden: boolean }): string {
  const state = `infill: inline suggestions ${enabled ? "on" : "off"}`;
  return overridden ? `${state} (the workspace's infill.enable setting decides)` : state;
}
