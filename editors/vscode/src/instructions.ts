/** The Rewrite instruction picker's choices: the server's presets and the user's own text. */

/** The presets the server offers too (lsp_server/code_actions.py); the first is its default. */
export const PRESET_INSTRUCTIONS: readonly string[] = [
  "Make it clearer and more idiomatic without changing what it does.",
  "Add type hints.",
  "Add a docstring and comments.",
  "Make it iterative instead of recursive.",
  "Make it faster.",
];

export interface InstructionItem {
  readonly label: string;
  readonly description?: string;
  /** Keeps VS Code from hiding the typed item because its label does not fuzzy-match. */
  readonly alwaysShow?: boolean;
}

export const CUSTOM_DESCRIPTION = "your instruction";

/** The items for what the user has typed so far: their own words first, then the presets. */
export function instructionItems(typed: string): InstructionItem[] {
  const own = typed.trim();
  const presets: InstructionItem[] = PRESET_INSTRUCTIONS.map((label) => ({ label }));
  if (!own || PRESET_INSTRUCTIONS.includes(own)) {
    return presets;
  }
  return [{ label: own, description: CUSTOM_DESCRIPTION, alwaysShow: true }, ...presets];
}
