/** The target of a command run from the palette or the context menu: the active selection. */
import * as vscode from "vscode";
import { parseTarget, type CommandTarget } from "./targets";

/**
 * The command's own target when it came from a code action, else the active editor's
 * selection (an empty one is the cursor: the server then takes the enclosing block).
 */
export function commandTarget(argument: unknown): CommandTarget | undefined {
  const given = parseTarget(argument);
  if (given) {
    return given;
  }
  const editor = vscode.window.activeTextEditor;
  if (!editor) {
    return undefined;
  }
  const { start, end } = editor.selection;
  return {
    uri: editor.document.uri.toString(),
    range: {
      start: { line: start.line, character: start.character },
      end: { line: end.line, character: end.character },
    },
    version: editor.document.version,
  };
}
